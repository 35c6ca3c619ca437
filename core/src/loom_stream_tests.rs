//! Loom models of a whole [`ReadStream`]: its completion mailbox
//! (`StreamShared::read_finished` / `take_done`), the waker it registers
//! before a `Pending` (`register_or_done`, and the take at the start of
//! `poll_page`) and `close`'s register-then-drain, over an engine whose
//! reads complete on threads of their own. Run with
//! `RUSTFLAGS="--cfg pagestream_loom" CARGO_TARGET_DIR=target/loom cargo test -p pagestream --lib --release loom`.
//!
//! The consumer drives the stream with `loom::future::block_on`, which parks
//! its thread until the stream's waker is woken: a lost wake-up leaves it
//! parked with every other thread finished, which loom reports as a
//! deadlock. Every page's block and bytes are checked; loom's leak check
//! at the end of each execution also finds a request (or a stream's
//! shared state) that was never dropped.
//!
//! The stream's own work between scheduling points (planning, the pool's
//! atomics) multiplies the interleavings, so each model bounds preemptions
//! (see [`model`]).

use crate::engine::{EngineFile, EngineHints, FileId, IoEngine, ReadRequest};
use crate::pool::Status;
use crate::testing::stamp;
use crate::{source, BufferPool, ReadStream, YieldBudget};
use futures::StreamExt;
use loom::future::block_on;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::task::Poll;

const BS: usize = 512;
const SEED: u64 = 0x5EED_100A;

/// Runs `f` under loom with at most `preemptions` preemptions per
/// execution. Unbounded, the stream's bookkeeping makes a model take many
/// minutes. The races these models are about (a completion between two
/// steps of the stream, or two completions between them) need at most two;
/// three are used where they cost seconds in release (the first two
/// models, about 2 s and 11 s; `close` at three takes over a minute, at two
/// about 6 s).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// A file of stamped blocks (plain std data: only the engine's threads
/// read it, after it is built).
#[derive(Debug, Clone)]
struct File {
    data: std::sync::Arc<Vec<u8>>,
}

impl File {
    fn stamped(nblocks: u64) -> File {
        let mut data = vec![0; nblocks as usize * BS];
        for (b, page) in data.chunks_mut(BS).enumerate() {
            stamp::fill(SEED, b as u64, page);
        }
        File {
            data: std::sync::Arc::new(data),
        }
    }
}

impl EngineFile for File {
    fn id(&self) -> FileId {
        FileId::new(1)
    }

    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.data.len() as u64)
    }

    /// No kernel read-ahead: the planner keeps more than one read of a
    /// sequential run in flight itself.
    fn kernel_readahead(&self) -> bool {
        false
    }
}

/// An engine that does each read on a loom thread of its own: the thread
/// copies the file's bytes in and completes the request (issuing any
/// remainder), so completions race the stream's polls.
#[derive(Debug)]
struct Threads;

impl IoEngine for Threads {
    type File = File;

    fn start_read(&self, file: &File, req: ReadRequest) {
        let data = std::sync::Arc::clone(&file.data);
        loom::thread::spawn(move || {
            let mut req = req;
            loop {
                let off = req.offset() as usize;
                let end = (off + req.len_bytes()).min(data.len());
                let n = req.copy_from(&data[off..end]);
                match req.complete(Ok(n)) {
                    Some(rest) => req = rest,
                    None => return,
                }
            }
        });
    }

    /// Full look-ahead: the first read raises the distance to the pin
    /// budget, so with `max_ios` 2 a stream of two blocks has both reads in
    /// flight at once.
    fn hints(&self, _file: &File) -> EngineHints {
        EngineHints::new().with_full_look_ahead(true)
    }

    fn name(&self) -> &'static str {
        "loom-threads"
    }
}

/// A stream of blocks `0..nblocks` over [`Threads`] in a pool of 4 frames.
/// The yield budget is off: a time budget would make the model's paths
/// depend on the wall clock.
fn stream(
    pool: &BufferPool,
    nblocks: u64,
    max_ios: usize,
    combine: usize,
) -> ReadStream<Threads, source::Forward> {
    ReadStream::builder(pool, Threads, File::stamped(nblocks))
        .max_ios(max_ios)
        .io_combine_limit(combine)
        .yield_budget(YieldBudget::Unlimited)
        .build(source::forward(0..nblocks))
        .expect("stream")
}

