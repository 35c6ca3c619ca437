//! The `tokio-io-uring` baseline: tokio's own io_uring file I/O
//! (`tokio::fs::File` under tokio 1.54's unstable `io-uring` feature), the
//! way a tokio user reads pages: `max_ios` tasks, each with its own `File`,
//! `seek` + `read_exact` of the next request.
//!
//! tokio compiles that feature only under `--cfg tokio_unstable`, which
//! must not reach this workspace's crates, so the reader is a program of
//! its own, `benches/tokio-io-uring` (its own workspace and target
//! directory; its crate docs say why and how it reads). [`binary`] builds it
//! once per process (`cargo build --release` run in that directory, where
//! its `.cargo/config.toml` sets the cfg and the target directory; cargo
//! does nothing when it is up to date) and [`run`] runs it once per run:
//! the cache is prepared here as for every engine, then the program reads
//! the run's block list (a file of little-endian `u64`s) and prints one
//! JSON line, which becomes a [`RunResult`]. Its `seconds` and
//! `cpu_seconds` are its own, over its timed section (first read to last
//! page checksummed; process user + system time); its start-up is not
//! timed.
//!
//! A forward scan reads requests of `io_combine_limit` blocks (the
//! program's `--block-size`), as fio and pagestream do; its checksum is then
//! over those requests, not pages, and is checked here against the file's
//! own (computed once per file and request size, outside any timing)
//! instead of against the other engines'. Random and other patterns read
//! one block per request and give the pages' checksum.
//!
//! O_DIRECT: tokio's `File` reads into its own buffer, a `Vec` aligned as
//! `malloc` aligns, which O_DIRECT refuses (`EINVAL`); such a run fails with
//! an error saying "O_DIRECT unsupported". A run in which tokio did not
//! read through io_uring (it falls back to its blocking pool where the
//! kernel refuses io_uring) fails too, rather than be reported as one.

use crate::cache;
use crate::checksum::Checksum;
use crate::pattern::Pattern;
use crate::scan::{RunResult, ScanConfig, Target, Timer};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The program's crate: `benches/tokio-io-uring`.
pub fn crate_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tokio-io-uring")
}

/// The program, built on first use (once per process); an error with
/// cargo's last lines where it cannot be built.
pub fn binary() -> io::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone().map_err(io::Error::other)
}

/// `cargo build --release` in the crate's directory, so that cargo reads
/// its `.cargo/config.toml` (`--cfg tokio_unstable`, target directory
/// `target/tokio-io-uring` of the repository). Variables that would
/// replace those settings (`RUSTFLAGS` and its relatives,
/// `CARGO_TARGET_DIR`) are removed from its environment. The executable's
/// path comes from cargo's JSON messages.
fn build() -> Result<PathBuf, String> {
    let dir = crate_dir();
    if !dir.join("Cargo.toml").is_file() {
        return Err(format!(
            "{} is missing: the tokio-io-uring baseline is built from it",
            dir.join("Cargo.toml").display()
        ));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "pagestream-bench: building the tokio-io-uring baseline (cargo build --release in {}) …",
        dir.display()
    );
    let out = Command::new(cargo)
        .current_dir(&dir)
        .args(["build", "--release", "--message-format=json"])
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo to build the tokio-io-uring baseline: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
        let rendered: Vec<String> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["message"]["rendered"].as_str().map(str::to_owned))
            .take(3)
            .collect();
        return Err(format!(
            "cannot build the tokio-io-uring baseline in {}: {}{}",
            dir.display(),
            rendered.join("\n"),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .filter_map(|v| v["executable"].as_str().map(PathBuf::from))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n == "pagestream-bench-tokio-io-uring")
        })
        .ok_or_else(|| "cargo built the tokio-io-uring baseline but named no executable".into())
}

/// The request size (bytes) and the block list the program reads for
/// `cfg`: a forward scan in requests of `combine` blocks, every other
/// pattern one block at a time.
fn requests(cfg: &ScanConfig, target: &Target, blocks: &[u64]) -> io::Result<(usize, Vec<u64>)> {
    if cfg.pattern != Pattern::Forward || cfg.combine <= 1 {
        return Ok((cfg.block_size, blocks.to_vec()));
    }
    let per = cfg.combine as u64;
    if target.nblocks % per != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "tokio-io-uring reads a forward scan in whole requests of {per} blocks: {} has \
                 {} blocks",
                target.path.display(),
                target.nblocks
            ),
        ));
    }
    Ok((
        cfg.block_size * cfg.combine,
        (0..target.nblocks / per).collect(),
    ))
}

