//! `pagestream-bench soak`, briefly, on every runtime that starts here
//! (object-store when nginx is installed): it passes (every page verified,
//! nothing lost, no descriptor left open) and every kind of session
//! occurred; bad flags are usage errors.

mod common;

use pagestream::testing::require;
use pagestream_runtimes::{Env, Runtime, Workload};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_pagestream-bench");

struct Nothing;

impl Workload for Nothing {
    type Output = ();

    async fn run<E: Env>(self, _env: E) {}
}

/// The runtimes to soak: those that start here, and object-store when
/// nginx does (under `CI=true`, every one must).
fn runtimes() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Runtime::ALL
        .into_iter()
        .filter(|rt| require(&format!("the {rt} runtime"), rt.run(Nothing)).is_some())
        .map(Runtime::name)
        .collect();
    let dir = common::temp_dir("soak-nginx");
    if require(
        "nginx",
        pagestream_object_store::testing::Nginx::start(&dir),
    )
    .is_some()
    {
        v.push(Runtime::ObjectStore.name());
    }
    v
}

#[test]
fn a_short_soak_passes_on_every_runtime() {
    let list = runtimes().join(",");
    let out = common::run(
        "pagestream-bench",
        BIN,
        &[
            "soak",
            "--runtime",
            &list,
            "--duration",
            "2s",
            "--streams",
            "16",
            "--pool-frames",
            "64",
            "--size",
            "4MiB",
            "--seed",
            "7",
            "--json",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{list}: {stderr}\n{stdout}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), list.split(',').count(), "{stdout}");
    for (rt, v) in list.split(',').zip(&lines) {
        assert_eq!(v["runtime"], rt, "{v}");
        assert!(v["pages_verified"].as_u64().unwrap() > 0, "{v}");
        for (fate, n) in v["fates"].as_object().expect("fates") {
            assert!(n.as_u64().unwrap() > 0, "{rt}: no {fate} session: {v}");
        }
        let (start, end) = (v["fds_start"].as_u64(), v["fds_end"].as_u64());
        let glommio = u64::from(rt == "glommio");
        assert!(end <= start.map(|s| s + glommio), "{rt}: {v}");
    }
}

#[test]
fn bad_soak_flags_are_usage_errors() {
    for (args, needle) in [
        (&["soak", "--duration", "0s"][..], "--duration"),
        (&["soak", "--duration", "10"][..], "--duration"),
        (&["soak", "--streams", "0"][..], "--streams"),
        (&["soak", "--pool-frames", "8"][..], "--pool-frames"),
        (&["soak", "--runtime", "bogus"][..], "--runtime"),
        (&["soak", "--size", "12345"][..], "--size"),
    ] {
        let out = common::run("pagestream-bench", BIN, args);
        common::assert_usage_error("pagestream-bench", args, needle, &out);
    }
}
