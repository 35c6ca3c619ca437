//! Shared by the scan programs' end-to-end tests: running a program,
//! checking a usage error, a temp data file, reading JSON output lines.

#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs the program at `exe` (`env!("CARGO_BIN_EXE_…")`), named `program`,
/// with `args`, and collects its output.
pub fn run(program: &str, exe: &str, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e:?}"))
}

/// Checks that `out`, from running `program` with the bad command line
/// `args`, is a usage error: exit code 2, and on stderr one line
/// `program: error: …` that contains `needle` and points at
/// `program --help` (the usage text is not printed), and no panic.
pub fn assert_usage_error(program: &str, args: &[&str], needle: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line expected: {err}");
    let first = lines[0];
    assert!(
        first.starts_with(&format!("{program}: error: ")),
        "{args:?}: {err}"
    );
    assert!(
        first.contains(needle),
        "{args:?}: {first:?} lacks {needle:?}"
    );
    assert!(
        first.ends_with(&format!("see '{program} --help'")),
        "{args:?}: {first:?} does not point at --help"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

/// Checks that `-h` prints the same usage text as `--help` (on stdout, exit
/// code 0, nothing on stderr), for `program` run with `before` first (a
/// subcommand, or nothing).
pub fn assert_short_help(program: &str, exe: &str, before: &[&str]) {
    let mut outs = Vec::new();
    for flag in ["-h", "--help"] {
        let mut args = before.to_vec();
        args.push(flag);
        let out = run(program, exe, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{program} {args:?}: {err}");
        assert!(err.is_empty(), "{program} {args:?}: {err}");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.starts_with("usage: "), "{program} {args:?}: {text}");
        outs.push(text);
    }
    assert_eq!(
        outs[0], outs[1],
        "{program} {before:?}: -h differs from --help"
    );
}

/// A new empty directory in the temp dir for `tag` and this process.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pagestream-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The names in `dir`.
pub fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Checks that `program` (at `exe`), run with `args` and `--file` naming a
/// path that does not exist, without `--create`, fails (exit code 1) with
/// an error that names the path and `--create`, and creates nothing.
pub fn assert_missing_file_is_not_created(program: &str, exe: &str, args: &[&str]) {
    let dir = temp_dir(&format!("{program}-missing"));
    let path = dir.join("typo.dat");
    let p = path.to_str().expect("utf-8 temp path");
    let mut all = vec!["--file", p, "--size", "4MiB"];
    all.extend_from_slice(args);
    let out = run(program, exe, &all);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{all:?}: {err}");
    assert!(
        err.contains(p) && err.contains("--create"),
        "{all:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{all:?}: {err}");
    assert_eq!(
        entries(&dir),
        Vec::<String>::new(),
        "{all:?}: created something"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Checks that `program` (at `exe`) asked to `--create` a file larger than
/// the free space (1 PiB) fails (exit code 1) with an error naming the path,
/// the size asked for and the free space, and writes nothing.
pub fn assert_too_large_is_refused(program: &str, exe: &str, args: &[&str]) {
    let dir = temp_dir(&format!("{program}-huge"));
    let path = dir.join("huge.dat");
    let p = path.to_str().expect("utf-8 temp path");
    let mut all = vec!["--file", p, "--create", "--size", "1PiB"];
    all.extend_from_slice(args);
    let out = run(program, exe, &all);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{all:?}: {err}");
    assert!(
        err.contains(p) && err.contains("1PiB asked for") && err.contains(" free on "),
        "{all:?}: {err}"
    );
    assert_eq!(
        entries(&dir),
        Vec::<String>::new(),
        "{all:?}: wrote something"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Calls `f` with the path (as a string) of a data file in the temp dir
/// named for `tag` and this process, which `f` has the program create (with
/// `--create`); removes the file afterwards.
pub fn with_temp_file<T>(tag: &str, f: impl FnOnce(&str) -> T) -> T {
    let path = std::env::temp_dir().join(format!("pagestream-{tag}-{}.dat", std::process::id()));
    let out = f(path.to_str().expect("utf-8 temp path"));
    let _ = std::fs::remove_file(&path);
    out
}

/// The value of `"key":` in a one-line JSON object (numbers, strings, bools).
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":");
    let start = line
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        + pat.len();
    let rest = &line[start..];
    let end = rest.find([',', '}']).expect("end of value");
    rest[..end].trim_matches('"')
}

/// The number `"key":` holds in a one-line JSON object.
pub fn num(line: &str, key: &str) -> f64 {
    field(line, key)
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {line}"))
}

/// Runs `exe` (named `program`) with `args` and `env` added to its
/// environment, and collects its output; a run that has not ended after
/// `limit` is killed and fails the test (a hang is a bug, not a slow run).
pub fn run_within(
    program: &str,
    exe: &str,
    args: &[&str],
    env: &[(&str, String)],
    limit: std::time::Duration,
) -> Output {
    use std::process::Stdio;
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {program}: {e:?}"));
    // Read both pipes as the program writes them, so a full pipe cannot
    // stall it.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.join().unwrap_or_default();
            panic!(
                "{program} {args:?} still ran after {limit:?}: killed\n{}",
                String::from_utf8_lossy(&err)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}
