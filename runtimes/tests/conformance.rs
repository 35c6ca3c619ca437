//! The core conformance suite, run through `pagestream-runtimes` on every
//! runtime: one workload, written once against [`Env`], run by
//! [`Runtime::run`] on the thread pool (buffered and `O_DIRECT`), tokio-uring
//! (buffered and `O_DIRECT`), glommio (`O_DIRECT`) and uring-tokio (buffered
//! and `O_DIRECT`, in the tokio runtime's `block_on`). A runtime that
//! cannot start here (io_uring unavailable, `RLIMIT_MEMLOCK` too low) is
//! skipped, or fails under `CI=true` (see `pagestream::testing::require`).

use pagestream::testing::conformance::{run_all, Harness};
use pagestream::testing::{require, DiskFiles};
use pagestream::IoEngine;
use pagestream_runtimes::{Env, FileOptions, Runtime, Workload};
use std::path::Path;

/// The conformance workload: the whole suite, buffered or `O_DIRECT`.
/// Returns the runtime it ran on and the engine's name.
struct Conformance {
    direct: bool,
}

impl Workload for Conformance {
    type Output = (Runtime, &'static str);

    async fn run<E: Env>(self, env: E) -> (Runtime, &'static str) {
        let direct = self.direct;
        let h = DiskFiles::new(
            env.engine(),
            format!(
                "{} {}",
                env.runtime(),
                if direct { "O_DIRECT" } else { "buffered" }
            ),
            |path: &Path, block_size| env.open_blocking(path, FileOptions { direct, block_size }),
        );
        let before = env.engine_counters();
        run_all(&h).await;
        let did = env.engine_counters().since(&before);
        eprintln!("{}: engine counters {did:?}", h.name());
        assert!(
            did.0.iter().any(|&(_, v)| v > 0),
            "{}: the engine did nothing: {did:?}",
            h.name()
        );
        (env.runtime(), env.engine().name())
    }
}

fn conformance(rt: Runtime, direct: bool) {
    let Some((ran_on, engine)) =
        require(&format!("the {rt} runtime"), rt.run(Conformance { direct }))
    else {
        return;
    };
    assert_eq!(ran_on, rt);
    assert_eq!(engine, rt.name(), "the runtime's engine reports its name");
}

#[test]
fn threadpool_buffered() {
    conformance(Runtime::ThreadPool, false);
}

#[test]
fn threadpool_direct() {
    conformance(Runtime::ThreadPool, true);
}

#[test]
fn tokio_uring_buffered() {
    conformance(Runtime::TokioUring, false);
}

#[test]
fn tokio_uring_direct() {
    conformance(Runtime::TokioUring, true);
}

#[test]
fn glommio_direct() {
    conformance(Runtime::Glommio, true);
}

#[test]
fn uring_tokio_buffered() {
    conformance(Runtime::UringTokio, false);
}

#[test]
fn uring_tokio_direct() {
    conformance(Runtime::UringTokio, true);
}
