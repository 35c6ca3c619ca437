//! Synchronized scans: a second scan of a file joins one already running.
//!
//! `SyncScans` remembers where running scans of each file have reached
//! (PostgreSQL's `synchronize_seqscans`). A scan that starts later begins
//! there instead of at block 0, reads along with the first scan — finding
//! its pages in the shared pool, or waiting for the first scan's reads
//! rather than issuing its own — and wraps around to read the blocks it
//! skipped. Each scan still sees every block exactly once.
//!
//! The consumer reports the blocks it has processed (`reports_itself(false)`
//! and `SyncScans::report`), so a new scan starts inside the running scan's
//! look-ahead rather than ahead of it; see `SyncScans::report` for why.
//!
//! Prints, for each scan, where it started, its pages, the sum of its bytes
//! (the same for both) and how many of its pages it read itself.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example synchronized_scans -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long.

use futures::StreamExt;
use pagestream::source::{SyncScans, SYNC_SCAN_REPORT_INTERVAL};
use pagestream::{BufferPool, EngineFile, ReadStream};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};
use tokio::sync::oneshot;

const BLOCK_SIZE: usize = 8192;

/// What one scan saw.
struct Scanned {
    /// The block it started at.
    start: u64,
    pages: u64,
    sum: u64,
    /// Pages it read itself (the rest it found in the pool or waited for).
    read: u64,
}

/// Scans the whole file from where `scans` says, telling `halfway` when it
/// has processed half of it.
async fn scan(
    pool: BufferPool,
    engine: ThreadPoolEngine,
    file: ThreadPoolFile,
    scans: SyncScans,
    mut halfway: Option<oneshot::Sender<()>>,
) -> std::io::Result<Scanned> {
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;
    let id = file.id();
    let source = scans.scan(id, nblocks).reports_itself(false);
    let start = source.start();
    let mut pages = ReadStream::builder(&pool, engine, file).build(source)?;
    let (mut count, mut sum) = (0u64, 0u64);
    while let Some(page) = pages.next().await {
        let page = page?;
        count += 1;
        sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
        // Done with this page: a scan starting now may start here.
        if page.block() % SYNC_SCAN_REPORT_INTERVAL == 0 {
            scans.report(id, page.block());
        }
        if count >= nblocks / 2 {
            if let Some(tx) = halfway.take() {
                let _ = tx.send(());
            }
        }
    }
    let read = pages.stats().blocks_read;
    Ok(Scanned {
        start,
        pages: count,
        sum,
        read,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: synchronized_scans PATH");
        std::process::exit(2);
    };

    // The scans share the pool: that is where one finds the other's pages.
    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let engine = ThreadPoolEngine::new();
    let file = ThreadPoolFile::open(&path)?;
    let scans = SyncScans::new();

    let (tx, halfway) = oneshot::channel();
    let first = scan(
        pool.clone(),
        engine.clone(),
        file.clone(),
        scans.clone(),
        Some(tx),
    );
    let first = tokio::spawn(first);
    // Start the second scan once the first is half way through (or done).
    let _ = halfway.await;
    let second = tokio::spawn(scan(pool, engine, file, scans, None));

    for (name, task) in [("first", first), ("second", second)] {
        let s = task.await??;
        println!(
            "{name}: start={} pages={} sum={} read={}",
            s.start, s.pages, s.sum, s.read
        );
    }
    Ok(())
}
