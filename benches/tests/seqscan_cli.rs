//! `seqscan` end to end: bad command lines exit with 2 and a clear message;
//! a small run prints one JSON object per run with the public field names,
//! the same checksum everywhere, a cold run that was cold and a hot run that
//! read nothing; `--runtime all` runs on every runtime with one checksum.

mod common;

use common::{assert_usage_error, field, with_temp_file};

fn seqscan(args: &[&str]) -> std::process::Output {
    common::run("seqscan", env!("CARGO_BIN_EXE_seqscan"), args)
}

#[test]
fn bad_command_lines_exit_2_with_a_message() {
    for (args, needle) in [
        (&["--bogus"][..], "unknown option --bogus"),
        (&["--cache", "tepid"], "tepid"),
        (&["--max-ios", "lots"], "--max-ios"),
        (&["--size", "12XB"], "unit"),
        (&["--repeat", "0"], "--repeat"),
        (&["--combine", "0"], "--combine"),
        (&["--combine", "5000"], "--combine"),
        (&["--max-ios"], "needs a value"),
        (&["--json=yes"], "takes no value"),
        (&["--block-size", "1000"], "power of two"),
        (&["--direct", "--cache", "warm"], "bypasses"),
        (&["stray"], "unexpected argument"),
        (&["--runtime", "tokio"], "not a runtime"),
        (
            &["--runtime", "threadpool,io_uring"],
            "\"io_uring\" is not a runtime",
        ),
        (
            &["--runtime", "glommio", "--cache", "warm"],
            "nothing to run on glommio",
        ),
    ] {
        let out = seqscan(args);
        assert_usage_error("seqscan", args, needle, &out);
    }
}

