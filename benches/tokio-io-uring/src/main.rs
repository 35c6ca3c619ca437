//! `pagestream-bench-tokio-io-uring`: a baseline reader for pagestream's
//! benchmark, reading pages with `tokio::fs::File` on tokio's experimental
//! io_uring driver.
//!
//! With the `io-uring` feature, `--cfg tokio_unstable` and a runtime built
//! with `enable_io_uring()`, tokio (1.54) opens files with an io_uring
//! `OPENAT` and submits each `File` read as an io_uring `READ` at the file
//! position; where the kernel refuses io_uring (`ENOSYS`, or `EPERM` from
//! seccomp) tokio falls back to its blocking pool, which the output's
//! `uring` field shows. `seek` runs on the blocking pool either way (an
//! `lseek` per call). Each read lands in the `File`'s internal buffer and
//! is copied out; that buffer is a plain `Vec`, aligned as `malloc` aligns,
//! so `--direct` reads fail with `EINVAL` wherever O_DIRECT needs aligned
//! memory (the program reports this rather than working around it).
//!
//! This program is what a tokio user reading pages would write: `depth`
//! tasks, each with its own `File` (a `File` has one operation in flight at
//! a time), taking the next block from a shared list, then `seek` +
//! `read_exact` of one block into a `Vec` and the page checksum
//! pagestream-bench computes. The files are opened and the blocking pool's
//! threads started before the timing, which runs from the first read to
//! the last page checksummed.
//!
//! # Why a separate crate
//!
//! tokio's io_uring file I/O is compiled only under `--cfg tokio_unstable`.
//! A cfg passed with `RUSTFLAGS` applies to every crate of a build, so this
//! crate is its own workspace (an empty `[workspace]` table, and excluded
//! from the repository's workspace), with its own `Cargo.lock` and its own
//! target directory, `target/tokio-io-uring`; the main workspace never sees
//! the flag.
//!
//! # Building
//!
//! `benches/tokio-io-uring/.cargo/config.toml` sets the rustflags and the
//! target directory (`../../target/tokio-io-uring`, which cargo resolves
//! against the directory holding `.cargo`: the repository's
//! `target/tokio-io-uring`). Cargo discovers config files from the
//! *current directory* upwards, not from `--manifest-path`'s directory, so
//! from the repository root name the file with `--config`:
//!
//! ```text
//! cargo build --release --manifest-path benches/tokio-io-uring/Cargo.toml \
//!     --config benches/tokio-io-uring/.cargo/config.toml
//! ```
//!
//! or build in the crate's directory (`cd benches/tokio-io-uring && cargo
//! build --release`); both give the same build, in the same target
//! directory. A plain `--manifest-path` build from the root compiles tokio
//! without the cfg, and this crate then fails to compile
//! (`enable_io_uring` does not exist) instead of silently reading on the
//! blocking pool. A `RUSTFLAGS` in the environment replaces
//! `build.rustflags` and must then carry `--cfg tokio_unstable` itself.
//!
//! # Running
//!
//! ```text
//! target/tokio-io-uring/release/pagestream-bench-tokio-io-uring \
//!     --file target/pagestream-data/seqscan-256MiB.dat --blocks LIST \
//!     [--block-size 8192] [--depth 16] [--workers 2] [--direct] [--drop-cache]
//! ```
//!
//! `LIST` is a file of little-endian `u64` block numbers, read in that
//! order (any pattern: a permutation, ascending, a subset). The program
//! prints one JSON object on one line to stdout (fields in [`report`]).
//! Usage errors and an unreadable list go to stderr with exit status 2;
//! once the run starts every outcome, including a failed open or read, is a
//! JSON line with `error` set and exit status 0, so that the caller can
//! report it (an `EINVAL` from `--direct`, for instance, as "O_DIRECT
//! unsupported").

