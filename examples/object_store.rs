//! The pages of an object in S3 or on an HTTP server, streamed into a pool.
//!
//! The object-store engine reads an object with large range GETs (4 MiB by
//! default, many in flight), hedges the ones slow to answer and retries
//! failures; a stream over it looks ahead as over a local file. It runs on
//! tokio: build it inside the runtime, whose tasks do the GETs.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example object_store -- s3://bucket/key
//! cargo run --release -p pagestream-examples --example object_store -- http://127.0.0.1:8080/t.dat
//! ```
//!
//! An `s3://` URL takes its endpoint, region and credentials from
//! `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION` (and `AWS_ALLOW_HTTP=true` for a plain-HTTP endpoint).
//! Prints the pages, the sum of their bytes and the MiB/s; a trailing
//! partial block is not read.

use futures::StreamExt;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_object_store::ObjectStoreEngine;
use std::process::ExitCode;
use std::time::Instant;

const BLOCK_SIZE: usize = 8192;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: object_store URL (s3://bucket/key or http(s)://host/path)");
        return ExitCode::from(2);
    };
    match scan(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("object_store: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn scan(url: &str) -> std::io::Result<()> {
    let engine = ObjectStoreEngine::new()?; // on this tokio runtime
    let file = engine.open_url(url).await?; // a HEAD: length and version
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;
    let pool = BufferPool::new(8192, BLOCK_SIZE)?; // 64 MiB
    let mut pages =
        ReadStream::builder(&pool, engine.clone(), file).build(source::forward(0..nblocks))?;

    let start = Instant::now();
    let (mut count, mut sum) = (0u64, 0u64);
    while let Some(page) = pages.next().await {
        let page = page?;
        count += 1;
        sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
    }
    let seconds = start.elapsed().as_secs_f64();
    let stats = pages.close().await;

    let mib = (count * BLOCK_SIZE as u64) as f64 / f64::from(1 << 20);
    println!("pages={count} sum={sum} MiB/s={:.1}", mib / seconds);
    let gets = engine.stats();
    println!(
        "GETs: gets={} blocks/get={:.1} hedged={}",
        gets.gets,
        stats.mean_blocks_per_read(),
        gets.hedged
    );
    Ok(())
}
