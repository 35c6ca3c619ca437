//! Bitmap heap scan: some blocks, each with data of its own.
//!
//! A bitmap index scan knows which blocks hold matching rows and, within
//! each block, which rows match. `source::with_data` streams those blocks
//! (ascending, with gaps: the stream combines the runs and skips the gaps)
//! and carries each block's data — here, the byte offsets of its matching
//! 8-byte records — to the page's guard, so the consumer finds it on
//! `page.data()` beside the bytes. The source is a lazy iterator: the
//! stream asks it only as far ahead as it looks ahead.
//!
//! The "bitmap" here is made up: blocks whose number is a multiple of 3 or
//! of 7, with `1 + block % 4` records at offsets 0, 2048, 4096, 6144.
//! Prints the pages visited, the records read and the wrapping sum of the
//! records read as little-endian `u64`s.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example bitmap_scan -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long.

use futures::StreamExt;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};

const BLOCK_SIZE: usize = 8192;
const RECORD: usize = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: bitmap_scan PATH");
        std::process::exit(2);
    };

    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let file = ThreadPoolFile::open(&path)?;
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;

    // (block, offsets of its matching records), ascending by block.
    let matches = (0..nblocks).filter(|b| b % 3 == 0 || b % 7 == 0).map(|b| {
        let offsets: Vec<usize> = (0..1 + b as usize % 4).map(|i| i * 2048).collect();
        (b, offsets)
    });
    let mut pages = ReadStream::builder(&pool, ThreadPoolEngine::new(), file)
        .build(source::with_data(matches))?;

    let (mut visited, mut records, mut sum) = (0u64, 0u64, 0u64);
    while let Some(page) = pages.next().await {
        let page = page?;
        visited += 1;
        for &offset in page.data() {
            let bytes = &page[offset..offset + RECORD];
            let value = u64::from_le_bytes(bytes.try_into()?);
            sum = sum.wrapping_add(value);
            records += 1;
        }
    }

    println!("pages={visited} records={records} sum={sum}");
    println!("{}", pages.stats());
    Ok(())
}
