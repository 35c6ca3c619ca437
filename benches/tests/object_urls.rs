//! Object URLs wherever the scan programs take a path: `seqscan`,
//! `backscan`, `bitmapscan`, `prewarm`, `pgcount` and `pagestream-bench
//! scan` read `http://` (nginx serving a directory) and `s3://` (moto's S3
//! server) objects with the object-store runtime and give the checksums
//! they give over the same local file; a URL with another runtime, and the
//! flags that mean nothing for an object, are one-line usage errors (exit
//! 2); a URL nothing answers at fails with exit 1 naming it, quickly (a
//! watchdog kills a hung run). The server tests are skipped without nginx
//! or moto (or fail under `CI=true`).

mod common;

use common::{assert_usage_error, field, num, run_within};
use pagestream::testing::{files::write_stamped, require};
use pagestream_object_store::testing::{Moto, Nginx};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// Every run here ends well within this (an unreachable server included:
/// object_store's retries give up in about a second).
const LIMIT: Duration = Duration::from_secs(120);

/// 4 MiB of 8 KiB blocks.
const NBLOCKS: u64 = 512;

fn exe(program: &str) -> &'static str {
    match program {
        "seqscan" => env!("CARGO_BIN_EXE_seqscan"),
        "backscan" => env!("CARGO_BIN_EXE_backscan"),
        "bitmapscan" => env!("CARGO_BIN_EXE_bitmapscan"),
        "prewarm" => env!("CARGO_BIN_EXE_prewarm"),
        "pgcount" => env!("CARGO_BIN_EXE_pgcount"),
        "pagestream-bench" => env!("CARGO_BIN_EXE_pagestream-bench"),
        _ => unreachable!("{program}"),
    }
}

fn run(program: &str, args: &[&str], env: &[(&str, String)]) -> Output {
    run_within(program, exe(program), args, env, LIMIT)
}

