//! The `fio` baseline: the fio binary reading the same file with the same
//! shape, as the device's ceiling.
//!
//! forward: `--rw=read --bs=<block_size × combine>` (the request size
//! pagestream's combined reads have); random: `--rw=randread
//! --bs=<block_size>` with fio's random map (every block once) seeded with
//! `--randseed`. `--iodepth=max(max_ios, 1)`, `--ioengine=io_uring`,
//! `--direct` as asked, `--fadvise_hint=0` with read-ahead on (fio's default
//! hint would turn the kernel's read-ahead off for random reads) or
//! `random` with it off. backward and bitmap have no fio equivalent.
//! fio's own `bw_bytes` and `io_bytes` give the rate; its process start is
//! not timed. `--invalidate=0`: the page cache is prepared by us as for
//! every engine. It hands back no data, so its checksum is `null`.

use crate::pattern::Pattern;
use crate::scan::{RunResult, ScanConfig, Target, Timer};
use serde_json::{json, Map, Value};
use std::io;
use std::process::Command;

/// Whether a `fio` binary can be run (`fio --version`).
pub fn available() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The fio command line for `cfg` over `target`.
pub fn command_line(cfg: &ScanConfig, target: &Target) -> io::Result<Vec<String>> {
    let bs = cfg.block_size;
    let (rw, req) = match cfg.pattern {
        Pattern::Forward => ("read", bs * cfg.combine),
        Pattern::Random => ("randread", bs),
        p => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("fio has no equivalent of the {p} pattern"),
            ))
        }
    };
    let size = target.nblocks * bs as u64;
    let mut args = vec![
        "--name=pagestream-bench".to_string(),
        format!("--filename={}", target.path.display()),
        "--readonly".into(),
        format!("--direct={}", u8::from(cfg.direct)),
        "--ioengine=io_uring".into(),
        format!("--rw={rw}"),
        format!("--bs={req}"),
        format!("--iodepth={}", cfg.max_ios.max(1)),
        format!("--size={size}"),
        "--output-format=json".into(),
        // fio drops the file's page cache before a job by default, which
        // would turn warm runs cold; the cache is prepared by us.
        "--invalidate=0".into(),
        format!(
            "--fadvise_hint={}",
            if cfg.readahead { "0" } else { "random" }
        ),
    ];
    if cfg.pattern == Pattern::Random {
        args.push(format!("--randseed={}", cfg.seed));
    }
    Ok(args)
}

/// Runs fio once for `cfg` over `target`.
pub fn run(cfg: &ScanConfig, target: &Target, run: usize) -> io::Result<RunResult> {
    let args = command_line(cfg, target)?;
    let resident = target.prepare(cfg.cache, cfg.direct)?;
    let timer = Timer::start(target);
    let out = Command::new("fio").args(&args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot run fio ({e}); install it (Debian: apt-get install -y fio) or leave the \
                 fio engine out"
            ),
        )
    })?;
    let outside = timer.stop();
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "fio {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON object.
    let json_start = text.find('{').unwrap_or(0);
    let v: Value = serde_json::from_str(&text[json_start..])
        .map_err(|e| io::Error::other(format!("cannot parse fio's JSON output: {e}")))?;
    let read = &v["jobs"][0]["read"];
    let bw = read["bw_bytes"].as_f64().unwrap_or(0.0);
    let io_bytes = read["io_bytes"].as_u64().unwrap_or(0);
    let ios = read["total_ios"].as_u64();
    if bw <= 0.0 || io_bytes == 0 {
        return Err(io::Error::other(format!(
            "fio reported no reads: {}",
            read.to_string().chars().take(300).collect::<String>()
        )));
    }
    let bs = cfg.block_size as u64;
    let seconds = io_bytes as f64 / bw;
    // fio's CPU use, in percent of the job's runtime.
    let job = &v["jobs"][0];
    let cpu_seconds = match (
        job["usr_cpu"].as_f64(),
        job["sys_cpu"].as_f64(),
        job["job_runtime"].as_f64(),
    ) {
        (Some(u), Some(s), Some(ms)) => Some((u + s) / 100.0 * ms / 1000.0),
        _ => None,
    };
    // The device's queue depth over fio's own runtime, not its start-up.
    let disk = outside.disk.map(|mut d| {
        d.queue_depth *= outside.seconds / seconds;
        d
    });
    let mut extra = Map::new();
    extra.insert("fio_args".into(), json!(args.join(" ")));
    extra.insert("fio_runtime_ms".into(), read["runtime"].clone());
    extra.insert("fio_clat_mean_ns".into(), read["clat_ns"]["mean"].clone());
    // fio's distribution of I/O depth (percent of the time at each level).
    extra.insert("fio_iodepth_level".into(), job["iodepth_level"].clone());
    Ok(RunResult {
        cfg: cfg.clone(),
        run,
        blocks: io_bytes / bs,
        bytes: io_bytes,
        seconds,
        cpu_seconds,
        disk,
        // Over fio's whole invocation, start-up included: an upper bound.
        steal_seconds: outside.steal,
        reads: ios,
        mean_blocks_per_read: ios.map(|n| io_bytes as f64 / bs as f64 / n.max(1) as f64),
        max_in_flight: None,
        checksum: None,
        resident_before: resident,
        extra,
    })
}
