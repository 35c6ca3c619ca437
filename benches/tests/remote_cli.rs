//! `remote` end to end, on a small configuration (1000 pages, 0.05 ms per
//! read, a 64-frame pool, one run): every row is printed as one JSON object
//! with the public field names; the parallel workers read each page once;
//! synchronized scans read fewer pages from storage than unsynchronized
//! ones; look-ahead keeps several reads in flight; the one-at-a-time reader
//! keeps one. No timing is asserted. Bad command lines exit with 2 and a
//! message naming the flag. `remote --serve nginx` (and `--serve moto`)
//! with tiny sizes: every row, its fields and its checked pages.

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
        // Store runs.
        (&["--store", "ftp://host/x"], "--store"),
        (&["--store", "table.dat"], "--store"),
        (&["--serve", "apache"], "--serve"),
        (
            &["--store", "s3://b/k", "--serve", "nginx"],
            "--store and --serve",
        ),
        (
            &["--request-mib-per-s", "60"],
            "--request-mib-per-s needs --store",
        ),
        (&["--read-sizes", "1MiB"], "--read-sizes needs --store"),
        (
            &["--serve", "nginx", "--request-mib-per-s", "-1"],
            "--request-mib-per-s",
        ),
        (
            &["--serve", "nginx", "--request-mib-per-s", "fast"],
            "--request-mib-per-s",
        ),
        (
            &["--serve", "nginx", "--read-sizes", "5KiB"],
            "--read-sizes",
        ),
        (
            &["--serve", "nginx", "--read-sizes", "64MiB"],
            "--read-sizes",
        ),
        (&["--serve", "nginx", "--in-flight", "0"], "--in-flight"),
        (
            &["--serve", "nginx", "--in-flight", "4,2000"],
            "--in-flight",
        ),
        (
            &["--serve", "nginx", "--per-page-pages", "0"],
            "--per-page-pages",
        ),
        (&["--serve", "nginx", "--density", "0"], "--density"),
        (&["--serve", "nginx", "--density", "1.5"], "--density"),
        (&["--serve", "nginx", "--stall-every", "0"], "--stall-every"),
        (&["--serve", "nginx", "--stall-ms", "0"], "--stall-ms"),
        (
            &["--serve", "nginx", "--throttle-chunk", "1GiB"],
            "--throttle-chunk",
        ),
        (
            &["--serve", "nginx", "--object-size", "1000"],
            "--object-size",
        ),
        (
            &["--store", "http://h/k", "--object-size", "1MiB"],
            "--object-size",
        ),
        (&["--serve", "nginx", "--pool-frames", "0"], "--pool-frames"),
        (&["--serve", "nginx", "--latency-ms", "0"], "--latency-ms"),
        (&["--serve", "nginx", "--rows", "combine16"], "--rows"),
        (&["--serve", "nginx", "--scans", "11"], "--scans"),
        (&["--serve", "nginx", "--pages", "10"], "--pages"),
        (&["--serve", "nginx", "--max-ios", "10"], "--max-ios"),
        (&["--serve", "nginx", "--ramp"], "--ramp"),
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

/// Where `program` is on PATH (or at one of `also`).
fn installed(program: &str, also: &[&str]) -> Result<std::path::PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .chain(also.iter().map(std::path::PathBuf::from))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{program} is not installed"))
}

