//! Runs every example (`examples/*.rs`) on a small stamped file and checks
//! what it prints against what this test computes from the file's bytes.
//!
//! The examples are not built by this test: `cargo test` builds a package's
//! examples (into `target/<profile>/examples/`, beside this test's
//! `deps/` directory) unless targets are selected. Run alone, build them
//! first: `cargo build -p pagestream-examples --examples && cargo test -p
//! pagestream-examples --test run_examples`. A missing or out-of-date
//! example binary fails the test, naming that command.

use pagestream::testing::files::{fresh_seed, write_stamped};
use pagestream::testing::require;
use pagestream_object_store::testing::Nginx;
use pagestream_runtimes::Runtime;
use std::path::{Path, PathBuf};
use std::process::Command;

const BLOCK_SIZE: usize = 8192;
/// 4 MiB.
const NBLOCKS: u64 = 512;

/// A stamped data file under `target/tmp` (a real file system, for
/// `O_DIRECT`), removed when dropped.
struct DataFile(PathBuf);

impl DataFile {
    fn new(tag: &str, nblocks: u64) -> DataFile {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("example-{tag}-{}.dat", std::process::id()));
        write_stamped(&path, fresh_seed(), nblocks, BLOCK_SIZE);
        DataFile(path)
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.0).expect("read data file")
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for DataFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The sum of all the bytes, as the examples print it.
fn byte_sum(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&b| u64::from(b)).sum()
}

/// The example binary `name`, checked to exist and to be newer than its source.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/run_examples-… → target/<profile>/examples/NAME
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("examples").join(name);
    let build = "cargo build -p pagestream-examples --examples";
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}; build the examples: {build}", bin.display()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("{name}.rs"));
    let edited = std::fs::metadata(&src).and_then(|m| m.modified()).unwrap();
    assert!(
        built >= edited,
        "{} is older than {name}.rs: {build}",
        bin.display()
    );
    bin
}

/// Runs example `name` with `args`; returns its standard output, failing
/// the test if it does not succeed.
fn run(name: &str, args: &[&str]) -> String {
    let out = Command::new(example(name)).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} {args:?}: {}\n{stdout}{stderr}",
        out.status
    );
    stdout
}

/// The value of `key=` on the line of `out` starting with `prefix`.
fn field(out: &str, prefix: &str, key: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{out}"));
    let word = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"));
    word.parse().unwrap_or_else(|e| panic!("{key}={word}: {e}"))
}

/// Whether a test needing `what` should run: yes when it is available;
/// otherwise it is skipped with the reason printed, except under `CI=true`,
/// where it fails.
fn available(what: &str, probe: std::io::Result<()>) -> bool {
    match probe {
        Ok(()) => true,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => panic!("CI: {what}: {e}"),
        Err(e) => {
            println!("skipped: {what}: {e}");
            false
        }
    }
}

#[test]
fn every_example_without_a_path_prints_usage_and_exits_2() {
    for name in [
        "forward_scan",
        "uring_from_tokio",
        "backward_scan",
        "bitmap_scan",
        "parallel_workers",
        "synchronized_scans",
        "segment_files",
        "any_runtime",
    ] {
        let out = Command::new(example(name)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.starts_with(&format!("usage: {name} PATH")),
            "{name}: {err}"
        );
    }
}

/// Runs example `name` on a new file and checks that its `pages=` line
/// counts every page and sums every byte; returns its output.
fn scan_whole_file(name: &str) -> String {
    let f = DataFile::new(name, NBLOCKS);
    let out = run(name, &[f.arg()]);
    assert_eq!(field(&out, "pages=", "pages"), NBLOCKS, "{out}");
    assert_eq!(field(&out, "pages=", "sum"), byte_sum(&f.bytes()), "{out}");
    out
}

#[test]
fn forward_scan_reads_every_page() {
    scan_whole_file("forward_scan");
}

#[test]
fn uring_from_tokio_reads_every_page() {
    if !available("io_uring", pagestream_uring::probe()) {
        return;
    }
    scan_whole_file("uring_from_tokio");
}

#[test]
fn backward_scan_reads_last_block_first_in_combined_reads() {
    let out = scan_whole_file("backward_scan");
    assert_eq!(field(&out, "pages=", "first"), NBLOCKS - 1);
    assert_eq!(field(&out, "pages=", "last"), 0);
    // Descending runs were read as ascending multi-block reads.
    assert!(field(&out, "I/O:", "reads") < NBLOCKS, "{out}");
    assert!(field(&out, "I/O:", "(backward") > 0, "{out}");
}

#[test]
fn bitmap_scan_reads_the_matching_records() {
    let f = DataFile::new("bitmap", NBLOCKS);
    let bytes = f.bytes();
    // The example's bitmap, computed here from the file's bytes.
    let (mut pages, mut records, mut sum) = (0u64, 0u64, 0u64);
    for b in (0..NBLOCKS).filter(|b| b % 3 == 0 || b % 7 == 0) {
        let page = &bytes[b as usize * BLOCK_SIZE..][..BLOCK_SIZE];
        pages += 1;
        for i in 0..1 + b as usize % 4 {
            let record = &page[i * 2048..i * 2048 + 8];
            sum = sum.wrapping_add(u64::from_le_bytes(record.try_into().unwrap()));
            records += 1;
        }
    }
    let out = run("bitmap_scan", &[f.arg()]);
    assert_eq!(field(&out, "pages=", "pages"), pages);
    assert_eq!(field(&out, "pages=", "records"), records);
    assert_eq!(field(&out, "pages=", "sum"), sum);
}

