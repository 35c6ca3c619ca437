//! A forward scan on the io_uring engine, consumed by a tokio application.
//!
//! `pagestream-uring` runs its own io_uring driver: `UringRuntime::block_on`
//! is a one-future executor that waits for completions inside
//! `io_uring_enter`, so it must own its thread and cannot run inside a tokio
//! worker. The pattern: give the scan a dedicated thread, and send what it
//! reads to tokio through a bounded `tokio::sync::mpsc` channel.
//!
//! What crosses the channel is the page itself. A `PageGuard` is `Send` and
//! `'static`: it pins its frame in the pool, so the bytes stay valid and
//! unwritten on whichever thread holds the guard, and dropping it there
//! unpins the frame. Nothing is copied. Each guard in the channel holds a
//! frame, so the channel's capacity bounds the pages the application can
//! hold back; the pool needs room for those and the stream's look-ahead.
//! When the application stops receiving, `send` fails and the reader stops.
//!
//! Prints the pages, the sum of all the file's bytes and the stream's
//! statistics. Needs io_uring (not disabled by `kernel.io_uring_disabled`
//! or a seccomp filter; `pagestream_uring::probe` says which).
//!
//! ```text
//! cargo run --release -p pagestream-examples --example uring_from_tokio -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long.

use futures::StreamExt;
use pagestream::{source, BufferPool, EngineFile, PageGuard, ReadStream, StreamStats};
use pagestream_uring::{UringFile, UringRuntime};
use std::io;
use tokio::sync::mpsc;

const BLOCK_SIZE: usize = 8192;
/// Pages on their way to the application at most.
const IN_CHANNEL: usize = 64;

/// The reader thread: scans `path` on its own io_uring runtime and sends
/// each page (or the error in its place) down `tx`.
fn read_pages(path: &str, tx: mpsc::Sender<io::Result<PageGuard>>) -> io::Result<StreamStats> {
    let rt = UringRuntime::new()?;
    let file = UringFile::open(path)?;
    let nblocks = file.byte_len()? / BLOCK_SIZE as u64;
    let pool = BufferPool::new(1024, BLOCK_SIZE)?;
    let mut pages =
        ReadStream::builder(&pool, rt.engine(), file).build(source::forward(0..nblocks))?;
    rt.block_on(async {
        while let Some(page) = pages.next().await {
            // Waits while the channel is full: the stream's look-ahead stops
            // when the application falls behind.
            if tx.send(page).await.is_err() {
                break; // the application stopped listening
            }
        }
    });
    Ok(pages.stats())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: uring_from_tokio PATH");
        std::process::exit(2);
    };

    let (tx, mut rx) = mpsc::channel(IN_CHANNEL);
    let reader = std::thread::spawn(move || read_pages(&path, tx));

    // Any tokio task can consume the pages; here, main's.
    let (mut count, mut sum) = (0u64, 0u64);
    while let Some(page) = rx.recv().await {
        let page = page?;
        count += 1;
        sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
    } // the channel closes when the reader is done (or has failed)

    // Join the reader off tokio's worker threads.
    let stats = tokio::task::spawn_blocking(move || reader.join())
        .await?
        .expect("reader thread panicked")?;
    println!("pages={count} sum={sum}");
    println!("{stats}");
    Ok(())
}