/// Every store row, tiny: a 2 MiB object on nginx, 1 ms and 200 MiB/s per
/// GET, a 4-cell grid, every other GET stalled 50 ms. Checks the rows and their fields;
/// every run's pages were checked against the file by `remote` itself.
#[test]
fn serve_nginx_runs_every_store_row() {
    if pagestream::testing::require("nginx", installed("nginx", &["/usr/sbin/nginx"])).is_none() {
        return;
    }
    let out = remote(&[
        "--serve",
        "nginx",
        "--object-size",
        "2MiB",
        "--repeat",
        "1",
        "--latency-ms",
        "1",
        "--request-mib-per-s",
        "200",
        "--read-sizes",
        "64KiB,256KiB",
        "--in-flight",
        "2,8",
        "--per-page-pages",
        "4",
        "--stall-ms",
        "50",
        "--stall-every",
        "2",
        "--scans",
        "3",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "remote failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let rows: Vec<String> = lines
        .iter()
        .map(|l| format!("{} {}", field(l, "row"), field(l, "pattern")))
        .collect();
    let want = [
        "server-curl sequential",
        "server-curl-ranges sequential",
        "server-range-gets sequential",
        "throttle sequential",
        "per-page sequential",
        "per-page bitmap:0.01",
        "get-ranges sequential",
        "get-ranges bitmap:0.01",
        "pagestream sequential",
        "pagestream-ramp sequential",
        "pagestream bitmap:0.01",
        "grid sequential",
        "grid sequential",
        "grid sequential",
        "grid sequential",
        "pool64 sequential",
        "sync-on sequential",
        "parallel sequential",
        "hedge-on sequential",
        "hedge-off sequential",
        "unthrottled sequential",
    ];
    assert_eq!(rows, want, "{stdout}");
    for l in &lines {
        assert!(!l.contains("\"error\""), "{l}");
        for key in ["mib_per_s", "seconds", "server_mib_per_s", "store", "runs"] {
            field(l, key);
        }
        assert!(num(l, "mib_per_s") > 0.0, "{l}");
        assert!(num(l, "seconds_min") <= num(l, "seconds_max"), "{l}");
        if !field(l, "row").starts_with("server-") {
            assert!(num(l, "ideal_seconds") > 0.0, "{l}");
        }
    }
    let row = |name: &str, pattern: &str| {
        *lines
            .iter()
            .find(|l| field(l, "row") == name && field(l, "pattern") == pattern)
            .expect("row present")
    };
    // 2 MiB: 256 pages; the bitmap takes 1% of them, rounded: 3.
    assert_eq!(field(row("pagestream", "sequential"), "pages"), "256");
    assert_eq!(field(row("pagestream", "bitmap:0.01"), "pages"), "3");
    assert_eq!(field(row("per-page", "sequential"), "pages"), "4");
    assert_eq!(field(row("per-page", "sequential"), "gets"), "4");
    // get_ranges merges the whole object into one GET.
    assert_eq!(field(row("get-ranges", "sequential"), "gets"), "1");
    let seq = row("pagestream", "sequential");
    assert!(
        num(seq, "vs_anchor") > 0.0 && num(seq, "vs_per_page") > 0.0,
        "{seq}"
    );
    assert!(num(seq, "max_in_flight") >= 1.0, "{seq}");
    // Synchronized scans: three of them, each the whole object.
    assert_eq!(field(row("sync-on", "sequential"), "pages"), "768");
    assert_eq!(field(row("parallel", "sequential"), "pages"), "256");
    // The stalled rows stalled GETs and say by how much beside the
    // unstalled time.
    for h in ["hedge-on", "hedge-off"] {
        let l = row(h, "sequential");
        assert!(num(l, "stalled") >= 1.0, "{l}");
        assert!(num(l, "vs_unstalled") > 0.0, "{l}");
    }
    assert_eq!(field(row("hedge-off", "sequential"), "hedged"), "0");
    assert!(num(row("unthrottled", "sequential"), "vs_best") > 0.0);
}

/// The s3:// path through moto, if installed: the anchor and the defaults.
#[test]
fn serve_moto_runs_the_s3_path() {
    if pagestream::testing::require("moto_server", installed("moto_server", &[])).is_none() {
        return;
    }
    let out = remote(&[
        "--serve",
        "moto",
        "--object-size",
        "1MiB",
        "--repeat",
        "1",
        "--latency-ms",
        "1",
        "--rows",
        "pagestream,get-ranges",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "remote failed: {stderr}");
    for l in stdout.lines() {
        assert!(field(l, "store").starts_with("s3://"), "{l}");
        assert!(!l.contains("\"error\""), "{l}");
    }
    let seq = stdout
        .lines()
        .find(|l| field(l, "row") == "pagestream" && field(l, "pattern") == "sequential")
        .expect("pagestream row");
    assert_eq!(field(seq, "pages"), "128", "{seq}");
}
