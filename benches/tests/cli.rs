//! The `pagestream-bench` command line on small files: every engine reads
//! the same blocks (checksums agree), the patterns select what they say, and
//! bad input fails with a message naming the flag. No timing assertions.

use pagestream_bench::pattern::{bitmap_count, Pattern};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_pagestream-bench");
const BLOCKS: u64 = 256;
const SIZE: &str = "2MiB";

/// A data file for one test (on the target directory's file system, which
/// takes O_DIRECT, unlike a tmpfs /tmp); created by the first scan.
fn data_file(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pagestream-bench-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}-{}.dat", std::process::id()))
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run pagestream-bench")
}

/// Runs a scan with `--json` and returns its one JSON object.
fn scan(file: &Path, args: &[&str]) -> Value {
    let f = file.display().to_string();
    let mut all = vec!["scan", "--file", &f, "--create", "--size", SIZE, "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pagestream-bench {all:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line per run: {stdout}");
    serde_json::from_str(lines[0]).expect("JSON")
}

const STREAM_ENGINES: [&str; 6] = [
    "threadpool",
    "tokio-uring",
    "glommio",
    "uring-tokio",
    "uring-tokio-blockon",
    "threadpool-tokio",
];
const BASELINES: [&str; 6] = [
    "pread-loop",
    "fadvise-prefetch",
    "tokio-fs",
    "glommio-stream",
    "tokio-uring-fs",
    "bare-uring-tokio",
];

fn checksums(file: &Path, pattern: &str, expect_blocks: u64) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in STREAM_ENGINES.iter().chain(&BASELINES) {
        let v = scan(
            file,
            &[
                "--engine",
                e,
                "--pattern",
                pattern,
                "--cache",
                "cold",
                "--max-ios",
                "4",
            ],
        );
        assert_eq!(v["engine"], *e);
        assert_eq!(v["pattern"], pattern);
        assert_eq!(
            v["blocks"].as_u64(),
            Some(expect_blocks),
            "{e} {pattern}: {v}"
        );
        assert_eq!(v["bytes"].as_u64(), Some(expect_blocks * 8192));
        for k in [
            "seconds",
            "mib_per_s",
            "pages_per_s",
            "cache",
            "direct",
            "max_ios",
            "cpu_us_per_read",
            "cpu_us_per_page",
        ] {
            assert!(v.get(k).is_some(), "{e}: no {k} in {v}");
        }
        // CPU per read is CPU seconds over the reads the engine counted.
        if let (Some(cpu), Some(reads)) = (v["cpu_seconds"].as_f64(), v["reads"].as_u64()) {
            let per = v["cpu_us_per_read"].as_f64().expect("a number");
            assert!((per - cpu * 1e6 / reads as f64).abs() < 1e-6, "{e}: {v}");
        }
        // Host CPU steal during the run: a count of seconds where the
        // kernel keeps one (Linux's /proc/stat does), never negative.
        let steal = &v["steal_seconds"];
        assert!(
            steal.is_null() || steal.as_f64().is_some_and(|s| s >= 0.0),
            "{e}: steal_seconds {steal} in {v}"
        );
        let sum = v["checksum"]
            .as_u64()
            .unwrap_or_else(|| panic!("{e}: no checksum: {v}"));
        out.push((e.to_string(), sum));
    }
    out
}

fn assert_all_equal(sums: &[(String, u64)]) {
    let first = &sums[0];
    for s in sums {
        assert_eq!(s.1, first.1, "{} and {} disagree: {sums:?}", s.0, first.0);
    }
}

