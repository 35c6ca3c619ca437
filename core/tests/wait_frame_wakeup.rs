//! Wake-ups. A stream waiting for another stream's read of its head block
//! registers for both that frame and its own reads; one of its own reads
//! finishing just before it registers must not be lost (issue 14, item 9).
//! And a read that finishes while the stream is not waiting for it does not
//! wake the task: only a `Pending` is owed a wake-up. (On tokio's
//! multi-thread runtime a task woken while it runs is polled again as a
//! yield, and another worker is woken to steal it: a scan then hops between
//! threads.)

use futures::task::noop_waker;
use futures::Stream;
use pagestream::source;
use pagestream::testing::{MemEngine, MemFile, Stall};
use pagestream::{BufferPool, EngineHints, IoEngine, ReadRequest, ReadStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

const BS: usize = 8192;

/// Holds every read; `help` has another thread complete one held read and
/// waits for it, then says it did none on this thread. So a read of the
/// stream finishes exactly between the stream's look at its mailbox and its
/// registering to wait, the window a completing thread can always hit.
#[derive(Clone, Default)]
struct CompletesElsewhereOnHelp {
    inner: MemEngine,
    held: Arc<Mutex<Vec<(MemFile, ReadRequest)>>>,
}

impl IoEngine for CompletesElsewhereOnHelp {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        self.held.lock().unwrap().push((file.clone(), req));
    }
    fn hints(&self, _file: &MemFile) -> pagestream::EngineHints {
        EngineHints::new().with_help(true)
    }
    fn help(&self, _file: &MemFile) -> bool {
        let next = self.held.lock().unwrap().pop();
        if let Some((file, req)) = next {
            let inner = self.inner.clone();
            std::thread::spawn(move || inner.start_read(&file, req))
                .join()
                .unwrap();
        }
        false
    }
    fn name(&self) -> &'static str {
        "completes-elsewhere-on-help"
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
fn own_read_finishing_while_waiting_for_a_frame_is_not_lost() {
    let pool = BufferPool::new(32, BS).unwrap();
    let mem = MemEngine::new();
    let file = mem.create_stamped(16, BS);
    let noop = noop_waker();
    let mut noop_cx = Context::from_waker(&noop);

    // Another stream reads block 0 and its engine holds the read.
    let stall = Stall::every_read(mem.clone());
    let mut other = ReadStream::builder(&pool, stall.clone(), file.clone())
        .build(source::iter([0]))
        .unwrap();
    assert!(Pin::new(&mut other).poll_next(&mut noop_cx).is_pending());
    assert_eq!(stall.held(), 1);

    // This stream: block 0 is the other's read (its head waits for that
    // frame), block 5 its own read, block 9 pending (one read at a time).
    let engine = CompletesElsewhereOnHelp {
        inner: mem.clone(),
        ..Default::default()
    };
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .max_ios(1)
        .io_combine_limit(3)
        .full(true)
        .build(source::iter([0, 5, 9]))
        .unwrap();
    let count = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut s).poll_next(&mut cx).is_pending());
    assert_eq!(engine.held.lock().unwrap().len(), 0, "block 5 was read");
    // Pending is a promise to wake this waker when there is news. The read
    // of block 5 has finished: either the poll took it in (nothing of ours
    // left in flight) or this waker has been woken for it.
    assert!(
        count.0.load(Ordering::SeqCst) > 0 || s.reads_in_flight() == 0,
        "lost wake-up: the stream's read finished while it registered to wait for \
         another stream's frame; it sleeps with {} read(s) it will not hear about",
        s.reads_in_flight()
    );

    // The rest runs to the end.
    stall.release_all();
    let mut got = Vec::new();
    for _ in 0..1000 {
        match Pin::new(&mut s).poll_next(&mut cx) {
            Poll::Ready(Some(page)) => got.push(page.unwrap().block()),
            Poll::Ready(None) => break,
            Poll::Pending => {}
        }
    }
    assert_eq!(got, [0, 5, 9]);
    while let Poll::Ready(Some(page)) = Pin::new(&mut other).poll_next(&mut noop_cx) {
        assert_eq!(page.unwrap().block(), 0);
    }
}

/// Pages of the file the running-task test scans.
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