/// The checksum of every `request`-byte block of `path` (first and last 64
/// bytes of each, as the program hashes them), read once per file and
/// request size.
fn file_checksum(path: &Path, request: usize) -> io::Result<u64> {
    static DONE: OnceLock<Mutex<HashMap<(PathBuf, usize), u64>>> = OnceLock::new();
    let done = DONE.get_or_init(Default::default);
    let key = (path.to_path_buf(), request);
    if let Some(&v) = done.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(v);
    }
    let f = std::fs::File::open(path)?;
    let n = f.metadata()?.len() / request as u64;
    let mut ck = Checksum::default();
    let mut buf = vec![0u8; request];
    for b in 0..n {
        f.read_exact_at(&mut buf, b * request as u64)?;
        ck.add(b, &buf);
    }
    // Reading it filled the page cache: leave the file as cold as found.
    cache::make_cold(&f, path)?;
    done.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, ck.sum);
    Ok(ck.sum)
}

/// Runs the program once for `cfg` over `target` (`blocks`: the pattern's
/// block list).
pub fn run(cfg: &ScanConfig, target: &Target, blocks: &[u64], run: usize) -> io::Result<RunResult> {
    let exe = binary()?;
    let (request, list) = requests(cfg, target, blocks)?;
    let per = request / cfg.block_size;
    let expected = (per > 1)
        .then(|| file_checksum(&target.path, request))
        .transpose()?;
    let list_path = std::env::temp_dir().join(format!(
        "pagestream-bench-tokio-io-uring-{}-{run}.blocks",
        std::process::id()
    ));
    let bytes: Vec<u8> = list.iter().flat_map(|b| b.to_le_bytes()).collect();
    std::fs::write(&list_path, bytes)?;
    let depth = cfg.max_ios.max(1);
    let mut cmd = Command::new(&exe);
    cmd.arg("--file")
        .arg(&target.path)
        .arg("--blocks")
        .arg(&list_path)
        .args(["--block-size", &request.to_string()])
        .args(["--depth", &depth.to_string()])
        .args(["--workers", &cfg.workers.to_string()]);
    if cfg.direct {
        cmd.arg("--direct");
    }
    let resident = target.prepare(cfg.cache, cfg.direct);
    let resident = match resident {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&list_path);
            return Err(e);
        }
    };
    let timer = Timer::start(target);
    let out = cmd.output();
    let outside = timer.stop();
    let _ = std::fs::remove_file(&list_path);
    let out =
        out.map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", exe.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    let v: Value = match line.map(serde_json::from_str) {
        Some(Ok(v)) => v,
        _ => {
            return Err(io::Error::other(format!(
                "{} printed no JSON line (exit {}): {}",
                exe.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    };
    if let Some(e) = v["error"].as_str() {
        if cfg.direct && (e.contains("os error 22") || e.contains("Invalid argument")) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "O_DIRECT unsupported: tokio::fs::File reads into its own unaligned buffer, \
                     which O_DIRECT refuses ({e})"
                ),
            ));
        }
        return Err(io::Error::other(format!("tokio-io-uring: {e}")));
    }
    let got = |k: &str| v[k].as_f64();
    let requests_read = v["blocks"].as_u64().unwrap_or(0);
    if v["uring"] != true {
        return Err(io::Error::other(format!(
            "tokio did not read through io_uring ({} io_uring completions for {requests_read} \
             reads): its driver fell back to the blocking pool",
            v["uring_ops"]
        )));
    }
    let checksum = v["checksum"].as_u64();
    if let (Some(want), Some(sum)) = (expected, checksum) {
        if want != sum {
            return Err(io::Error::other(format!(
                "tokio-io-uring's checksum of {request}-byte requests is {sum}, the file's {want}"
            )));
        }
    }
    let seconds = got("seconds").unwrap_or(0.0);
    // The device's queue depth over the program's timed section.
    let disk = outside.disk.map(|mut d| {
        if seconds > 0.0 {
            d.queue_depth *= outside.seconds / seconds;
        }
        d
    });
    let mut extra = Map::new();
    extra.insert("request_bytes".into(), json!(request));
    extra.insert("tasks".into(), json!(depth));
    extra.insert("uring_ops".into(), v["uring_ops"].clone());
    if per > 1 {
        // Verified against the file above; not comparable with the pages'.
        extra.insert("request_checksum".into(), json!(checksum));
    }
    Ok(RunResult {
        cfg: cfg.clone(),
        run,
        blocks: requests_read * per as u64,
        bytes: v["bytes"].as_u64().unwrap_or(0),
        seconds,
        cpu_seconds: got("cpu_seconds"),
        disk,
        // Over the whole invocation, start-up included: an upper bound.
        steal_seconds: outside.steal,
        reads: Some(requests_read),
        mean_blocks_per_read: Some(per as f64),
        max_in_flight: Some(depth as u64),
        checksum: if per > 1 { None } else { checksum },
        resident_before: resident,
        extra,
    })
}
