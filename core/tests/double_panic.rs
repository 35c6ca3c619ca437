//! A read whose finish hook panics while the thread is already unwinding
//! (the request is dropped by another panic's cleanup) must not abort the
//! process, also when the hook's panic payload panics as it is dropped. An abort kills the whole test binary, so the scenario runs in a
//! child process: this test re-runs its own binary with an environment
//! variable set and checks how the child ended.

use futures::task::noop_waker_ref;
use futures::Stream;
use pagestream::testing::{MemEngine, PanicOnFinish, Stall};
use pagestream::{source, BufferPool, EngineHints, IoEngine, ReadRequest, ReadStream};
use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

const CHILD: &str = "PAGESTREAM_DOUBLE_PANIC_CHILD";
const DONE: &str = "double-panic child: first panic caught, process alive";

/// A panic payload whose own drop panics.
struct BadPayload;

impl Drop for BadPayload {
    fn drop(&mut self) {
        panic!("BadPayload: this panic payload's drop panics on purpose");
    }
}

/// The first read gets a finish hook that panics with a [`BadPayload`].
#[derive(Clone)]
struct BadHook<E>(E, Arc<AtomicBool>);

impl<E: IoEngine> IoEngine for BadHook<E> {
    type File = E::File;

    fn start_read(&self, file: &E::File, mut req: ReadRequest) {
        if !self.1.swap(true, Ordering::Relaxed) {
            req.on_finish(|_| std::panic::panic_any(BadPayload));
        }
        self.0.start_read(file, req);
    }

    fn hints(&self, file: &E::File) -> EngineHints {
        self.0.hints(file)
    }

    fn name(&self) -> &'static str {
        "bad-hooks"
    }
}

/// Cancels every read the stall holds when dropped.
struct CancelOnDrop(Stall<MemEngine>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel_all();
    }
}

fn child<E: IoEngine<File = pagestream::testing::MemFile>>(
    stall: Stall<MemEngine>,
    file: pagestream::testing::MemFile,
    engine: E,
) {
    let pool = BufferPool::new(16, 8192).unwrap();
    let mut stream = ReadStream::builder(&pool, engine, file)
        .build(source::forward(0..8))
        .unwrap();
    let mut cx = Context::from_waker(noop_waker_ref());
    assert!(matches!(
        Pin::new(&mut stream).poll_next(&mut cx),
        Poll::Pending
    ));
    assert!(stall.held() > 0, "the stall holds the read");
    let r = catch_unwind(AssertUnwindSafe(|| {
        // Unwinding drops the guard, which drops the held read: its hook
        // panics while this panic unwinds.
        let _cancel = CancelOnDrop(stall.clone());
        panic!("the first panic");
    }));
    let msg = r.expect_err("the first panic unwinds");
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"the first panic"));
    assert_eq!(stall.held(), 0);
    // The request's own cleanup ran: the stream heard the read ended.
    assert!(
        matches!(
            Pin::new(&mut stream).poll_next(&mut cx),
            Poll::Ready(Some(Err(_))) | Poll::Pending
        ),
        "the stream goes on"
    );
    drop(stream);
    // Reads the second poll started (hooks that do not panic).
    stall.cancel_all();
    let st = pool.stats();
    assert_eq!((st.pinned, st.reading), (0, 0), "{st}");
    println!("{DONE}");
}

/// Runs `test` again in a child process (which calls [`child`]) and checks
/// that it ended normally.
fn in_child(test: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        None,
        "the child was killed by signal {:?} (SIGABRT is 6)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.signal()
    );
    assert!(
        out.status.success() && stdout.contains(DONE),
        "the child failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

#[test]
fn a_hook_panic_while_unwinding_does_not_abort() {
    if std::env::var_os(CHILD).is_none() {
        return in_child("a_hook_panic_while_unwinding_does_not_abort");
    }
    let mem = MemEngine::new();
    let file = mem.create_stamped(8, 8192);
    let stall = Stall::every_read(mem);
    // The hook goes on before the stall holds the read.
    let engine = PanicOnFinish::new(stall.clone(), 0);
    child(stall, file, engine);
}

#[test]
fn a_hook_payload_that_panics_when_dropped_while_unwinding_does_not_abort() {
    if std::env::var_os(CHILD).is_none() {
        return in_child("a_hook_payload_that_panics_when_dropped_while_unwinding_does_not_abort");
    }
    let mem = MemEngine::new();
    let file = mem.create_stamped(8, 8192);
    let stall = Stall::every_read(mem);
    let engine = BadHook(stall.clone(), Arc::new(AtomicBool::new(false)));
    child(stall, file, engine);
}
