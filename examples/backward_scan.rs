//! Backward scan: every block of a file, last block first.
//!
//! `source::backward` names the blocks in descending order (an
//! `ORDER BY … DESC` index-less scan, or reading a log from its newest
//! page). The stream still reads large runs: it combines a descending run
//! into one ascending read and hands the pages out in descending order. The
//! statistics' `backward=` count says how many reads were combined that way.
//!
//! This example runs the stream with `futures::executor::block_on` rather
//! than tokio: a stream on the thread-pool engine needs no particular
//! runtime.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example backward_scan -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long.

use futures::{executor::block_on, StreamExt};
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};

const BLOCK_SIZE: usize = 8192;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: backward_scan PATH");
        std::process::exit(2);
    };

    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let file = ThreadPoolFile::open(&path)?;
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;
    let mut pages = ReadStream::builder(&pool, ThreadPoolEngine::new(), file)
        .build(source::backward(0..nblocks))?;

    let (mut count, mut sum) = (0u64, 0u64);
    let (mut first, mut last) = (None, None);
    block_on(async {
        while let Some(page) = pages.next().await {
            let page = page?;
            // Blocks arrive strictly descending: nblocks - 1, …, 1, 0.
            if let Some(prev) = last {
                assert_eq!(page.block() + 1, prev, "out of order");
            }
            first.get_or_insert(page.block());
            last = Some(page.block());
            count += 1;
            sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        Ok::<_, std::io::Error>(())
    })?;

    let show = |b: Option<u64>| b.map_or("-".to_string(), |b| b.to_string());
    println!(
        "pages={count} sum={sum} first={} last={}",
        show(first),
        show(last)
    );
    println!("{}", pages.stats());
    Ok(())
}
