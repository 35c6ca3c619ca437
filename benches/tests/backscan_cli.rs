//! `backscan` end to end: bad command lines exit with 2 and a clear message;
//! a tiny run prints one JSON object per row with the public field names,
//! one checksum for every forward and backward run, backward reads combined
//! with backward combining on and single blocks with it off. No timing is
//! asserted.

mod common;

use common::{assert_usage_error, field, num, with_temp_file};

fn backscan(args: &[&str]) -> std::process::Output {
    common::run("backscan", env!("CARGO_BIN_EXE_backscan"), args)
}

#[test]
fn bad_command_lines_exit_2_with_a_message() {
    for (args, needle) in [
        (&["--bogus"][..], "unknown option --bogus"),
        (&["--mode", "sideways"], "sideways"),
        (&["--combining", "maybe"], "maybe"),
        (&["--combine", "1,x"], "\"x\""),
        (&["--combine", "0"], "io_combine_limit must be 1 to"),
        (&["--combine", "1,5000"], "io_combine_limit must be 1 to"),
        (&["--combine", ""], "--combine"),
        (&["--pairs", "0"], "--pairs"),
        (&["--pairs", "-1"], "--pairs"),
        (&["--pairs", "many"], "--pairs"),
        (&["--retries", "x"], "--retries"),
        (&["--nowait", "maybe"], "--nowait"),
        (&["--prefetch", "maybe"], "--prefetch"),
        (&["--yield-budget", "soon"], "--yield-budget"),
        (&["--max-ios", "lots"], "--max-ios"),
        (&["--max-ios", "100000"], "--max-ios"),
        (&["--size", "12XB"], "unit"),
        (&["--size", "1000"], "multiple of the block size"),
        (&["--max-ios"], "needs a value"),
        (&["--json=yes"], "takes no value"),
        (&["--direct", "--mode", "buffered"], "contradicts"),
        (&["--block-size", "1000"], "power of two"),
        (&["stray"], "unexpected argument"),
    ] {
        let out = backscan(args);
        assert_usage_error("backscan", args, needle, &out);
        assert!(out.stdout.is_empty(), "{args:?}: printed to stdout");
    }
}

#[test]
fn help_says_the_default_size() {
    let out = backscan(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("default 256MiB"), "{text}");
}

#[test]
fn tiny_run_reports_json_per_row() {
    let out = with_temp_file("backscan", |p| {
        backscan(&[
            "--file",
            p,
            "--create",
            "--size",
            "4MiB",
            "--pairs",
            "1",
            "--combine",
            "1,8",
            "--json",
            "--retries",
            "0",
            "--prefetch",
            "off",
            "--yield-budget",
            "64",
        ])
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "backscan failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    // 2 limits x 2 directions x 2 combining settings x 2 modes.
    assert_eq!(lines.len(), 16, "{stdout}");
    let checksum = field(lines[0], "checksum");
    let mut seen = Vec::new();
    for l in &lines {
        for key in [
            "combine",
            "direction",
            "backward_combining",
            "direct",
            "seconds",
            "seconds_min",
            "seconds_max",
            "reads",
            "mean_blocks_per_read",
            "checksum",
            "pairs",
            "pairs_redone",
        ] {
            field(l, key);
        }
        assert_eq!(field(l, "checksum"), checksum, "checksums differ: {stdout}");
        assert_eq!(field(l, "pages"), "512", "{l}");
        assert_eq!(field(l, "pairs"), "1", "{l}");
        assert_eq!(field(l, "prefetch"), "false", "{l}");
        assert_eq!(field(l, "yield_budget"), "64", "{l}");
        assert!(num(l, "resident_before_max") <= 0.01, "not cold: {l}");
        let (min, med, max) = (
            num(l, "seconds_min"),
            num(l, "seconds"),
            num(l, "seconds_max"),
        );
        assert!(min > 0.0 && min <= med && med <= max, "{l}");
        let combine = field(l, "combine");
        let dir = field(l, "direction");
        let on = field(l, "backward_combining");
        let direct = field(l, "direct");
        assert!(matches!(combine, "1" | "8"), "{l}");
        assert!(matches!(dir, "forward" | "backward"), "{l}");
        assert!(matches!(on, "true" | "false"), "{l}");
        assert!(matches!(direct, "true" | "false"), "{l}");
        seen.push((combine, dir, on, direct));
        let bpr = num(l, "mean_blocks_per_read");
        let reads = num(l, "reads");
        assert!(reads > 0.0, "{l}");
        match (combine, dir, on) {
            ("1", _, _) => assert_eq!(bpr, 1.0, "{l}"),
            ("8", "backward", "true") => {
                assert!(bpr > 1.0, "backward combining did not combine: {l}");
                assert!(num(l, "backward_reads") > 0.0, "{l}");
            }
            ("8", "backward", "false") => {
                assert!(
                    (bpr - 1.0).abs() < 0.05,
                    "backward reads combined with combining off: {l}"
                );
                assert_eq!(num(l, "backward_reads"), 0.0, "{l}");
            }
            ("8", "forward", _) => assert!(bpr > 1.0, "forward did not combine: {l}"),
            other => panic!("unexpected row {other:?}: {l}"),
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 16, "a row is missing or repeated: {stdout}");
    // Under O_DIRECT nothing comes from the kernel's read-ahead, so with
    // backward combining on both directions make the same reads.
    for combine in ["1", "8"] {
        let find = |dir: &str| {
            *lines
                .iter()
                .find(|l| {
                    field(l, "combine") == combine
                        && field(l, "direction") == dir
                        && field(l, "backward_combining") == "true"
                        && field(l, "direct") == "true"
                })
                .expect("row")
        };
        let (f, b) = (find("forward"), find("backward"));
        let (fb, bb) = (
            num(f, "mean_blocks_per_read"),
            num(b, "mean_blocks_per_read"),
        );
        assert!((bb - fb).abs() <= 0.1 * fb, "{f}\n{b}");
    }
    assert!(stderr.contains("agrees"), "{stderr}");
}

#[test]
fn a_single_mode_runs_only_its_rows() {
    let out = with_temp_file("backscan-b", |p| {
        backscan(&[
            "--file",
            p,
            "--create",
            "--size",
            "1MiB",
            "--pairs",
            "2",
            "--combine",
            "16",
            "--mode",
            "buffered",
            "--combining",
            "on",
            "--json",
            "--retries",
            "0",
        ])
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for l in &lines {
        assert_eq!(field(l, "direct"), "false", "{l}");
        assert_eq!(field(l, "backward_combining"), "true", "{l}");
        assert_eq!(field(l, "pairs"), "2", "{l}");
        assert_eq!(field(l, "pages"), "128", "{l}");
    }
}

/// `-h` prints the usage text, like `--help`.
#[test]
fn short_h_is_help() {
    common::assert_short_help("backscan", env!("CARGO_BIN_EXE_backscan"), &[]);
}

/// A `--file` that does not exist is an error without `--create`: a
/// mistyped path never becomes a new data file.
#[test]
fn missing_file_without_create_is_an_error_and_creates_nothing() {
    common::assert_missing_file_is_not_created("backscan", env!("CARGO_BIN_EXE_backscan"), &[]);
}

/// A data file larger than the free space is refused before a byte is
/// written.
#[test]
fn size_beyond_the_free_space_is_refused_before_writing() {
    common::assert_too_large_is_refused("backscan", env!("CARGO_BIN_EXE_backscan"), &[]);
}
