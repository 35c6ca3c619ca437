//! Shared by the example programs' end-to-end tests: running a program,
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
/// `args`, is a usage error: exit code 2, a first stderr line
/// `program: error: …` that contains `needle`, and no panic.
pub fn assert_usage_error(program: &str, args: &[&str], needle: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    // The message is the first line; the usage text follows.
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.starts_with(&format!("{program}: error: ")),
        "{args:?}: {err}"
    );
    assert!(
        first.contains(needle),
        "{args:?}: {first:?} lacks {needle:?}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

/// Calls `f` with the path (as a string) of a data file in the temp dir
/// named for `tag` and this process, which `f` has the program create;
/// removes the file afterwards.
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