use serde_json::{json, Value};
use std::io::{self, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// The engine name in the output.
const ENGINE: &str = "tokio-io-uring";

/// Usage text.
const USAGE: &str = "\
usage: pagestream-bench-tokio-io-uring --file PATH --blocks LIST [options]
  --file PATH        data file to read (opened read-only)
  --blocks LIST      file of little-endian u64 block numbers, read in order
  --block-size N     bytes per block (default 8192)
  --depth D          reads in flight: D tasks, one File each (default 16)
  --workers W        tokio worker threads (default 2)
  --direct           open with O_DIRECT
  --drop-cache       fsync + POSIX_FADV_DONTNEED the file before timing";

/// The command line.
#[derive(Debug)]
struct Args {
    file: PathBuf,
    blocks: PathBuf,
    block_size: usize,
    depth: usize,
    workers: usize,
    direct: bool,
    drop_cache: bool,
}

/// Parses the arguments after the program name; `Ok(None)` asks for help.
fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut file = None;
    let mut blocks = None;
    let mut block_size = 8192usize;
    let mut depth = 16usize;
    let mut workers = 2usize;
    let mut direct = false;
    let mut drop_cache = false;
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |s: String| {
            s.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag} {s:?}: expected a positive integer"))
        };
        match flag.as_str() {
            "--file" => file = Some(PathBuf::from(value()?)),
            "--blocks" => blocks = Some(PathBuf::from(value()?)),
            "--block-size" => block_size = number(value()?)?,
            "--depth" => depth = number(value()?)?,
            "--workers" => workers = number(value()?)?,
            "--direct" => direct = true,
            "--drop-cache" => drop_cache = true,
            "-h" | "--help" => return Ok(None),
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(Some(Args {
        file: file.ok_or("--file is required")?,
        blocks: blocks.ok_or("--blocks is required")?,
        block_size,
        depth,
        workers,
        direct,
        drop_cache,
    }))
}

/// Reads a block list: little-endian `u64`s, no header.
fn read_block_list(path: &Path) -> Result<Vec<u64>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() % 8 != 0 {
        return Err(format!(
            "{}: {} bytes is not a whole number of little-endian u64s",
            path.display(),
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// pagestream-bench's page checksum, the same source file, so that the two
/// programs' checksums of the same blocks agree.
#[path = "../../src/checksum.rs"]
#[allow(dead_code)]
mod checksum;

use checksum::Checksum;

/// This process's CPU seconds so far (user + system, all threads).
fn process_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the valid pointer given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Writes back and drops `path`'s pages from the OS page cache (`fsync`,
/// then `POSIX_FADV_DONTNEED` over the whole file), as pagestream-bench's
/// cold runs do. Pages another process maps or locks may stay.
fn drop_cache(path: &Path) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    f.sync_all()?;
    // SAFETY: posix_fadvise takes no pointers; a bad fd gives an error code.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// The io_uring instances this process has open, by fd, with the number of
/// completions each has posted so far (`CqTail` in its
/// `/proc/self/fdinfo` entry, a wrapping `u32`).
///
/// tokio creates its ring lazily, on the first io_uring operation, and
/// keeps it until the runtime is dropped, so a ring's presence says the
/// driver was set up, and its completion count over the timed section says
/// how many operations actually went through it (a read that fell back to
/// the blocking pool posts none).
fn io_urings() -> Vec<(i32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut rings = Vec::new();
    for entry in dir.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.as_os_str() != "anon_inode:[io_uring]" {
            continue;
        }
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let tail = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("CqTail:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0);
        rings.push((fd, tail));
    }
    rings
}

/// Completions posted between two [`io_urings`] snapshots, over the rings
/// present in both (a ring created in between counts from zero).
fn completions_between(before: &[(i32, u32)], after: &[(i32, u32)]) -> u64 {
    after
        .iter()
        .map(|&(fd, tail)| {
            let start = before
                .iter()
                .find(|&&(f, _)| f == fd)
                .map_or(0, |&(_, t)| t);
            u64::from(tail.wrapping_sub(start))
        })
        .sum()
}

/// What a run measured.
#[derive(Debug, Default)]
struct Outcome {
    checksum: Checksum,
    seconds: f64,
    cpu_seconds: f64,
    /// Blocks whose read was started (checksummed or failed).
    reads: u64,
    /// io_uring completions posted during the timed section.
    uring_ops: u64,
    /// Whether the process had an io_uring open after the run.
    ring: bool,
    error: Option<String>,
}

/// Opens `depth` files, then reads every block of `blocks` with `depth`
/// tasks and times it.
async fn run(args: &Args, blocks: Arc<Vec<u64>>) -> Outcome {
    let mut out = Outcome::default();
    let mut opts = tokio::fs::OpenOptions::new();
    opts.read(true);
    if args.direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    let mut files = Vec::with_capacity(args.depth);
    for _ in 0..args.depth {
        match opts.open(&args.file).await {
            Ok(f) => files.push(f),
            Err(e) => {
                out.error = Some(format!("open {}: {e}", args.file.display()));
                return out;
            }
        }
    }
    // Start the blocking pool's threads (seeks run there) outside the
    // timing: one seek per file, concurrently, as the timed section will.
    let warm: Vec<_> = files
        .into_iter()
        .map(|mut f| {
            tokio::spawn(async move {
                f.seek(SeekFrom::Start(0)).await?;
                Ok::<_, io::Error>(f)
            })
        })
        .collect();
    let mut files = Vec::with_capacity(args.depth);
    for h in warm {
        match h.await {
            Ok(Ok(f)) => files.push(f),
            Ok(Err(e)) => {
                out.error = Some(format!("seek: {e}"));
                return out;
            }
            Err(e) => {
                out.error = Some(format!("task: {e}"));
                return out;
            }
        }
    }

    let bs = args.block_size;
    let next = Arc::new(AtomicUsize::new(0));
    let rings_before = io_urings();
    let cpu_before = process_cpu_seconds();
    let start = Instant::now();
    let tasks: Vec<_> = files
        .into_iter()
        .map(|mut f| {
            let blocks = Arc::clone(&blocks);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut ck = Checksum::default();
                let mut page = vec![0u8; bs];
                let mut reads = 0u64;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&b) = blocks.get(i) else {
                        return (ck, reads, None);
                    };
                    reads += 1;
                    let res = async {
                        f.seek(SeekFrom::Start(b * bs as u64)).await?;
                        f.read_exact(&mut page).await
                    }
                    .await;
                    if let Err(e) = res {
                        // Stop the other tasks at their next block.
                        next.store(blocks.len(), Ordering::Relaxed);
                        return (ck, reads, Some(format!("read block {b}: {e}")));
                    }
                    ck.add(b, &page);
                }
            })
        })
        .collect();
    for t in tasks {
        match t.await {
            Ok((ck, reads, err)) => {
                out.checksum.merge(ck);
                out.reads += reads;
                if out.error.is_none() {
                    out.error = err;
                }
            }
            Err(e) => {
                if out.error.is_none() {
                    out.error = Some(format!("task: {e}"));
                }
            }
        }
    }
    out.seconds = start.elapsed().as_secs_f64();
    out.cpu_seconds = process_cpu_seconds() - cpu_before;
    let rings_after = io_urings();
    out.ring = !rings_after.is_empty();
    out.uring_ops = completions_between(&rings_before, &rings_after);
    out
}

