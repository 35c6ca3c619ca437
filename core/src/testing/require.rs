//! Tests that need something from outside the build: a program
//! (PostgreSQL, fio), a kernel feature (io_uring) or a resource limit
//! (glommio's `RLIMIT_MEMLOCK`).
//!
//! Found, the test runs. Not found, [`require`] prints one line, `SKIP
//! <test>: <what> unavailable (<reason>); set CI=true to make this a failure`,
//! and the test returns early (the harness has no skipped status, so it
//! counts as passed). Under `CI=true` (or `CI=1`, as CI systems set it) a
//! missing dependency is a failure instead: there everything must be
//! installed, and a test that silently stops testing is a bug.
//!
//! The line is written to the process's standard error directly, not
//! through `eprintln!`, whose output the test harness captures (and shows
//! only for failing tests or under `--nocapture`): a skip is visible in
//! every `cargo test` run.
//!
//! ```no_run
//! use pagestream::testing::require;
//! use std::process::Command;
//!
//! #[test]
//! fn fio_reads_the_file() {
//!     let fio = Command::new("fio").arg("--version").output();
//!     let Some(_) = require("fio", fio.map_err(|e| format!("cannot run fio: {e}"))) else {
//!         return;
//!     };
//!     // … run fio
//! }
//! ```

use std::fmt::Display;
use std::io::Write;

/// Whether this run is CI's: the `CI` variable is `true` (any case) or `1`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// The running test's name (the harness names each test's thread after
/// it), or `"test"` where it does not.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "test".to_string(),
    }
}

/// `found`'s value, or `None` after printing why the calling test is
/// skipped: `what` (e.g. `"PostgreSQL 15"`) could not be found, for
/// `reason` (which should name the setting or package that provides it).
///
/// # Panics
///
/// Under `CI=true` (see [`in_ci`]) a missing dependency panics with the same
/// reason instead of skipping.
#[track_caller]
pub fn require<T, E: Display>(what: &str, found: Result<T, E>) -> Option<T> {
    decide(
        in_ci(),
        &test_name(),
        what,
        found,
        &mut std::io::stderr().lock(),
    )
}

/// [`require`] for the test named `test`, for code that runs on a thread of
/// its own rather than the test's (which [`require`] takes the name from).
///
/// # Panics
///
/// Under `CI=true`, as [`require`].
#[track_caller]
pub fn require_named<T, E: Display>(test: &str, what: &str, found: Result<T, E>) -> Option<T> {
    decide(in_ci(), test, what, found, &mut std::io::stderr().lock())
}

/// [`require`] with its inputs and output named, for its own tests.
#[track_caller]
fn decide<T, E: Display>(
    ci: bool,
    test: &str,
    what: &str,
    found: Result<T, E>,
    out: &mut dyn Write,
) -> Option<T> {
    let reason = match found {
        Ok(v) => return Some(v),
        Err(e) => e,
    };
    if ci {
        panic!("{test}: {what} unavailable ({reason}), and under CI=true that is a failure");
    }
    // Nothing to do if stderr is gone: the test is skipped either way.
    let _ = writeln!(
        out,
        "SKIP {test}: {what} unavailable ({reason}); set CI=true to make this a failure"
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn found_is_returned_and_prints_nothing() {
        for ci in [false, true] {
            let mut out = Vec::new();
            let v = decide(ci, "t", "fio", Ok::<_, String>(7), &mut out);
            assert_eq!(v, Some(7));
            assert!(out.is_empty());
        }
    }

    #[test]
    fn missing_is_one_skip_line() {
        let mut out = Vec::new();
        let v: Option<()> = decide(false, "t", "fio", Err("not on PATH"), &mut out);
        assert_eq!(v, None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "SKIP t: fio unavailable (not on PATH); set CI=true to make this a failure\n"
        );
    }

    #[test]
    #[should_panic(
        expected = "t: fio unavailable (not on PATH), and under CI=true that is a failure"
    )]
    fn missing_under_ci_panics() {
        let _: Option<()> = decide(true, "t", "fio", Err("not on PATH"), &mut Vec::new());
    }

    #[test]
    fn ci_values() {
        // A child per value: the environment is the process's, shared with
        // the tests running beside this one.
        for (value, ci) in [
            ("true", true),
            ("TRUE", true),
            ("1", true),
            ("false", false),
            ("", false),
        ] {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "testing::require::tests::child", "--nocapture"])
                .env(CHILD, "ci")
                .env("CI", value)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains(&format!("in_ci={ci}")),
                "CI={value:?}: {stdout}"
            );
        }
    }

    /// Set in the child processes [`child`] runs as.
    const CHILD: &str = "PAGESTREAM_REQUIRE_CHILD";

    /// A test binary run without `--nocapture` still shows the skip line,
    /// named after the test; with `CI=true` the test fails with the reason.
    #[test]
    fn skip_line_escapes_the_capture_and_ci_fails() {
        let run = |ci: Option<&str>| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "testing::require::tests::child",
                "--test-threads=1",
            ])
            .env(CHILD, "missing")
            .env_remove("CI");
            if let Some(v) = ci {
                cmd.env("CI", v);
            }
            cmd.output().unwrap()
        };
        let out = run(None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(
                "SKIP testing::require::tests::child: the frobnicator unavailable \
                 (FROB_DIR=/nonexistent); set CI=true to make this a failure"
            ),
            "{stderr}"
        );
        let out = run(Some("true"));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{all}");
        assert!(all.contains("FROB_DIR=/nonexistent"), "{all}");
        assert!(!all.contains("SKIP"), "{all}");
    }

    /// Does nothing unless run as a child by the tests above.
    #[test]
    fn child() {
        match std::env::var(CHILD).as_deref() {
            Ok("ci") => println!("in_ci={}", in_ci()),
            Ok("missing") => {
                let r: Option<()> = require("the frobnicator", Err("FROB_DIR=/nonexistent"));
                assert!(r.is_none());
            }
            _ => {}
        }
    }
}