#[test]
fn small_run_reports_json_per_run() {
    let out = with_temp_file("seqscan", |p| {
        seqscan(&[
            "--runtime",
            "threadpool",
            "--file",
            p,
            "--create",
            "--size",
            "4MiB",
            "--json",
            "--repeat",
            "2",
        ])
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "seqscan failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    // Two repeats of cold, read-loop, warm, memory loop, hot with and
    // without prefetch.
    assert_eq!(lines.len(), 12, "{stdout}");
    let prefetch: Vec<&str> = lines
        .iter()
        .filter(|l| field(l, "runtime") == "threadpool" && field(l, "cache") == "hot")
        .map(|l| field(l, "prefetch"))
        .collect();
    // On (the library's default) then off, then reversed on the second
    // repeat.
    assert_eq!(prefetch, ["true", "false", "false", "true"], "{stdout}");
    let checksum = field(lines[0], "checksum");
    for l in &lines {
        for key in [
            "runtime",
            "cache",
            "direct",
            "pages",
            "bytes",
            "seconds",
            "mib_per_s",
            "pages_per_s",
            "reads",
            "mean_blocks_per_read",
            "hits",
            "max_in_flight",
            "resident_before",
        ] {
            field(l, key);
        }
        assert_eq!(field(l, "checksum"), checksum, "checksums differ: {stdout}");
        assert_eq!(field(l, "pages"), "512", "{l}");
        assert_eq!(field(l, "bytes"), "4194304", "{l}");
        assert_eq!(field(l, "direct"), "false", "{l}");
        match (field(l, "runtime"), field(l, "cache")) {
            ("threadpool", "cold") => {
                let r: f64 = field(l, "resident_before").parse().unwrap();
                assert!(r <= 0.01, "cold run was not cold: {l}");
                assert_eq!(field(l, "blocks_read"), "512", "{l}");
            }
            ("threadpool", "warm") => {
                assert_eq!(field(l, "resident_before"), "1", "{l}");
                assert_eq!(field(l, "blocks_read"), "512", "{l}");
            }
            ("read-loop", "warm") => assert_eq!(field(l, "reads"), "32", "{l}"),
            ("threadpool", "hot") => {
                assert_eq!(field(l, "reads"), "0", "hot run read: {l}");
                assert_eq!(field(l, "hits"), "512", "{l}");
            }
            ("memory", "hot") => assert_eq!(field(l, "reads"), "0", "{l}"),
            other => panic!("unexpected run {other:?}: {l}"),
        }
    }
    assert!(stderr.contains("all runs agree"), "{stderr}");
    assert!(
        stderr.contains("threadpool hot: prefetch on / off speed")
            && stderr.contains("threadpool hot prefetch:")
            && stderr.contains("overhead"),
        "{stderr}"
    );
}

#[test]
fn every_runtime_runs_with_one_checksum() {
    let out = with_temp_file("seqscan-all", |p| {
        seqscan(&[
            "--runtime",
            "all",
            "--cache",
            "all",
            "--file",
            p,
            "--create",
            "--size",
            "4MiB",
            "--json",
            "--max-ios",
            "4",
        ])
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "seqscan failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let runs: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (field(l, "runtime"), field(l, "cache")))
        .collect();
    // Runtime after runtime; the read loop beside the first warm scan;
    // glommio (O_DIRECT only) has no warm run.
    assert_eq!(
        runs,
        [
            ("threadpool", "cold"),
            ("read-loop", "warm"),
            ("threadpool", "warm"),
            ("memory", "hot"),
            ("threadpool", "hot"),
            ("threadpool", "hot"),
            ("tokio-uring", "cold"),
            ("tokio-uring", "warm"),
            ("tokio-uring", "hot"),
            ("tokio-uring", "hot"),
            ("glommio", "cold"),
            ("glommio", "hot"),
            ("glommio", "hot"),
            ("uring", "cold"),
            ("uring", "warm"),
            ("uring", "hot"),
            ("uring", "hot"),
            ("uring-tokio", "cold"),
            ("uring-tokio", "warm"),
            ("uring-tokio", "hot"),
            ("uring-tokio", "hot"),
        ],
        "{stdout}"
    );
    assert!(
        stderr.contains("glommio warm skipped") && stderr.contains("O_DIRECT"),
        "{stderr}"
    );
    let checksum = field(lines[0], "checksum");
    for l in &lines {
        assert_eq!(field(l, "checksum"), checksum, "checksums differ: {stdout}");
        assert_eq!(field(l, "pages"), "512", "{l}");
        let runtime = field(l, "runtime");
        let direct = if runtime == "glommio" {
            "true"
        } else {
            "false"
        };
        assert_eq!(field(l, "direct"), direct, "{l}");
        if runtime == "read-loop" || runtime == "memory" {
            continue;
        }
        let max_in_flight: u64 = field(l, "max_in_flight").parse().unwrap();
        match field(l, "cache") {
            "cold" => {
                assert_eq!(field(l, "blocks_read"), "512", "{l}");
                assert!((1..=4).contains(&max_in_flight), "{l}");
            }
            "warm" => assert_eq!(field(l, "blocks_read"), "512", "{l}"),
            "hot" => {
                assert_eq!(field(l, "reads"), "0", "hot run read: {l}");
                assert_eq!(field(l, "hits"), "512", "{l}");
            }
            other => panic!("unexpected cache mode {other}: {l}"),
        }
    }
    // The engines' counters show which engine did the reads.
    let cold = |rt: &str| {
        lines
            .iter()
            .find(|l| field(l, "runtime") == rt && field(l, "cache") == "cold")
            .expect("cold run")
            .to_string()
    };
    assert_eq!(field(&cold("tokio-uring"), "engine_bytes"), "4194304");
    assert_eq!(field(&cold("glommio"), "engine_bytes_copied"), "4194304");
    field(&cold("threadpool"), "engine_thread_preads");
    assert!(stderr.contains("all runs agree"), "{stderr}");
}

/// `-h` prints the usage text, like `--help`.
#[test]
fn short_h_is_help() {
    common::assert_short_help("seqscan", env!("CARGO_BIN_EXE_seqscan"), &[]);
}

/// A `--file` that does not exist is an error without `--create`: a
/// mistyped path never becomes a new data file.
#[test]
fn missing_file_without_create_is_an_error_and_creates_nothing() {
    common::assert_missing_file_is_not_created("seqscan", env!("CARGO_BIN_EXE_seqscan"), &[]);
}

/// A data file larger than the free space is refused before a byte is
/// written.
#[test]
fn size_beyond_the_free_space_is_refused_before_writing() {
    common::assert_too_large_is_refused("seqscan", env!("CARGO_BIN_EXE_seqscan"), &[]);
}

/// A SIGINT that arrives while a data file is being created removes the
/// partial file and ends the program by that signal (a shell's 130): the
/// directory is left as it was.
#[test]
fn sigint_while_creating_leaves_no_partial_file() {
    signal_while_creating_leaves_no_partial_file(libc::SIGINT, "sigint");
}

/// The same for SIGTERM (a shell's 143).
#[test]
fn sigterm_while_creating_leaves_no_partial_file() {
    signal_while_creating_leaves_no_partial_file(libc::SIGTERM, "sigterm");
}

fn signal_while_creating_leaves_no_partial_file(sig: libc::c_int, tag: &str) {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let dir = common::temp_dir(&format!("seqscan-{tag}"));
    // Large enough to still be writing when the signal comes (it is sent as
    // soon as the temporary file appears), and within the free space.
    let free = pagestream_bench::data::free_bytes(&dir).expect("free space");
    let size = (free / 4).min(16 << 30) >> 20 << 20;
    if size < 256 << 20 {
        eprintln!("skipped: {free} bytes free in {}", dir.display());
        return;
    }
    let path = dir.join("big.dat");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_seqscan"));
    cmd.args(["--runtime", "threadpool", "--cache", "hot", "--create"])
        .arg("--file")
        .arg(&path)
        .args(["--size", &size.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec the child only calls `signal`, which is
    // async-signal-safe; it undoes a `sig` ignored by whatever started the
    // test (SIGINT in a shell's background job), which the child would
    // inherit and keep.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(sig, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn seqscan");
    let kill_and_fail = |child: &mut std::process::Child, why: String| -> ! {
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        panic!("{why}");
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !common::entries(&dir).iter().any(|n| n.contains(".tmp")) {
        if let Some(st) = child.try_wait().expect("try_wait") {
            kill_and_fail(
                &mut child,
                format!("seqscan ended ({st}) before creating the file"),
            );
        }
        if Instant::now() > deadline {
            kill_and_fail(&mut child, "no temporary file after 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: `kill` has no memory-safety preconditions; `pid` is our child,
    // which has not been reaped yet, so the id still names it.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            kill_and_fail(
                &mut child,
                format!("seqscan still running 30 s after signal {sig}"),
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let left = common::entries(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "left behind after signal {sig} ({status})"
    );
    assert_eq!(status.signal(), Some(sig), "{status}");
}