/// The output line.
///
/// `blocks` and `bytes` count the pages checksummed; `seconds` runs from
/// the first read to the last page checksummed and `cpu_seconds` is the
/// process's user + system time over the same span; `checksum` is
/// pagestream-bench's (null after an error); `uring` says the reads went
/// through io_uring (the process had a ring, and it posted at least one
/// completion per block read or attempted in the timed section, a failed
/// read included); `uring_ops` is that completion count; `error` is null
/// or what failed.
fn report(args: &Args, out: &Outcome) -> Value {
    let bytes = out.checksum.pages * args.block_size as u64;
    let mib_per_s = if out.seconds > 0.0 {
        bytes as f64 / (1 << 20) as f64 / out.seconds
    } else {
        0.0
    };
    json!({
        "engine": ENGINE,
        "blocks": out.checksum.pages,
        "bytes": bytes,
        "seconds": out.seconds,
        "mib_per_s": mib_per_s,
        "cpu_seconds": out.cpu_seconds,
        "checksum": if out.error.is_none() { Some(out.checksum.sum) } else { None },
        "uring": out.ring && out.reads > 0 && out.uring_ops >= out.reads,
        "uring_ops": out.uring_ops,
        "direct": args.direct,
        "depth": args.depth,
        "workers": args.workers,
        "block_size": args.block_size,
        "error": out.error,
    })
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("pagestream-bench-tokio-io-uring: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let blocks = match read_block_list(&args.blocks) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("pagestream-bench-tokio-io-uring: {e}");
            std::process::exit(2);
        }
    };
    let out = (|| {
        if args.drop_cache {
            drop_cache(&args.file)
                .map_err(|e| format!("drop cache of {}: {e}", args.file.display()))?;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.workers)
            .enable_all()
            .enable_io_uring()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        // The ring is inspected inside `run`, before the runtime (and with
        // it the ring) is dropped.
        Ok::<_, String>(rt.block_on(run(&args, blocks)))
    })()
    .unwrap_or_else(|e| Outcome {
        error: Some(e),
        ..Outcome::default()
    });
    println!("{}", report(&args, &out));
}

#[cfg(test)]
mod tests {
    use super::checksum::{page_hash, Checksum};

    /// Values pagestream-bench's `checksum.rs` gives for the same inputs,
    /// pinned so that a drift from it shows here.
    #[test]
    fn matches_pagestream_bench() {
        let page: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(page_hash(5, &page), PAGE_5);
        assert_eq!(page_hash(0, &page[..100]), SHORT_0);
        let mut a = Checksum::default();
        a.add(1, &page);
        a.add(2, &page);
        let mut b = Checksum::default();
        b.add(2, &page);
        let mut c = Checksum::default();
        c.add(1, &page);
        c.merge(b);
        assert_eq!(a, c, "merging is adding");
    }

    const PAGE_5: u64 = 0x5BAA_F9E7_9034_4951;
    const SHORT_0: u64 = 0x51FB_6BA1_5B40_7342;
}