fn pool() -> BufferPool {
    BufferPool::builder()
        .frames(4)
        .block_size(BS)
        .build()
        .expect("pool")
}

/// Polls `s` to its end under `block_on`, checking that it hands out
/// blocks `0..nblocks` in order, each with its own bytes.
fn read_all(s: &mut ReadStream<Threads, source::Forward>, nblocks: u64) {
    block_on(async {
        let mut next = 0;
        while let Some(page) = s.next().await {
            let page = page.expect("no read fails");
            assert_eq!(page.block(), next, "pages out of order");
            assert!(stamp::check(SEED, next, &page), "block {next}'s bytes");
            next += 1;
        }
        assert_eq!(next, nblocks, "pages missing");
    });
}

/// Asserts that no frame of `pool` is pinned or in IO.
fn assert_pool_idle(pool: &BufferPool) {
    let p = &pool.inner;
    for f in 0..p.nframes as u32 {
        assert_ne!(p.status(f), Status::Io, "frame {f} still in IO");
        assert!(!p.is_pinned(f), "frame {f} still pinned");
    }
}

/// One read at a time (`max_ios` 1, one block per read), two blocks: each
/// read completes on its thread while the stream drains its mailbox,
/// registers its waker or re-checks the mailbox. Proves that a completion
/// at any of those points is seen, either by the re-check after the
/// registration or by the wake-up it sends the registered waker: the
/// stream hands out both pages, in order with their bytes, and never
/// sleeps with a read in its mailbox.
#[test]
fn loom_stream_sees_a_read_completing_while_it_registers() {
    model(3, || {
        let pool = pool();
        let mut s = stream(&pool, 2, 1, 1);
        read_all(&mut s, 2);
        assert_eq!(s.stats().reads, 2);
        drop(s);
        assert_pool_idle(&pool);
    });
}

/// Two reads in flight (`max_ios` 2, one block per read) completing on two
/// threads at once, racing each other into the mailbox and the stream's
/// drain (`take_done` clears the mailbox's flag under its lock, so an entry
/// pushed by the second thread while the first's is taken is never left
/// flagged empty). Proves that the stream hands out both pages, in order
/// with their bytes, whichever read finishes first and whatever the stream
/// is doing when each does, and never sleeps with a read in its mailbox.
#[test]
fn loom_stream_two_reads_complete_on_two_threads() {
    model(3, || {
        let pool = pool();
        let mut s = stream(&pool, 2, 2, 1);
        read_all(&mut s, 2);
        assert_eq!(s.stats().reads, 2);
        drop(s);
        assert_pool_idle(&pool);
    });
}

/// Polls `fut` once (with `block_on`'s waker) and returns what it gave.
async fn poll_once<F: Future>(fut: F) -> Poll<F::Output> {
    let mut fut = pin!(fut);
    futures::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

/// `close` racing the completion of the stream's reads: the stream is
/// polled once (starting its reads; the first may finish and be handed
/// out, or not), then closed while its reads complete on their threads.
/// Proves that `close` returns only once every read the stream started has
/// reported to its mailbox, and that a report arriving while `close`
/// registers its waker is never missed (`close` would sleep forever):
/// afterwards no frame is in IO or pinned, and the stats count every read
/// as finished.
#[test]
fn loom_close_waits_for_reads_completing_meanwhile() {
    model(2, || {
        let pool = pool();
        let mut s = stream(&pool, 2, 2, 1);
        let st = block_on(async {
            match poll_once(s.next()).await {
                Poll::Ready(Some(page)) => {
                    let page = page.expect("no read fails");
                    assert_eq!(page.block(), 0);
                    assert!(stamp::check(SEED, 0, &page), "block 0's bytes");
                }
                Poll::Ready(None) => panic!("a stream of two blocks ended at once"),
                Poll::Pending => {}
            }
            s.close().await
        });
        assert!(st.reads >= 1, "{st}");
        assert_pool_idle(&pool);
    });
}
