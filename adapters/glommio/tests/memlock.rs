//! `RLIMIT_MEMLOCK`: a limit too low for glommio is a clear error, and a low
//! but workable limit gets an `io_memory` that fits and a working executor.
//!
//! Each test re-executes this test binary as a child process that lowers its
//! own limit and, when running as root, drops every capability (among them
//! CAP_IPC_LOCK, which would exempt it from the limit) by switching to the
//! unprivileged uid 65534. The parent checks the child's exit status and
//! output.

use futures::StreamExt;
use pagestream::testing::{require, stamp, StampedFile};
use pagestream::{source, BufferPool, ReadStream};
use pagestream_glommio::{fit_io_memory, make_executor, GlommioEngine, GlommioFile};
use std::process::Command;

const CHILD: &str = "PAGESTREAM_GLOMMIO_MEMLOCK_CHILD";
const FILE: &str = "PAGESTREAM_GLOMMIO_MEMLOCK_FILE";
const SEED: &str = "PAGESTREAM_GLOMMIO_MEMLOCK_SEED";

/// In the child: lowers RLIMIT_MEMLOCK to `bytes` and drops privileges.
fn restrict(bytes: u64) {
    let rl = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: `rl` is a valid `struct rlimit`.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) };
    assert_eq!(r, 0, "setrlimit: {}", std::io::Error::last_os_error());
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // SAFETY: plain system calls without pointers. Changing every uid
        // from 0 to non-zero clears the permitted and effective capability
        // sets, CAP_IPC_LOCK included.
        let (g, u) = unsafe { (libc::setgid(65534), libc::setuid(65534)) };
        assert_eq!((g, u), (0, 0), "drop privileges");
    }
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let cap_eff = status
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .expect("CapEff line");
    assert!(
        cap_eff.trim_end().ends_with("0000000000000000"),
        "capabilities left: {cap_eff}"
    );
}

/// `Ok` if this process's hard `RLIMIT_MEMLOCK` is at least `bytes`, which
/// [`restrict`] can then set.
fn hard_limit_at_least(bytes: u64) -> Result<(), String> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable `struct rlimit`.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    assert_eq!(r, 0, "getrlimit: {}", std::io::Error::last_os_error());
    if rl.rlim_max == libc::RLIM_INFINITY || rl.rlim_max >= bytes {
        Ok(())
    } else {
        Err(format!(
            "the hard limit is {} bytes; raise it (`ulimit -H -l`)",
            rl.rlim_max
        ))
    }
}

/// Bytes of this process's memory pinned (`VmPin`), e.g. by io_uring buffer
/// registration.
fn vm_pin() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmPin:"))
        .expect("VmPin line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmPin value");
    kb * 1024
}

/// Runs `test` again in a child process with `mode` and extra environment
/// variables; asserts it succeeded and returns its combined output.
fn run_child(test: &str, mode: &str, env: &[(&str, String)]) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, mode);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child failed ({}):\n{text}",
        out.status
    );
    text
}

#[test]
fn memlock_too_low_is_a_clear_error() {
    if std::env::var(CHILD).as_deref() == Ok("too-low") {
        restrict(256 << 10);
        let e = fit_io_memory(2 << 20, 1).expect_err("256 KiB must be refused");
        println!("CHILD fit_io_memory: {e}");
        let e = make_executor().expect_err("256 KiB must be refused");
        println!("CHILD make_executor: {e}");
        // glommio's own check agrees that this limit is too low.
        let raw = glommio::LocalExecutorBuilder::default().make();
        match raw {
            Ok(_) => panic!("glommio started under a 256 KiB limit"),
            Err(e) => println!("CHILD glommio itself: {e}"),
        }
        return;
    }
    // The child sets the limit to 256 KiB, which a hard limit below that
    // forbids.
    if require(
        "a hard RLIMIT_MEMLOCK of 256 KiB",
        hard_limit_at_least(256 << 10),
    )
    .is_none()
    {
        return;
    }
    let out = run_child("memlock_too_low_is_a_clear_error", "too-low", &[]);
    let line = out
        .lines()
        .find(|l| l.starts_with("CHILD make_executor:"))
        .unwrap_or_else(|| panic!("child said nothing:\n{out}"));
    assert!(
        line.contains("RLIMIT_MEMLOCK") && line.contains("io_memory") && line.contains("262144"),
        "error must name RLIMIT_MEMLOCK, io_memory and the limit: {line}"
    );
    assert!(out.contains("CHILD glommio itself:"), "{out}");
}

#[test]
fn low_memlock_gets_fitting_io_memory() {
    if std::env::var(CHILD).as_deref() == Ok("low") {
        let path = std::env::var(FILE).expect("file");
        let seed: u64 = std::env::var(SEED).expect("seed").parse().expect("seed");
        restrict(1 << 20);
        let io_memory = fit_io_memory(2 << 20, 1).expect("1 MiB is enough");
        assert!(
            io_memory * 3 < 1 << 20 && io_memory >= 64 << 10,
            "{io_memory}"
        );
        println!("CHILD io_memory {io_memory}");
        let ex = make_executor().expect("executor under a 1 MiB limit");
        // The kernel counts memory registered with io_uring as pinned: all
        // three rings registered io_memory, so glommio did not fall back to
        // unregistered buffers (as it silently does when io_memory does
        // not fit the limit).
        let pinned = vm_pin();
        println!("CHILD VmPin {pinned}");
        assert!(
            pinned >= 3 * io_memory as u64,
            "registration failed: VmPin {pinned}"
        );
        ex.run(async move {
            let n = 128;
            let pool = BufferPool::new(64, 8192).expect("pool");
            let file = GlommioFile::open(&path, 8192).await.expect("open");
            let mut s = ReadStream::builder(&pool, GlommioEngine::new(), file)
                .build(source::forward(0..n))
                .expect("build");
            let mut i = 0;
            while let Some(p) = s.next().await {
                let p = p.expect("page");
                assert!(stamp::check(seed, i, &p), "block {i}");
                i += 1;
            }
            assert_eq!(i, n);
            println!("CHILD read {i} pages");
        });
        return;
    }
    // The child lowers the limit, so needs glommio to start here first.
    let here = make_executor().map(drop);
    if require("glommio (io_uring, RLIMIT_MEMLOCK)", here).is_none() {
        return;
    }
    let tmp = StampedFile::new("memlock", 128, 8192);
    let (path, seed) = (tmp.path(), tmp.seed());
    let text = run_child(
        "low_memlock_gets_fitting_io_memory",
        "low",
        &[(FILE, path.display().to_string()), (SEED, seed.to_string())],
    );
    tmp.remove();
    assert!(text.contains("CHILD read 128 pages"), "{text}");
    eprintln!("{text}");
}

#[test]
fn fit_io_memory_here() {
    // On this machine: 8 MiB limit (or none, or root's): the default fits
    // or is shrunk, never grown, and stays page-aligned.
    let Some(m) = require("RLIMIT_MEMLOCK for glommio", fit_io_memory(2 << 20, 1)) else {
        return;
    };
    assert!(m <= 2 << 20 && m % 4096 == 0 && m >= 64 << 10, "{m}");
    let four = fit_io_memory(2 << 20, 4).expect("fits 4 executors");
    assert!(four <= m, "{four} > {m}");
}
