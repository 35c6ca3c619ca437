//! Micro-benchmarks of pagestream's pool and stream, with divan:
//!
//! - `hot_path`: a scan whose every page is in the pool, per page, against
//!   iterating the same pages in a `Vec` (32768 pages of 8 KiB; the consumer
//!   reads each page's first bytes, as `core/benches/hit_path.rs` does);
//! - `pin_unpin`: one page handed out and dropped 32768 times (lookup, pin,
//!   guard, unpin of one hot frame);
//! - `lookup_two_threads`: the hot scan on 1 and 2 threads at once, on the
//!   same file (shared frames) and on two files;
//! - `eviction`: scans through a 256-frame pool of files 16 times larger,
//!   so every page is a miss that evicts (the in-memory engine completes
//!   reads at once), on 1 and 2 threads (an exhausted pool is retried, as
//!   the stream's contract says).
//!
//! Run: `cargo bench -p pagestream-bench --bench micro`. divan prints the
//! time of one scan and, from the item counter, pages per second; ns per
//! page = scan time / 32768.

use divan::counter::ItemsCount;
use divan::Bencher;
use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::{MemEngine, MemFile};
use pagestream::{source, BlockSource, BufferPool, ReadStream};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

const BS: usize = 8192;
const PAGES: u64 = 32768;
const SMALL_POOL: usize = 256;
const EVICT_PAGES: u64 = 16 * SMALL_POOL as u64;

fn main() {
    divan::main();
}

/// What a scan touches first: the page header.
#[inline]
fn consume(page: &[u8]) -> u64 {
    u64::from_le_bytes(page[..8].try_into().expect("8 bytes")) ^ u64::from(page[24])
}

/// File 0 or 1, alternating call by call. divan starts every sample on all
/// threads together and each takes one call per sample here, so the two
/// threads of a 2-thread sample get different files.
fn next_file() -> usize {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    CALLS.fetch_add(1, Ordering::Relaxed) % 2
}

struct Hot {
    engine: MemEngine,
    files: [MemFile; 2],
    pool: BufferPool,
    pages: Vec<Vec<u8>>,
}

/// Two stamped files of `PAGES` pages, both in one pool (filled).
fn hot() -> &'static Hot {
    static HOT: OnceLock<Hot> = OnceLock::new();
    HOT.get_or_init(|| {
        let engine = MemEngine::new();
        let files = [
            engine.create_stamped(PAGES, BS),
            engine.create_stamped(PAGES, BS),
        ];
        let pool = BufferPool::new(2 * PAGES as usize, BS).expect("pool");
        for f in &files {
            let n = scan(&pool, &engine, f, source::forward(0..PAGES));
            assert_eq!(n.1, PAGES);
        }
        let pages = files[0].bytes().chunks(BS).map(|c| c.to_vec()).collect();
        Hot {
            engine,
            files,
            pool,
            pages,
        }
    })
}

/// Scans `src` over `file` with the default stream settings; returns (sum
/// of `consume`, pages, blocks read).
fn scan<S: BlockSource>(
    pool: &BufferPool,
    engine: &MemEngine,
    file: &MemFile,
    src: S,
) -> (u64, u64, u64) {
    scan_with(pool, engine, file, src, 16, 16)
}

/// [`scan`] with `max_ios` and `io_combine_limit`. An exhausted pool (every
/// frame pinned by the streams sharing it, for a moment) is what the
/// stream's contract says: the block stays queued, try again.
fn scan_with<S: BlockSource>(
    pool: &BufferPool,
    engine: &MemEngine,
    file: &MemFile,
    src: S,
    max_ios: usize,
    combine: usize,
) -> (u64, u64, u64) {
    let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
        .max_ios(max_ios)
        .io_combine_limit(combine)
        .build(src)
        .expect("stream");
    let mut sum = 0u64;
    let mut n = 0u64;
    block_on(async {
        while let Some(p) = s.next().await {
            let p = match p {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                    std::thread::yield_now();
                    continue;
                }
                Err(e) => panic!("page: {e}"),
            };
            sum = sum.wrapping_add(consume(&p));
            n += 1;
        }
    });
    (sum, n, s.stats().blocks_read)
}

mod hot_path {
    use super::*;

    /// Iterating the same pages in a `Vec<Vec<u8>>`.
    #[divan::bench]
    fn vec_iteration(b: Bencher<'_, '_>) {
        let h = hot();
        b.counter(ItemsCount::new(PAGES)).bench(|| {
            let mut sum = 0u64;
            for p in &h.pages {
                sum = sum.wrapping_add(consume(black_box(p)));
            }
            sum
        });
    }

    /// A stream over pages all in the pool.
    #[divan::bench]
    fn stream_hot_scan(b: Bencher<'_, '_>) {
        let h = hot();
        b.counter(ItemsCount::new(PAGES)).bench(|| {
            let r = scan(&h.pool, &h.engine, &h.files[0], source::forward(0..PAGES));
            assert_eq!(r.2, 0, "not a hot scan");
            r.0
        });
    }
}

/// The same hot page handed out and dropped `PAGES` times.
#[divan::bench]
fn pin_unpin(b: Bencher<'_, '_>) {
    let h = hot();
    b.counter(ItemsCount::new(PAGES)).bench(|| {
        let src = source::iter(std::iter::repeat_n(7u64, PAGES as usize));
        scan(&h.pool, &h.engine, &h.files[0], src).0
    });
}

mod lookup_two_threads {
    use super::*;

    /// Every thread scans file 0: the threads pin the same frames.
    #[divan::bench(threads = [1, 2])]
    fn same_file(b: Bencher<'_, '_>) {
        let h = hot();
        b.counter(ItemsCount::new(PAGES))
            .bench(|| scan(&h.pool, &h.engine, &h.files[0], source::forward(0..PAGES)).0);
    }

    /// The two threads scan different files: no frame shared.
    #[divan::bench(threads = [1, 2])]
    fn two_files(b: Bencher<'_, '_>) {
        let h = hot();
        b.counter(ItemsCount::new(PAGES)).bench(|| {
            let f = &h.files[next_file()];
            scan(&h.pool, &h.engine, f, source::forward(0..PAGES)).0
        });
    }
}

struct Evict {
    engine: MemEngine,
    files: [MemFile; 2],
    pool: BufferPool,
}

fn evict_setup() -> &'static Evict {
    static E: OnceLock<Evict> = OnceLock::new();
    E.get_or_init(|| {
        let engine = MemEngine::new();
        let files = [
            engine.create_stamped(EVICT_PAGES, BS),
            engine.create_stamped(EVICT_PAGES, BS),
        ];
        let pool = BufferPool::new(SMALL_POOL, BS).expect("pool");
        Evict {
            engine,
            files,
            pool,
        }
    })
}

/// Every page a miss that evicts another: a 256-frame pool, files of 4096
/// pages, each thread its own file, 1 or 2 threads; `max_ios` 4,
/// `io_combine_limit` 8 (a pin budget of 40 frames per stream, so the two
/// streams contend for the clock sweep, not for the last free frame).
#[divan::bench(threads = [1, 2])]
fn eviction(b: Bencher<'_, '_>) {
    let e = evict_setup();
    b.counter(ItemsCount::new(EVICT_PAGES)).bench(|| {
        let f = &e.files[next_file()];
        let r = scan_with(&e.pool, &e.engine, f, source::forward(0..EVICT_PAGES), 4, 8);
        assert_eq!(r.1, EVICT_PAGES, "pages missing");
        r.0
    });
}
