//! `bitmapscan` end to end: every mode and `max_ios` visits the same
//! matching tuples (count and checksum), reads only the bitmap's blocks,
//! keeps at most `max_ios` reads in flight; lossy pages are rechecked to the
//! same answer; bad command lines exit with 2 naming the flag.

mod common;

use common::{assert_usage_error, field, num, with_temp_file};

fn bitmapscan(args: &[&str]) -> std::process::Output {
    common::run("bitmapscan", env!("CARGO_BIN_EXE_bitmapscan"), args)
}

/// Runs `bitmapscan --json` on a fresh 4 MiB file with `extra` flags and
/// returns its JSON lines.
fn runs(tag: &str, extra: &[&str]) -> Vec<String> {
    let out = with_temp_file(tag, |p| {
        let mut args = vec![
            "--file", p, "--create", "--size", "4MiB", "--json", "--repeat", "1",
        ];
        args.extend_from_slice(extra);
        bitmapscan(&args)
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bitmapscan failed: {stderr}");
    assert!(stderr.contains("all runs agree"), "{stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_mode_and_depth_visits_the_same_tuples() {
    let lines = runs("bitmap-uniform", &["--density", "0.02", "--max-ios", "0,4"]);
    // Two max_ios values × three modes.
    assert_eq!(lines.len(), 6, "{lines:?}");
    let first = &lines[0];
    let matching_blocks = num(first, "matching_blocks");
    // 512 blocks of 32 tuples at 2%: about 240 blocks hold a match, not all.
    assert!(matching_blocks > 50.0 && matching_blocks < 512.0, "{first}");
    assert!(num(first, "tuples") >= matching_blocks, "{first}");
    let mut modes = Vec::new();
    for l in &lines {
        assert_eq!(field(l, "checksum"), field(first, "checksum"), "{l}");
        assert_eq!(field(l, "tuples"), field(first, "matching_tuples"), "{l}");
        // Only the bitmap's blocks are read, each once.
        assert_eq!(num(l, "pages"), matching_blocks, "{l}");
        assert_eq!(field(l, "resident_before"), "0", "{l}");
        let max_ios = num(l, "max_ios");
        let in_flight = num(l, "max_in_flight");
        assert!(in_flight >= 1.0 && in_flight <= max_ios.max(1.0), "{l}");
        assert_eq!(
            field(l, "direct") == "true",
            field(l, "mode") == "direct",
            "{l}"
        );
        modes.push(field(l, "mode").to_owned());
    }
    assert_eq!(
        modes,
        [
            "readahead",
            "random",
            "direct",
            "readahead",
            "random",
            "direct"
        ]
    );
    // With reads in flight the scan actually overlapped them.
    assert!(lines.iter().any(|l| num(l, "max_in_flight") > 1.0));
}

#[test]
fn lossy_pages_are_rechecked_to_the_same_answer() {
    let args = [
        "--pattern",
        "clustered",
        "--density",
        "0.2",
        "--cluster",
        "4",
    ];
    let exact = runs(
        "bitmap-exact",
        &[&args[..], &["--max-ios", "8", "--modes", "random"]].concat(),
    );
    let lossy = runs(
        "bitmap-lossy",
        &[
            &args[..],
            &["--max-ios", "8", "--modes", "random", "--exact-pages", "10"],
        ]
        .concat(),
    );
    let (e, l) = (&exact[0], &lossy[0]);
    assert_eq!(field(e, "lossy_pages"), "0", "{e}");
    assert!(num(l, "lossy_pages") > 0.0, "{l}");
    assert_eq!(field(e, "tuples"), field(l, "tuples"));
    assert_eq!(field(e, "checksum"), field(l, "checksum"));
    // Clustered: whole pages match, in runs, so reads combine.
    assert_eq!(num(e, "tuples"), 32.0 * num(e, "matching_blocks"), "{e}");
    assert!(num(e, "mean_blocks_per_read") > 1.5, "{e}");
}

#[test]
fn bad_command_lines_exit_2_with_a_message() {
    for (args, needle) in [
        (&["--density", "0"][..], "--density"),
        (&["--density", "1.5"], "--density"),
        (&["--pattern", "zipf"], "zipf"),
        (&["--max-ios", "1,x"], "\"x\" is not a number"),
        (&["--max-ios", "100000"], "--max-ios 100000"),
        (&["--modes", "fast"], "fast"),
        (&["--cluster", "0"], "--cluster"),
        (&["--repeat", "0"], "--repeat"),
        (&["--block-size", "3000"], "power of two"),
    ] {
        let out = bitmapscan(args);
        assert_usage_error("bitmapscan", args, needle, &out);
    }
}

/// `-h` prints the usage text, like `--help`.
#[test]
fn short_h_is_help() {
    common::assert_short_help("bitmapscan", env!("CARGO_BIN_EXE_bitmapscan"), &[]);
}

/// A `--file` that does not exist is an error without `--create`: a
/// mistyped path never becomes a new data file.
#[test]
fn missing_file_without_create_is_an_error_and_creates_nothing() {
    common::assert_missing_file_is_not_created("bitmapscan", env!("CARGO_BIN_EXE_bitmapscan"), &[]);
}

/// A data file larger than the free space is refused before a byte is
/// written.
#[test]
fn size_beyond_the_free_space_is_refused_before_writing() {
    common::assert_too_large_is_refused("bitmapscan", env!("CARGO_BIN_EXE_bitmapscan"), &[]);
}

#[test]
fn reading_through_holes_visits_the_same_tuples_in_fewer_reads() {
    let args = ["--density", "0.02", "--max-ios", "4"];
    let plain = runs("bitmap-gap0", &args);
    let mut with_gaps = args.to_vec();
    with_gaps.extend(["--gap-limit", "4"]);
    let gaps = runs("bitmap-gap4", &with_gaps);
    assert_eq!(plain.len(), gaps.len());
    for (p, g) in plain.iter().zip(&gaps) {
        assert_eq!(field(p, "mode"), field(g, "mode"));
        assert_eq!(field(p, "checksum"), field(g, "checksum"), "{g}");
        assert_eq!(num(p, "pages"), num(g, "pages"), "{g}");
        assert_eq!(num(p, "gap_blocks"), 0.0, "{p}");
        assert_eq!(num(g, "gap_limit"), 4.0, "{g}");
        assert!(num(g, "gap_blocks") > 0.0, "{g}");
        assert!(num(g, "reads") < num(p, "reads"), "{p}\n{g}");
    }
}