#[test]
fn parallel_workers_read_every_block_once_between_them() {
    let f = DataFile::new("parallel", NBLOCKS);
    let out = run("parallel_workers", &[f.arg(), "3"]);
    let per_worker: u64 = (0..3)
        .map(|i| field(&out, &format!("worker {i}:"), "pages"))
        .sum();
    assert_eq!(per_worker, NBLOCKS);
    assert_eq!(field(&out, "total:", "pages"), NBLOCKS);
    assert_eq!(field(&out, "total:", "sum"), byte_sum(&f.bytes()));
}

#[test]
fn synchronized_scans_second_joins_the_first_and_wraps_around() {
    let f = DataFile::new("sync", NBLOCKS);
    let sum = byte_sum(&f.bytes());
    let out = run("synchronized_scans", &[f.arg()]);
    for scan in ["first:", "second:"] {
        assert_eq!(field(&out, scan, "pages"), NBLOCKS, "{out}");
        assert_eq!(field(&out, scan, "sum"), sum, "{out}");
    }
    assert_eq!(field(&out, "first:", "start"), 0);
    // The first scan had processed half the file, reporting every 16 blocks,
    // when the second started.
    let start = field(&out, "second:", "start");
    let interval = pagestream::source::SYNC_SCAN_REPORT_INTERVAL;
    assert!((NBLOCKS / 2 - interval..NBLOCKS).contains(&start), "{out}");
}

#[test]
fn segment_files_are_one_stream() {
    // 160 blocks as pieces of 64 blocks: `rel`, `rel.1`, `rel.2` (32 blocks).
    let f = DataFile::new("segments", 160);
    let bytes = f.bytes();
    let segment = 64 * BLOCK_SIZE;
    let first = f.0.with_extension("rel");
    let mut pieces = Vec::new();
    for (i, chunk) in bytes.chunks(segment).enumerate() {
        let mut name = first.clone().into_os_string();
        if i > 0 {
            name.push(format!(".{i}"));
        }
        std::fs::write(&name, chunk).unwrap();
        pieces.push(DataFile(name.into()));
    }
    let out = run("segment_files", &[pieces[0].arg(), &segment.to_string()]);
    assert_eq!(field(&out, "segments=", "segments"), 3);
    assert_eq!(field(&out, "segments=", "pages"), 160);
    assert_eq!(field(&out, "segments=", "sum"), byte_sum(&bytes));
    // No read spans two pieces.
    assert!(field(&out, "segments=", "reads") >= 3, "{out}");
}

#[test]
fn any_runtime_gives_the_same_answer_on_every_runtime() {
    let f = DataFile::new("runtimes", NBLOCKS);
    let sum = byte_sum(&f.bytes());
    let out = run("any_runtime", &[f.arg()]);
    for rt in Runtime::ALL {
        let prefix = format!("{rt}: ");
        let line = out.lines().find(|l| l.starts_with(&prefix)).unwrap();
        if let Some(why) = line
            .strip_prefix(&prefix)
            .unwrap()
            .strip_prefix("skipped: ")
        {
            // The thread pool always starts; the others need the kernel's help.
            assert_ne!(rt, Runtime::ThreadPool, "{out}");
            available(&rt.to_string(), Err(std::io::Error::other(why.to_string())));
            continue;
        }
        assert_eq!(field(&out, &prefix, "pages"), NBLOCKS, "{out}");
        assert_eq!(field(&out, &prefix, "sum"), sum, "{out}");
    }
}

#[test]
fn object_store_scans_an_object_over_http() {
    let out = Command::new(example("object_store")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("usage: object_store URL"), "{err}");

    // A directory of its own for nginx to serve, holding one stamped file.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("example-object-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = DataFile(dir.join("object.dat"));
    write_stamped(&f.0, fresh_seed(), NBLOCKS, BLOCK_SIZE);
    if let Some(nginx) = require("nginx", Nginx::start(&dir)) {
        let out = run("object_store", &[&nginx.url("object.dat")]);
        assert_eq!(field(&out, "pages=", "pages"), NBLOCKS, "{out}");
        assert_eq!(field(&out, "pages=", "sum"), byte_sum(&f.bytes()), "{out}");
        // 4 MiB in whole-object-sized GETs, not one per page.
        assert!(field(&out, "GETs:", "gets") < NBLOCKS / 4, "{out}");
        // A missing object fails naming its URL.
        let missing = nginx.url("missing.dat");
        let out = Command::new(example("object_store"))
            .arg(&missing)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&missing), "{err}");
    }
    drop(f);
    let _ = std::fs::remove_dir_all(&dir);
}
