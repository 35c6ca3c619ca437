//! Forward scan under tokio, on the thread-pool engine.
//!
//! Reads every 8 KiB block of a file in order through a [`ReadStream`]:
//! the stream looks ahead, combines neighbouring blocks into reads of up to
//! 16 blocks and keeps up to 16 reads in flight on the engine's I/O threads,
//! while the task consumes pinned pages in block order. Prints the number
//! of pages, the sum of all the file's bytes (check it with any other tool)
//! and the stream's statistics.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example forward_scan -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long.

use futures::StreamExt;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};

const BLOCK_SIZE: usize = 8192;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: forward_scan PATH");
        std::process::exit(2);
    };

    // One pool of 1024 frames (8 MiB) and one engine serve every stream of
    // the process; both are cheap to clone and shared by their clones.
    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let engine = ThreadPoolEngine::new();
    let file = ThreadPoolFile::open(&path)?;
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;

    let mut pages = ReadStream::builder(&pool, engine, file)
        .max_ios(16)
        .io_combine_limit(16)
        .build(source::forward(0..nblocks))?;

    // The stream is `Send`: it can be moved into a spawned task like any
    // other tokio stream.
    let scan = tokio::spawn(async move {
        let (mut count, mut sum) = (0u64, 0u64);
        while let Some(page) = pages.next().await {
            // A `PageGuard`: the block's bytes, pinned until it is dropped.
            let page = page?;
            count += 1;
            sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        Ok::<_, std::io::Error>((count, sum, pages.stats()))
    });
    let (count, sum, stats) = scan.await??;

    println!("pages={count} sum={sum}");
    println!("{stats}");
    Ok(())
}