#[test]
fn every_engine_and_baseline_agrees_on_every_pattern_and_order_does_not_matter() {
    let file = data_file("agree");
    let fwd = checksums(&file, "forward", BLOCKS);
    assert_all_equal(&fwd);
    // Every block once in another order: the same (order-independent) sum.
    let bwd = checksums(&file, "backward", BLOCKS);
    assert_all_equal(&bwd);
    assert_eq!(
        bwd[0].1, fwd[0].1,
        "backward read other blocks than forward"
    );
    let rnd = checksums(&file, "random", BLOCKS);
    assert_all_equal(&rnd);
    assert_eq!(rnd[0].1, fwd[0].1, "random did not read every block once");
    // A bitmap reads a subset: one sum for every engine, another than all.
    let want = bitmap_count(BLOCKS, 0.25);
    assert_eq!(want, 64);
    let bmp = checksums(&file, "bitmap:0.25", want);
    assert_all_equal(&bmp);
    assert_ne!(bmp[0].1, fwd[0].1);
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn hot_and_direct_runs_give_the_same_checksum_and_hot_reads_nothing() {
    let file = data_file("hot");
    let cold = scan(
        &file,
        &[
            "--engine",
            "threadpool",
            "--pattern",
            "forward",
            "--cache",
            "cold",
        ],
    );
    let hot = scan(
        &file,
        &[
            "--engine",
            "tokio-uring",
            "--pattern",
            "random",
            "--cache",
            "hot",
        ],
    );
    assert_eq!(hot["reads"].as_u64(), Some(0), "{hot}");
    assert_eq!(hot["checksum"], cold["checksum"]);
    let direct = scan(
        &file,
        &[
            "--engine",
            "threadpool",
            "--pattern",
            "backward",
            "--cache",
            "cold",
            "--direct",
        ],
    );
    assert_eq!(direct["direct"], true);
    assert_eq!(direct["checksum"], cold["checksum"]);
    // glommio is O_DIRECT whether asked or not.
    let g = scan(
        &file,
        &[
            "--engine",
            "glommio",
            "--pattern",
            "forward",
            "--cache",
            "cold",
        ],
    );
    assert_eq!(g["direct"], true);
    let warm = scan(
        &file,
        &[
            "--engine",
            "pread-loop",
            "--pattern",
            "forward",
            "--cache",
            "warm",
            "--readahead",
            "off",
        ],
    );
    assert_eq!(warm["readahead"], false);
    assert_eq!(warm["checksum"], cold["checksum"]);
    std::fs::remove_file(&file).unwrap();
}

/// Kernel read-ahead off (`POSIX_FADV_RANDOM`) runs on both buffered stream
/// engines that take it, tokio-uring included, and reads the same blocks
/// as with it on; cold and warm pools (touched before the timing) read
/// every block.
#[test]
fn readahead_off_runs_on_tokio_uring_and_the_thread_pool() {
    let file = data_file("readahead-off");
    let mut sums = Vec::new();
    for engine in ["threadpool", "tokio-uring"] {
        for ra in ["on", "off"] {
            let v = scan(
                &file,
                &[
                    "--engine",
                    engine,
                    "--pattern",
                    "bitmap:0.25",
                    "--cache",
                    "cold",
                    "--readahead",
                    ra,
                    "--max-ios",
                    "4",
                ],
            );
            assert_eq!(v["readahead"], ra == "on", "{v}");
            assert_eq!(
                v["blocks"].as_u64(),
                Some(bitmap_count(BLOCKS, 0.25)),
                "{v}"
            );
            assert!(v["pool_touched_frames"].as_u64() > Some(0), "{v}");
            sums.push((
                format!("{engine} readahead {ra}"),
                v["checksum"].as_u64().unwrap(),
            ));
        }
    }
    assert_all_equal(&sums);
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn random_covers_every_block_once_and_bitmap_selects_its_count() {
    for seed in [0u64, 1, 99] {
        let mut r = Pattern::Random.blocks(1000, seed);
        r.sort_unstable();
        assert_eq!(r, (0..1000).collect::<Vec<_>>(), "seed {seed}");
    }
    for (d, n) in [(0.001, 1), (0.01, 10), (0.5, 500), (1.0, 1000)] {
        let b = Pattern::Bitmap(d).blocks(1000, 3);
        assert_eq!(b.len() as u64, n, "density {d}");
        assert_eq!(bitmap_count(1000, d), n);
        assert!(b.windows(2).all(|w| w[0] < w[1]), "ascending, distinct");
    }
    // Through the command line: the reported block count.
    let file = data_file("bitmap");
    for d in ["0.01", "0.5", "1"] {
        let v = scan(
            &file,
            &[
                "--engine",
                "pread-loop",
                "--pattern",
                &format!("bitmap:{d}"),
                "--cache",
                "warm",
            ],
        );
        let want = bitmap_count(BLOCKS, d.parse().unwrap());
        assert_eq!(v["blocks"].as_u64(), Some(want), "bitmap:{d}: {v}");
    }
    // --gap-limit: reads through the holes of a dense bitmap, counted,
    // and the same pages handed out.
    let dense = |gap: &str| {
        scan(
            &file,
            &[
                "--engine",
                "threadpool",
                "--pattern",
                "bitmap:0.5",
                "--cache",
                "cold",
                "--direct",
                "--gap-limit",
                gap,
            ],
        )
    };
    let (off, on) = (dense("0"), dense("4"));
    assert_eq!(off["checksum"], on["checksum"]);
    assert_eq!(off["gap_blocks"].as_u64(), Some(0), "{off}");
    assert!(on["gap_blocks"].as_u64() > Some(0), "{on}");
    assert!(on["reads"].as_u64() < off["reads"].as_u64(), "{on}\n{off}");
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn fio_runs_when_installed_and_has_no_checksum() {
    let fio = match Command::new("fio").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("fio --version: {}", o.status)),
        Err(e) => Err(format!(
            "cannot run fio: {e}; Debian: apt-get install -y fio"
        )),
    };
    if pagestream::testing::require("fio", fio).is_none() {
        return;
    }
    let file = data_file("fio");
    let v = scan(
        &file,
        &[
            "--engine",
            "fio",
            "--pattern",
            "random",
            "--cache",
            "cold",
            "--direct",
        ],
    );
    assert!(v["checksum"].is_null(), "{v}");
    assert_eq!(v["blocks"].as_u64(), Some(BLOCKS));
    assert_eq!(
        v["reads"].as_u64(),
        Some(BLOCKS),
        "bs 8 KiB: one read per block"
    );
    std::fs::remove_file(&file).unwrap();
}

/// Fails, exit code 2, stderr is one line that names `flag` and points at
/// `--help` (the usage text is not printed).
fn bad(args: &[&str], flag: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line expected: {err}");
    assert!(
        err.starts_with("pagestream-bench: error: ")
            && err.trim_end().ends_with("see 'pagestream-bench --help'"),
        "{args:?}: {err}"
    );
    assert!(
        err.contains(flag),
        "{args:?}: message does not name {flag}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// `-h` prints the usage text `--help` prints, at the top level and after
/// either command; a command line with no command is a one-line error.
#[test]
fn short_h_is_help_everywhere() {
    for before in [&[][..], &["scan"], &["report"]] {
        let mut texts = Vec::new();
        for flag in ["-h", "--help"] {
            let mut args = before.to_vec();
            args.push(flag);
            let out = run(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{args:?}: {err}");
            assert!(err.is_empty(), "{args:?}: {err}");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                text.starts_with("usage: pagestream-bench"),
                "{args:?}: {text}"
            );
            texts.push(text);
        }
        assert_eq!(texts[0], texts[1], "{before:?}: -h differs from --help");
    }
    bad(&[], "expected a command");
    bad(&["scan", "-x"], "-x");
}

/// `scan --file` of a path that does not exist is an error naming it and
/// `--create`, and creates nothing; with `--create`, a size larger than the
/// free space is refused before anything is written.
#[test]
fn scan_creates_a_file_only_when_asked_and_when_it_fits() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pagestream-bench-create-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("typo.dat");
    let p = path.to_str().unwrap();
    let base = [
        "scan",
        "--engine",
        "threadpool",
        "--pattern",
        "forward",
        "--cache",
        "cold",
        "--file",
        p,
    ];
    for (extra, needles) in [
        (&["--size", "2MiB"][..], &["does not exist", "--create"][..]),
        (
            &["--size", "1PiB", "--create"],
            &["not enough free space", "1PiB asked for", " free on "],
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(p), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {err} lacks {n:?}");
        }
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "{args:?}: wrote {left:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_fails_naming_the_flag() {
    let base = [
        "scan",
        "--engine",
        "threadpool",
        "--pattern",
        "forward",
        "--cache",
        "cold",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    bad(
        &[
            "scan",
            "--engine",
            "bogus",
            "--pattern",
            "forward",
            "--cache",
            "cold",
        ],
        "--engine",
    );
    bad(
        &[
            "scan",
            "--engine",
            "fio",
            "--pattern",
            "forward",
            "--cache",
            "lukewarm",
        ],
        "--cache",
    );
    bad(
        &[
            "scan",
            "--engine",
            "fio",
            "--pattern",
            "bitmap:2",
            "--cache",
            "cold",
        ],
        "--pattern",
    );
    bad(
        &[
            "scan",
            "--engine",
            "fio",
            "--pattern",
            "sideways",
            "--cache",
            "cold",
        ],
        "--pattern",
    );
    bad(
        &[
            "scan",
            "--engine",
            "fio",
            "--pattern",
            "backward",
            "--cache",
            "cold",
        ],
        "--pattern",
    );
    bad(
        &["scan", "--pattern", "forward", "--cache", "cold"],
        "--engine",
    );
    bad(
        &["scan", "--engine", "threadpool", "--cache", "cold"],
        "--pattern",
    );
    bad(&with(&["--max-ios", "many"]), "--max-ios");
    bad(&with(&["--max-ios", "100000"]), "--max-ios");
    bad(&with(&["--combine", "0"]), "--combine");
    bad(&with(&["--repeat", "0"]), "--repeat");
    bad(&with(&["--pool-frames", "0"]), "--pool-frames");
    bad(&with(&["--block-size", "1000"]), "--block-size");
    bad(&with(&["--size", "12XB"]), "--size");
    bad(&with(&["--seed", "-3"]), "--seed");
    bad(&with(&["--readahead", "maybe"]), "--readahead");
    bad(&with(&["--frobnicate"]), "--frobnicate");
    bad(&with(&["--direct", "--cache", "warm"]), "--cache warm");
    bad(
        &[
            "scan",
            "--engine",
            "glommio",
            "--pattern",
            "forward",
            "--cache",
            "warm",
        ],
        "--cache",
    );
    bad(
        &[
            "scan",
            "--engine",
            "tokio-fs",
            "--pattern",
            "forward",
            "--cache",
            "cold",
            "--direct",
        ],
        "--direct",
    );
    bad(
        &[
            "scan",
            "--engine",
            "pread-loop",
            "--pattern",
            "forward",
            "--cache",
            "cold",
            "--full",
        ],
        "--full",
    );
    bad(&["report", "--only", "8"], "--only");
    bad(
        &[
            "scan",
            "--engine",
            "uring-tokio",
            "--pattern",
            "forward",
            "--cache",
            "cold",
            "--workers",
            "0",
        ],
        "--workers",
    );
    bad(&["report", "--repeat", "0"], "--repeat");
    bad(&["bogus"], "scan, report or soak");
    bad(&[], "scan, report or soak");
}

/// tokio's own io_uring fs (a program built apart, with `--cfg
/// tokio_unstable`): random reads give the pages' checksum; a forward scan
/// reads 128 KiB requests, checked against the file's own checksum of them
/// (no page checksum then); O_DIRECT is refused by tokio's unaligned
/// buffer, and says so.
#[test]
fn tokio_io_uring_reads_the_same_blocks_and_says_when_o_direct_fails() {
    let file = data_file("tokio-io-uring");
    let args = |engine: &'static str, pattern: &'static str| {
        [
            "--engine",
            engine,
            "--pattern",
            pattern,
            "--cache",
            "cold",
            "--max-ios",
            "4",
        ]
    };
    let want = scan(&file, &args("threadpool", "random"));
    let got = scan(&file, &args("tokio-io-uring", "random"));
    assert_eq!(got["checksum"], want["checksum"], "{got}");
    assert_eq!(got["blocks"].as_u64(), Some(BLOCKS), "{got}");
    assert_eq!(got["reads"].as_u64(), Some(BLOCKS), "{got}");
    let fwd = scan(&file, &args("tokio-io-uring", "forward"));
    assert_eq!(fwd["blocks"].as_u64(), Some(BLOCKS), "{fwd}");
    assert_eq!(fwd["reads"].as_u64(), Some(BLOCKS / 16), "{fwd}");
    assert_eq!(fwd["request_bytes"].as_u64(), Some(16 * 8192), "{fwd}");
    assert!(
        fwd["checksum"].is_null() && fwd["request_checksum"].is_u64(),
        "{fwd}"
    );
    let f = file.display().to_string();
    let out = run(&[
        "scan",
        "--file",
        &f,
        "--engine",
        "tokio-io-uring",
        "--pattern",
        "random",
        "--cache",
        "cold",
        "--direct",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "O_DIRECT through tokio::fs read: {err}"
    );
    assert!(err.contains("O_DIRECT unsupported"), "{err}");
    std::fs::remove_file(&file).unwrap();
}
