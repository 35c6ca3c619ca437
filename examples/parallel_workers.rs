//! Parallel workers: one file scanned by several streams at once.
//!
//! A `ParallelScan` is a shared block allocator (PostgreSQL's parallel
//! sequential scan): each worker's source takes the next chunk of blocks
//! from it, so every block goes to exactly one worker and each worker
//! still reads runs it can combine into large reads. Chunks shrink near the
//! end so the workers finish together. Here each worker is a tokio task
//! with its own stream; all share one pool and one engine.
//!
//! Prints each worker's pages and the totals: every block once, and the sum
//! of all the file's bytes, whatever the split.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example parallel_workers -- PATH [WORKERS]
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long; WORKERS defaults to 4.

use futures::StreamExt;
use pagestream::{source::ParallelScan, BufferPool, EngineFile, ReadStream};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};

const BLOCK_SIZE: usize = 8192;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: parallel_workers PATH [WORKERS]");
        std::process::exit(2);
    };
    let workers: usize = args.next().map_or(Ok(4), |w| w.parse())?;

    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let engine = ThreadPoolEngine::new();
    let file = ThreadPoolFile::open(&path)?;
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;
    let scan = ParallelScan::new(nblocks);
    println!(
        "blocks={nblocks} chunk={} workers={workers}",
        scan.chunk_size()
    );

    let mut tasks = Vec::new();
    for _ in 0..workers {
        let mut pages =
            ReadStream::builder(&pool, engine.clone(), file.clone()).build(scan.worker())?;
        tasks.push(tokio::spawn(async move {
            let (mut count, mut sum) = (0u64, 0u64);
            while let Some(page) = pages.next().await {
                let page = page?;
                count += 1;
                sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
            }
            Ok::<_, std::io::Error>((count, sum, pages.stats().reads))
        }));
    }

    let (mut total, mut total_sum) = (0u64, 0u64);
    for (i, task) in tasks.into_iter().enumerate() {
        let (count, sum, reads) = task.await??;
        println!("worker {i}: pages={count} reads={reads}");
        total += count;
        total_sum += sum;
    }
    println!("total: pages={total} sum={total_sum}");
    Ok(())
}
