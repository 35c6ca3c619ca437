//! A forward scan on io_uring from a tokio application.
//!
//! `UringTokioEngine` (`pagestream-uring`, feature `tokio`) drives
//! pagestream's io_uring from any tokio runtime: a stream submits its reads
//! as it starts them, and their completions are taken by the stream itself
//! or by a reaper task woken through tokio's reactor. The engine and its
//! streams are `Send`, so the scan runs as an ordinary spawned task; spawned
//! (rather than awaited in `main` itself) it is woken on the worker that took
//! its completion, with no other thread in between.
//!
//! Where io_uring is unavailable (`kernel.io_uring_disabled`, a seccomp
//! filter, an old kernel), `UringTokioEngine::new` fails with an error
//! naming the cause; a program that must run anyway falls back to
//! `pagestream-threadpool` (`docs/engines.md` shows how).
//!
//! Prints the pages, the sum of all the file's bytes and the stream's
//! statistics.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example uring_from_tokio -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long.

use futures::StreamExt;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_uring::{UringFile, UringTokioEngine};

const BLOCK_SIZE: usize = 8192;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: uring_from_tokio PATH");
        std::process::exit(2);
    };

    let engine = UringTokioEngine::new()?; // reaped on this runtime
    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let file = UringFile::open(&path)?; // buffered; open_direct for O_DIRECT
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;

    let scan = tokio::spawn(async move {
        let mut pages =
            ReadStream::builder(&pool, engine, file).build(source::forward(0..nblocks))?;
        let (mut count, mut sum) = (0u64, 0u64);
        while let Some(page) = pages.next().await {
            let page = page?;
            count += 1;
            sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        Ok::<_, std::io::Error>((count, sum, pages.close().await))
    });

    let (count, sum, stats) = scan.await??;
    println!("pages={count} sum={sum}");
    println!("{stats}");
    Ok(())
}