/// Runs `program ARGS`, which must succeed; returns its stdout lines.
fn lines(program: &str, args: &[&str], env: &[(&str, String)]) -> Vec<String> {
    let out = run(program, args, env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{program} {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

const URL: &str = "http://127.0.0.1:9/t.dat";

#[test]
fn a_url_with_another_runtime_is_a_usage_error_naming_both() {
    for (program, args) in [
        ("seqscan", &["--file", URL, "--runtime", "threadpool"][..]),
        ("prewarm", &["--file", URL, "--runtime", "threadpool"]),
        ("pgcount", &[URL, "--runtime", "threadpool"]),
        (
            "seqscan",
            &["--file", URL, "--runtime", "object-store,uring"],
        ),
    ] {
        let out = run(program, args, &[]);
        assert_usage_error(
            program,
            args,
            "not the object URL http://127.0.0.1:9/t.dat",
            &out,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("object-store"), "{err}");
    }
    let args = [
        "scan",
        "--file",
        URL,
        "--pattern",
        "forward",
        "--engine",
        "threadpool",
    ];
    let out = run("pagestream-bench", &args, &[]);
    assert_usage_error(
        "pagestream-bench",
        &args,
        "--engine threadpool reads local files",
        &out,
    );
    // And object-store with a local file.
    for (program, args, needle) in [
        (
            "seqscan",
            &["--file", "/tmp/t.dat", "--runtime", "object-store"][..],
            "not the local file /tmp/t.dat",
        ),
        (
            "seqscan",
            &["--runtime", "object-store"],
            "not the default local data file",
        ),
        (
            "pgcount",
            &["/tmp/16384", "--runtime", "object-store"],
            "not the local file",
        ),
        (
            "pagestream-bench",
            &[
                "scan",
                "--engine",
                "object-store",
                "--pattern",
                "forward",
                "--cache",
                "hot",
            ],
            "name one with --file",
        ),
    ] {
        let out = run(program, args, &[]);
        assert_usage_error(program, args, needle, &out);
    }
}

#[test]
fn flags_that_mean_nothing_for_an_object_are_usage_errors() {
    let cold = "--cache cold does not apply to the object URL";
    for (program, args, needle) in [
        (
            "seqscan",
            &["--file", URL, "--direct"][..],
            "--direct does not apply",
        ),
        (
            "seqscan",
            &["--file", URL, "--create"],
            "--create does not apply",
        ),
        ("seqscan", &["--file", URL, "--cache", "cold"], cold),
        (
            "seqscan",
            &["--file", URL, "--cache", "all"],
            "--cache cold,warm",
        ),
        (
            "prewarm",
            &["--file", URL, "--cache", "warm"],
            "--cache warm does not apply",
        ),
        (
            "prewarm",
            &["--file", URL, "--direct"],
            "--direct does not apply",
        ),
        (
            "backscan",
            &["--file", URL, "--direct"],
            "--direct does not apply",
        ),
        (
            "backscan",
            &["--file", URL, "--mode", "buffered"],
            "--mode buffered does not apply",
        ),
        (
            "backscan",
            &["--file", URL, "--create"],
            "--create does not apply",
        ),
        (
            "bitmapscan",
            &["--file", URL, "--modes", "random"],
            "--modes does not apply",
        ),
        (
            "bitmapscan",
            &["--file", URL, "--create"],
            "--create does not apply",
        ),
        (
            "pgcount",
            &[URL, "--cache", "warm"],
            "--cache warm does not apply",
        ),
        (
            "pagestream-bench",
            &[
                "scan",
                "--file",
                URL,
                "--pattern",
                "forward",
                "--cache",
                "cold",
            ],
            "--cache cold: a state of the OS page cache",
        ),
        (
            "pagestream-bench",
            &["scan", "--file", URL, "--pattern", "forward", "--direct"],
            "--direct",
        ),
        (
            "pagestream-bench",
            &[
                "scan",
                "--file",
                URL,
                "--pattern",
                "forward",
                "--readahead",
                "off",
            ],
            "--readahead off",
        ),
        (
            "pagestream-bench",
            &["scan", "--file", URL, "--pattern", "forward", "--create"],
            "--create does not apply",
        ),
    ] {
        let out = run(program, args, &[]);
        assert_usage_error(program, args, needle, &out);
    }
}

#[test]
fn a_url_nothing_answers_at_fails_naming_it_without_hanging() {
    let none = "http://127.0.0.1:1/none";
    for (program, args) in [
        ("seqscan", &["--file", none][..]),
        ("backscan", &["--file", none]),
        ("bitmapscan", &["--file", none]),
        ("prewarm", &["--file", none]),
        ("pgcount", &[none]),
        (
            "pagestream-bench",
            &["scan", "--file", none, "--pattern", "forward"],
        ),
    ] {
        let out = run(program, args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{program} {args:?}: {err}");
        assert!(!err.contains("panicked"), "{program}: {err}");
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("{program}: error: ")))
            .unwrap_or_else(|| panic!("{program}: no error line in {err}"));
        assert!(line.contains(none), "{program}: {line}");
    }
}

/// A directory holding `t.dat`, a stamped file of [`NBLOCKS`] blocks;
/// removed when dropped.
/// A directory holding `served/t.dat` (for nginx) and the same bytes in
/// `local.dat` (for the local runs): a file nginx has just sent may keep
/// pages in the page cache for a while, so a local cold run of the served
/// file itself could not evict it.
struct Served(PathBuf);

impl Served {
    fn new(tag: &str) -> Served {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("object-urls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("served")).unwrap();
        write_stamped(&dir.join("local.dat"), 0x000b_1ec7, NBLOCKS, 8192);
        std::fs::copy(dir.join("local.dat"), dir.join("served/t.dat")).unwrap();
        Served(dir)
    }

    /// The directory to serve.
    fn root(&self) -> PathBuf {
        self.0.join("served")
    }

    /// The local copy.
    fn file(&self) -> String {
        self.0.join("local.dat").to_str().unwrap().to_owned()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// seqscan's checksum of the local file (a cold threadpool run).
fn local_checksum(file: &str) -> String {
    let l = lines(
        "seqscan",
        &[
            "--file",
            file,
            "--runtime",
            "threadpool",
            "--cache",
            "cold",
            "--json",
        ],
        &[],
    );
    field(&l[0], "checksum").to_owned()
}

/// seqscan over `url`: a none run and two hot runs on object-store, each
/// with `checksum`; the hot ones read nothing.
fn assert_seqscan(url: &str, checksum: &str, env: &[(&str, String)]) {
    let l = lines("seqscan", &["--file", url, "--json"], env);
    assert_eq!(l.len(), 3, "{l:?}");
    for line in &l {
        assert_eq!(field(line, "runtime"), "object-store", "{line}");
        assert_eq!(field(line, "checksum"), checksum, "{line}");
        assert_eq!(field(line, "file"), url, "{line}");
        assert_eq!(num(line, "pages"), NBLOCKS as f64, "{line}");
        assert_eq!(field(line, "direct"), "false", "{line}");
    }
    assert_eq!(field(&l[0], "cache"), "none");
    // The engine's request size: 4 MiB of blocks, so a few large GETs.
    assert_eq!(num(&l[0], "io_combine_limit"), 512.0, "{}", l[0]);
    assert!(num(&l[0], "engine_gets") >= 1.0, "{}", l[0]);
    assert!(num(&l[0], "reads") < 16.0, "{}", l[0]);
    for hot in &l[1..] {
        assert_eq!(field(hot, "cache"), "hot", "{hot}");
        assert_eq!(field(hot, "reads"), "0", "{hot}");
    }
}

#[test]
fn every_program_reads_an_object_over_http_as_it_reads_the_file() {
    let served = Served::new("http");
    let Some(nginx) = require("nginx", Nginx::start(&served.root())) else {
        return;
    };
    let url = nginx.url("t.dat");
    let file = served.file();
    let checksum = local_checksum(&file);
    assert_seqscan(&url, &checksum, &[]);

    // backscan: forward and backward, combining off and on.
    let l = lines("backscan", &["--file", &url, "--pairs", "1", "--json"], &[]);
    assert_eq!(l.len(), 4, "{l:?}");
    for line in &l {
        assert_eq!(field(line, "engine"), "object-store", "{line}");
        assert_eq!(field(line, "checksum"), checksum, "{line}");
        assert_eq!(field(line, "resident_before_max"), "0", "{line}");
    }

    // bitmapscan: the tuples and checksum of a local run.
    let bitmap = [
        "--density",
        "0.02",
        "--repeat",
        "1",
        "--max-ios",
        "0,8",
        "--json",
    ];
    let local = lines(
        "bitmapscan",
        &[
            &["--file", file.as_str(), "--modes", "readahead"][..],
            &bitmap,
        ]
        .concat(),
        &[],
    );
    let remote = lines(
        "bitmapscan",
        &[&["--file", url.as_str()][..], &bitmap].concat(),
        &[],
    );
    assert_eq!(remote.len(), 2, "{remote:?}");
    for line in &remote {
        assert_eq!(field(line, "runtime"), "object-store", "{line}");
        assert_eq!(field(line, "mode"), "object", "{line}");
        for key in ["checksum", "tuples", "pages", "matching_blocks"] {
            assert_eq!(field(line, key), field(&local[0], key), "{key}: {line}");
        }
    }

    // prewarm: the whole object into a pool that holds it.
    let l = lines("prewarm", &["--file", &url, "--json"], &[]);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(field(&l[0], "runtime"), "object-store", "{}", l[0]);
    assert_eq!(field(&l[0], "cache"), "none", "{}", l[0]);
    assert_eq!(num(&l[0], "pool_valid"), NBLOCKS as f64, "{}", l[0]);

    // pagestream-bench scan: forward from the server, a bitmap hot.
    let l = lines(
        "pagestream-bench",
        &["scan", "--file", &url, "--pattern", "forward", "--json"],
        &[],
    );
    assert_eq!(field(&l[0], "engine"), "object-store", "{}", l[0]);
    assert_eq!(field(&l[0], "cache"), "none", "{}", l[0]);
    assert_eq!(field(&l[0], "checksum"), checksum, "{}", l[0]);
    let bitmap = ["--pattern", "bitmap:0.1", "--cache", "hot", "--json"];
    let local = lines(
        "pagestream-bench",
        &[
            &["scan", "--engine", "threadpool", "--file", &file][..],
            &bitmap,
        ]
        .concat(),
        &[],
    );
    let remote = lines(
        "pagestream-bench",
        &[&["scan", "--file", url.as_str()][..], &bitmap].concat(),
        &[],
    );
    assert_eq!(field(&remote[0], "checksum"), field(&local[0], "checksum"));
    assert_eq!(field(&remote[0], "reads"), "0", "{}", remote[0]);

    // A missing object is an error naming it.
    let missing = nginx.url("missing.dat");
    let out = run("seqscan", &["--file", &missing], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&missing) && err.contains("not found"), "{err}");
}

#[test]
fn seqscan_reads_an_s3_object_with_the_aws_environment() {
    let served = Served::new("s3");
    let Some(moto) = require("moto", Moto::start()) else {
        return;
    };
    moto.create_bucket("scans").unwrap();
    let bytes = std::fs::read(served.file()).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(moto.put("scans", "data/t.dat", bytes))
        .unwrap();
    let checksum = local_checksum(&served.file());
    assert_seqscan("s3://scans/data/t.dat", &checksum, &moto.env());
    // A missing key names its URL.
    let missing = "s3://scans/data/missing.dat";
    let out = run("seqscan", &["--file", missing], &moto.env());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(missing) && !err.contains("panicked"), "{err}");
}
