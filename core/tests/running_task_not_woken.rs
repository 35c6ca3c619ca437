//! A read that finishes while the stream is not waiting for it does not
//! wake the task: only a `Pending` is owed a wake-up. (On tokio's
//! multi-thread runtime a task woken while it runs is polled again as a
//! yield, and another worker is woken to steal it: a scan then hops between
//! threads.)

use futures::Stream;
use pagestream::source;
use pagestream::testing::{MemEngine, MemFile};
use pagestream::{BufferPool, EngineHints, IoEngine, ReadRequest, ReadStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

const BS: usize = 8192;
const PAGES: u64 = 64;

/// Holds every read. `help` completes the oldest held read and says it
/// did none, as when another thread completes a read just as the stream
/// looks: the stream then finds the read in its mailbox only after it has
/// put its waker there.
#[derive(Clone, Default)]
struct CompletesOnHelpQuietly {
    inner: MemEngine,
    held: Arc<Mutex<Vec<(MemFile, ReadRequest)>>>,
}

impl CompletesOnHelpQuietly {
    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    fn release_all(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap());
        for (f, r) in held {
            self.inner.start_read(&f, r);
        }
    }
}

impl IoEngine for CompletesOnHelpQuietly {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        self.held.lock().unwrap().push((file.clone(), req));
    }
    fn hints(&self, _file: &MemFile) -> EngineHints {
        EngineHints::new().with_help(true)
    }
    fn help(&self, _file: &MemFile) -> bool {
        let oldest = {
            let mut held = self.held.lock().unwrap();
            (!held.is_empty()).then(|| held.remove(0))
        };
        if let Some((file, req)) = oldest {
            self.inner.start_read(&file, req);
        }
        false
    }
    fn name(&self) -> &'static str {
        "completes-on-help-quietly"
    }
}

#[derive(Default)]
struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn reads_finishing_after_a_poll_that_returned_a_page_do_not_wake_the_task() {
    let pool = BufferPool::new(PAGES as usize, BS).unwrap();
    let engine = CompletesOnHelpQuietly::default();
    let file = engine.inner.create_stamped(PAGES, BS);
    let bytes = file.bytes().to_vec();
    let want = |b: u64| &bytes[b as usize * BS..(b as usize + 1) * BS];
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .io_combine_limit(1)
        .max_ios(4)
        .build(source::forward(0..PAGES))
        .unwrap();
    let count = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    let wakes = || count.0.load(Ordering::SeqCst);

    // The first poll starts reads, and its help completes block 0's just
    // before the stream would wait: the stream hands out page 0.
    match Pin::new(&mut s).poll_next(&mut cx) {
        Poll::Ready(Some(p)) => {
            let p = p.unwrap();
            assert_eq!(p.block(), 0);
            assert!(p[..] == *want(0), "page 0's bytes");
        }
        other => panic!(
            "expected page 0, got {:?}",
            other.map(|o| o.map(|r| r.is_ok()))
        ),
    }
    assert!(engine.held() > 0, "the stream keeps no read in flight");
    // The reads it keeps in flight finish while the task is not waiting.
    engine.release_all();
    assert_eq!(
        wakes(),
        0,
        "reads finishing after a poll that returned a page woke the task"
    );

    // The scan goes on to its end, every page in order, each wait woken.
    let mut next = 1;
    loop {
        let before = wakes();
        match Pin::new(&mut s).poll_next(&mut cx) {
            Poll::Ready(Some(p)) => {
                let p = p.unwrap();
                assert_eq!(p.block(), next);
                assert!(p[..] == *want(next), "page {next}'s bytes");
                next += 1;
            }
            Poll::Ready(None) => break,
            Poll::Pending => {
                engine.release_all();
                assert_eq!(wakes(), before + 1, "a wait at page {next} was not woken");
            }
        }
    }
    assert_eq!(next, PAGES);
}
