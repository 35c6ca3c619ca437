//! `remote` end to end, on a small configuration (1000 pages, 0.05 ms per
//! read, a 64-frame pool, one run): every row is printed as one JSON object
//! with the public field names; the parallel workers read each page once;
//! synchronized scans read fewer pages from storage than unsynchronized
//! ones; look-ahead keeps several reads in flight; the one-at-a-time reader
//! keeps one. No timing is asserted. Bad command lines exit with 2 and a
//! message naming the flag.

mod common;

use common::{assert_usage_error, field, num};

fn remote(args: &[&str]) -> std::process::Output {
    common::run("remote", env!("CARGO_BIN_EXE_remote"), args)
}

const FIELDS: [&str; 10] = [
    "reader",
    "combine",
    "streams",
    "pages",
    "seconds",
    "ideal_seconds",
    "reads",
    "pages_read_from_storage",
    "max_in_flight",
    "achieved_latency_ms",
];

#[test]
fn small_run_reports_every_row() {
    let out = remote(&[
        "--pages",
        "1000",
        "--pool-frames",
        "64",
        "--latency-ms",
        "0.05",
        "--repeat",
        "1",
        "--retries",
        "0",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "remote failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let rows: Vec<&str> = lines.iter().map(|l| field(l, "row")).collect();
    assert_eq!(
        rows,
        [
            "one-at-a-time",
            "combine1",
            "combine16",
            "sync-on",
            "sync-off",
            "parallel"
        ],
        "{stdout}"
    );
    let row = |name: &str| {
        *lines
            .iter()
            .find(|l| field(l, "row") == name)
            .expect("row present")
    };
    for l in &lines {
        for key in FIELDS {
            field(l, key);
        }
        assert_eq!(field(l, "pages"), "1000", "{l}");
        let reader = field(l, "reader");
        assert!(
            reader == "one-at-a-time" || reader.starts_with("pagestream"),
            "{l}"
        );
        assert!(num(l, "ideal_seconds") > 0.0, "{l}");
        assert!(num(l, "seconds") > 0.0, "{l}");
        assert!(num(l, "achieved_latency_ms") >= 0.05, "{l}");
        assert!(num(l, "reads") >= 1.0, "{l}");
    }
    // One block at a time: one read in flight, a read per page.
    let one = row("one-at-a-time");
    assert_eq!(field(one, "reader"), "one-at-a-time");
    assert_eq!(field(one, "max_in_flight"), "1", "{one}");
    assert_eq!(field(one, "reads"), "1000", "{one}");
    // A single stream reads each page once, keeping many reads in flight.
    for name in ["combine1", "combine16"] {
        let l = row(name);
        assert_eq!(field(l, "reader"), "pagestream", "{l}");
        assert_eq!(field(l, "streams"), "1", "{l}");
        assert_eq!(field(l, "pages_read_from_storage"), "1000", "{l}");
        assert!(num(l, "max_in_flight") > 1.0, "look-ahead collapsed: {l}");
        assert!(num(l, "ramp_round_trips") >= 1.0, "{l}");
    }
    assert_eq!(field(row("combine1"), "combine"), "1");
    assert_eq!(field(row("combine16"), "combine"), "16");
    // Ten scans each return the whole table.
    let (on, off) = (row("sync-on"), row("sync-off"));
    for l in [on, off] {
        assert!(field(l, "reader").starts_with("pagestream"), "{l}");
        assert_eq!(field(l, "streams"), "10", "{l}");
        assert_eq!(field(l, "pages_returned"), "10000", "{l}");
        assert!(num(l, "max_in_flight") > 1.0, "{l}");
    }
    assert_eq!(field(on, "sync"), "true");
    assert_eq!(field(off, "sync"), "false");
    // The stagger (100 pages) is larger than the pool: unsynchronized scans
    // find nothing another left behind; synchronized ones share reads.
    let (r_on, r_off) = (
        num(on, "pages_read_from_storage"),
        num(off, "pages_read_from_storage"),
    );
    assert!(
        r_on < r_off,
        "sync on read {r_on} pages, off {r_off}:\n{on}\n{off}"
    );
    assert!(r_on >= 1000.0, "{on}");
    assert!(num(on, "reads_shared") + num(on, "hits") > 0.0, "{on}");
    // Parallel workers: every page read exactly once, by one of them.
    let par = row("parallel");
    assert!(field(par, "reader").starts_with("pagestream"), "{par}");
    assert_eq!(field(par, "streams"), "2", "{par}");
    assert_eq!(field(par, "pages_read_from_storage"), "1000", "{par}");
    assert_eq!(field(par, "pages_returned"), "1000", "{par}");
    assert!(num(par, "max_in_flight") > 1.0, "{par}");
}

#[test]
fn rows_and_ramp_can_be_chosen() {
    let out = remote(&[
        "--pages",
        "200",
        "--latency-ms",
        "0.02",
        "--repeat",
        "2",
        "--rows",
        "parallel,combine16",
        "--ramp",
        "--pin",
        "off",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "remote failed: {stderr}");
    let rows: Vec<&str> = stdout.lines().map(|l| field(l, "row")).collect();
    assert_eq!(rows, ["combine16", "parallel"], "{stdout}");
    for l in stdout.lines() {
        assert_eq!(field(l, "runs"), "2", "{l}");
        assert_eq!(field(l, "pinned_cpus"), "no", "{l}");
        // Runs whose storage ran late are run again, and counted.
        assert!(num(l, "runs_redone") <= 6.0, "{l}");
        assert!(num(l, "latency_ok_runs") <= 2.0, "{l}");
        assert!(num(l, "seconds_min") <= num(l, "seconds_max"), "{l}");
    }
    // The ramp goes to stderr under --json: reads in flight per round trip.
    assert!(
        stderr.contains("ramp io_combine_limit 1:") && stderr.contains("ramp io_combine_limit 16:"),
        "{stderr}"
    );
}

#[test]
fn bad_command_lines_exit_2_with_a_message() {
    for (args, needle) in [
        (&["--bogus"][..], "unknown option --bogus"),
        (&["--pages", "0"], "--pages"),
        (&["--pages", "many"], "--pages"),
        (&["--pool-frames", "0"], "--pool-frames"),
        (&["--max-ios", "0"], "--max-ios"),
        (&["--max-ios", "5000"], "--max-ios"),
        (&["--combine", "0"], "--combine"),
        (&["--repeat", "0"], "--repeat"),
        (&["--latency-ms", "-1"], "--latency-ms"),
        (&["--latency-ms", "0"], "--latency-ms"),
        (&["--scans", "11"], "--scans"),
        (&["--workers", "0"], "--workers"),
        (&["--rows", "fast"], "--rows"),
        (&["--executor", "threads"], "--executor"),
        (&["--sync-report", "never"], "--sync-report"),
        (&["--pin", "maybe"], "--pin"),
        (&["--retries", "-1"], "--retries"),
        (&["--latency-ms"], "needs a value"),
        (&["--json=yes"], "takes no value"),
        (&["stray"], "unexpected argument"),
    ] {
        let out = remote(args);
        assert_usage_error("remote", args, needle, &out);
    }
}

/// `-h` prints the usage text, like `--help`.
#[test]
fn short_h_is_help() {
    common::assert_short_help("remote", env!("CARGO_BIN_EXE_remote"), &[]);
}
