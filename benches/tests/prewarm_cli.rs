//! `prewarm` end to end: bad command lines exit with 2 and a clear message;
//! a small load prints one JSON object per load with the public field names,
//! and every block of the file ends up valid in the pool, read in full-sized
//! reads.

mod common;

use common::{assert_usage_error, field, num, with_temp_file};

fn prewarm(args: &[&str]) -> std::process::Output {
    common::run("prewarm", env!("CARGO_BIN_EXE_prewarm"), args)
}

#[test]
fn bad_command_lines_exit_2_with_a_message() {
    for (args, needle) in [
        (&["--bogus"][..], "unknown option --bogus"),
        (&["--cache", "hot"], "hot"),
        (&["--full", "maybe"], "on or off"),
        (&["--repeat", "0"], "--repeat"),
        (&["--combine", "0"], "--combine"),
        (&["--direct", "--cache", "warm"], "bypass"),
        (&["stray"], "unexpected argument"),
    ] {
        let out = prewarm(args);
        assert_usage_error("prewarm", args, needle, &out);
    }
}

#[test]
fn loads_the_whole_file_into_the_pool() {
    let out = with_temp_file("prewarm", |p| {
        // Create it first (stamped, 4 MiB = 512 blocks), then load twice
        // from cold and once with the ramp, for comparison.
        let mut all = Vec::new();
        for extra in [&["--repeat", "2"][..], &["--full", "off"]] {
            let mut args = vec![
                "--file",
                p,
                "--create",
                "--size",
                "4MiB",
                "--json",
                "--max-ios",
                "4",
            ];
            args.extend_from_slice(extra);
            let out = prewarm(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "prewarm {args:?} failed: {stderr}");
            assert!(stderr.contains("MiB/s"), "{stderr}");
            all.push(String::from_utf8_lossy(&out.stdout).to_string());
        }
        all
    });
    let on: Vec<&str> = out[0].lines().collect();
    let off: Vec<&str> = out[1].lines().collect();
    assert_eq!((on.len(), off.len()), (2, 1), "{out:?}");
    for l in on.iter().chain(&off) {
        for key in [
            "runtime",
            "cache",
            "seconds",
            "mib_per_s",
            "pages_per_s",
            "reads",
            "mean_blocks_per_read",
            "max_in_flight",
        ] {
            field(l, key);
        }
        assert_eq!(field(l, "runtime"), "threadpool", "{l}");
        assert_eq!(field(l, "cache"), "cold", "{l}");
        assert_eq!(field(l, "pages"), "512", "{l}");
        assert_eq!(field(l, "blocks_read"), "512", "{l}");
        assert_eq!(field(l, "pool_valid"), "512", "{l}");
        assert!(num(l, "mib_per_s") > 0.0, "{l}");
    }
    for l in &on {
        assert_eq!(field(l, "full"), "true", "{l}");
        // No ramp: every read is full-sized (16 blocks; 512 = 32 × 16).
        assert_eq!(field(l, "reads"), "32", "{l}");
    }
    assert_eq!(field(off[0], "full"), "false");
    // The ramp starts at one block: more, smaller reads.
    assert!(num(off[0], "reads") > 32.0, "{}", off[0]);
}

/// `-h` prints the usage text, like `--help`.
#[test]
fn short_h_is_help() {
    common::assert_short_help("prewarm", env!("CARGO_BIN_EXE_prewarm"), &[]);
}

/// A `--file` that does not exist is an error without `--create`: a
/// mistyped path never becomes a new data file.
#[test]
fn missing_file_without_create_is_an_error_and_creates_nothing() {
    common::assert_missing_file_is_not_created("prewarm", env!("CARGO_BIN_EXE_prewarm"), &[]);
}

/// A data file larger than the free space is refused before a byte is
/// written.
#[test]
fn size_beyond_the_free_space_is_refused_before_writing() {
    common::assert_too_large_is_refused("prewarm", env!("CARGO_BIN_EXE_prewarm"), &[]);
}
