//! One workload on any runtime.
//!
//! `pagestream-runtimes` starts each of pagestream's runtimes with its
//! engine — the thread pool under a plain executor, tokio-uring, glommio,
//! pagestream-uring's own io_uring driver, and that driver from a tokio
//! runtime — on a fresh thread. A
//! `Workload` is written once against the `Env` trait (the runtime's engine
//! and a way to open files for it) and runs on each of them.
//!
//! Files are opened with `O_DIRECT`, which every runtime supports (glommio
//! reads with nothing else), so each run reads the device, not the OS page
//! cache. A runtime that cannot start here (io_uring disabled, too little
//! `RLIMIT_MEMLOCK` for glommio) is reported and skipped.
//!
//! Prints, per runtime, the pages and the sum of all the file's bytes: the
//! same on every runtime.
//!
//! ```text
//! cargo run --release -p pagestream-examples --example any_runtime -- PATH
//! ```
//!
//! PATH must be a whole number of 8 KiB blocks long, on a file system that
//! supports `O_DIRECT` (not tmpfs).

use futures::StreamExt;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_runtimes::{Env, FileOptions, Runtime, Workload};
use std::path::PathBuf;
use std::process::ExitCode;

const BLOCK_SIZE: usize = 8192;

/// Reads every block of a file; returns (pages, sum of bytes).
struct SumFile(PathBuf);

impl Workload for SumFile {
    type Output = std::io::Result<(u64, u64)>;

    async fn run<E: Env>(self, env: E) -> Self::Output {
        let file = env.open(&self.0, FileOptions::direct(BLOCK_SIZE)).await?;
        let nblocks = file.byte_len()? / BLOCK_SIZE as u64;
        // Made here, on the runtime's thread (glommio wants a pool per executor).
        let pool = BufferPool::new(1024, BLOCK_SIZE)?;
        let mut pages =
            ReadStream::builder(&pool, env.engine(), file).build(source::forward(0..nblocks))?;
        let (mut count, mut sum) = (0u64, 0u64);
        while let Some(page) = pages.next().await {
            let page = page?;
            count += 1;
            sum += page.iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        Ok((count, sum))
    }
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: any_runtime PATH");
        return ExitCode::from(2);
    };

    let mut failed = false;
    for rt in Runtime::ALL {
        match rt.run(SumFile(PathBuf::from(&path))) {
            Ok(Ok((pages, sum))) => println!("{rt}: pages={pages} sum={sum}"),
            Ok(Err(e)) => {
                eprintln!("{rt}: {e}");
                failed = true;
            }
            Err(e) => println!("{rt}: skipped: {e}"),
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
