//! PostgreSQL segment files as one stream.
//!
//! PostgreSQL stores a relation as 1 GiB segment files: `16384`, `16384.1`,
//! `16384.2`, … . `segment_paths` finds them, `SegmentedFile` makes them one
//! file of logical block numbers, and the `Segmented` engine wrapper sends
//! each read to the piece holding it. Look-ahead runs across a segment
//! boundary without a pause; no read spans two pieces. Every piece but the
//! last must be exactly one segment long, or building the stream fails
//! naming the piece.
//!
//! Prints the segments, the pages, the sum of all the bytes and the reads.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example segment_files -- PATH [SEGMENT_BYTES]
//! ```
//!
//! PATH is the first segment (for example `$PGDATA/base/5/16384`; find a
//! table's with `SELECT pg_relation_filepath('t')`). SEGMENT_BYTES defaults
//! to PostgreSQL's 1 GiB; smaller values serve files split by hand, e.g.
//! `split -b 1M -d` renamed to `t`, `t.1`, `t.2`, … .

use futures::StreamExt;
use pagestream::segmented::{segment_paths, Segmented, SegmentedFile, PG_SEGMENT_BYTES};
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};

const BLOCK_SIZE: usize = 8192;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(first) = args.next() else {
        eprintln!("usage: segment_files PATH [SEGMENT_BYTES]");
        std::process::exit(2);
    };
    let segment_bytes: u64 = args.next().map_or(Ok(PG_SEGMENT_BYTES), |s| s.parse())?;

    let pieces = segment_paths(first.as_ref())?
        .iter()
        .map(ThreadPoolFile::open)
        .collect::<std::io::Result<Vec<_>>>()?;
    let segments = pieces.len();
    let file = SegmentedFile::new(pieces, segment_bytes)?;
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;

    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let engine = Segmented::new(ThreadPoolEngine::new());
    let mut pages = ReadStream::builder(&pool, engine, file).build(source::forward(0..nblocks))?;

    let (mut count, mut sum) = (0u64, 0u64);
    while let Some(page) = pages.next().await {
        let page = page?;
        count += 1;
        sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
    }

    let stats = pages.stats();
    println!(
        "segments={segments} pages={count} sum={sum} reads={}",
        stats.reads
    );
    Ok(())
}
