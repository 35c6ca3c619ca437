//! One stream over the in-memory file, driven by the fuzzer's bytes: its
//! settings, the blocks its source names (some past the end) and the order
//! in which the engine completes, shortens or fails its reads. The oracle
//! is the naive reader: every block in source order, holding its stamp,
//! past-the-end blocks as errors in place, an I/O error only for a block a
//! failed read covered; a lone stream whose consumer holds no page never
//! finds the pool exhausted and never waits with no read pending; at the
//! end no pin is held and no frame is in IO.
#![no_main]

use futures::task::noop_waker;
use futures::Stream;
use libfuzzer_sys::fuzz_target;
use pagestream::testing::{stamp, MemEngine, Stall};
use pagestream::{source, BufferPool, IoEngine, ReadError, ReadStream, YieldBudget};
use std::collections::BTreeSet;
use std::pin::Pin;
use std::task::{Context, Poll};

const BS: usize = 512;
const NBLOCKS: u64 = 72;

/// The fuzzer's bytes, read front to back; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    let max_ios = (input.next() % 9) as usize;
    let combine = 1 + (input.next() % 16) as usize;
    let frames = 1 + (input.next() % 64) as usize;
    let gap_limit = (input.next() % 4) as usize;
    let flags = input.next();
    let len = (input.next() % 96) as usize;
    let seq: Vec<u64> = (0..len).map(|_| u64::from(input.next() % 80)).collect();

    let mem = MemEngine::new();
    let file = mem.create_stamped(NBLOCKS, BS);
    let pool = BufferPool::new(frames, BS).unwrap();
    // Holds every read until the input completes it.
    let q = Stall::every_read(MemEngine::new());
    let mut stream = ReadStream::builder(&pool, q.clone(), file.clone())
        .max_ios(max_ios)
        .io_combine_limit(combine)
        .gap_limit(gap_limit)
        .fast_path(flags & 1 == 0)
        .full(flags & 2 != 0)
        .backward_combining(flags & 4 == 0)
        // No yield budget: a `Pending` then always means a wait for a read
        // (a budget's yield would look like a hang to the no-op waker).
        .yield_budget(YieldBudget::Unlimited)
        .build(source::iter(seq.clone()))
        .unwrap();
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut failed = BTreeSet::new();
    let mut pos = 0;
    loop {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(None) => {
                assert_eq!(pos, seq.len(), "ended early");
                break;
            }
            Poll::Ready(Some(item)) => {
                let want = seq[pos];
                match item {
                    Ok(page) => {
                        assert_eq!(page.block(), want);
                        assert!(want < NBLOCKS && stamp::check(file.seed(), want, &page));
                    }
                    Err(e) => match ReadError::from_io(&e) {
                        Some(ReadError::PastEnd { block, .. }) => {
                            assert!(*block == want && want >= NBLOCKS)
                        }
                        Some(ReadError::Io { block, .. }) => {
                            assert!(*block == want && failed.contains(&want), "{e}")
                        }
                        _ => panic!("block {want}: unexpected error {e}"),
                    },
                }
                pos += 1;
            }
            Poll::Pending => {
                // Complete one queued read, chosen by the input: whole,
                // short, or failed.
                let held = q.held();
                assert!(held > 0, "waits with no read pending: hang");
                let (_, mut req) = q.take(input.next() as usize % held).expect("a held read");
                let how = input.next();
                if how % 16 == 15 {
                    let b0 = req.first_block();
                    failed.extend(b0..b0 + req.nblocks() as u64);
                    let rest = req.complete(Err(std::io::Error::other("fuzzed EIO")));
                    assert!(rest.is_none());
                    continue;
                }
                let bytes = file.bytes();
                let off = (req.offset() as usize).min(bytes.len());
                let end = (off + req.len_bytes()).min(bytes.len());
                let mut n = end - off;
                if how % 16 >= 12 && n > 1 {
                    n = 1 + usize::from(how >> 4) % (n - 1);
                }
                let copied = req.copy_from(&bytes[off..off + n]);
                if let Some(rest) = req.complete(Ok(copied)) {
                    q.start_read(&file, rest);
                }
            }
        }
    }
    drop(stream);
    q.cancel_all();
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "left behind: {ps}");
});
