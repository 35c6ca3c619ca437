//! What the glommio engine's copy costs: an O_DIRECT forward scan of a
//! temporary file through `GlommioEngine`, reporting the scan's throughput,
//! the copy's throughput, and the share of the scan's wall time spent
//! copying.
//!
//! ```text
//! cargo run --release -p pagestream-glommio --example copy_cost [MiB] [io_combine_limit]
//! ```

use futures::StreamExt;
use pagestream::{source, BufferPool, ReadStream};
use pagestream_glommio::{make_executor, GlommioEngine, GlommioFile};
use std::io::Write;
use std::time::Instant;

const BS: usize = 8192;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    let combine: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(16);
    let nblocks = mib * (1 << 20) / BS as u64;
    let path =
        std::env::temp_dir().join(format!("pagestream-copy-cost-{}.dat", std::process::id()));
    {
        let mut f = std::fs::File::create(&path)?;
        let chunk: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 + 1) as u8).collect();
        for _ in 0..mib {
            f.write_all(&chunk)?;
        }
        f.sync_all()?;
    }
    let ex = make_executor()?;
    let result = ex.run(async {
        let file = GlommioFile::open(&path, BS).await?;
        let pool = BufferPool::new(4096, BS)?;
        let engine = GlommioEngine::new();
        let t = Instant::now();
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(16)
            .io_combine_limit(combine)
            .build(source::forward(0..nblocks))?;
        let mut sum = 0u64;
        while let Some(page) = s.next().await {
            sum = sum.wrapping_add(u64::from(page?[100]));
        }
        let st = s.close().await;
        let wall = t.elapsed();
        file.close().await?;
        Ok::<_, std::io::Error>((engine.stats(), st, wall, sum))
    });
    std::fs::remove_file(&path)?;
    let (es, st, wall, _) = result?;
    let gib = |bytes: u64, secs: f64| bytes as f64 / secs / f64::from(1u32 << 30);
    println!(
        "scan: {} MiB O_DIRECT, {} reads ({:.1} blocks/read), {:.3} s, {:.2} GiB/s",
        mib,
        st.reads,
        st.mean_blocks_per_read(),
        wall.as_secs_f64(),
        gib(es.bytes_read, wall.as_secs_f64())
    );
    println!(
        "copy: {} MiB in {:.1} ms, {:.2} GiB/s, {:.1}% of the scan's wall time",
        es.bytes_copied >> 20,
        es.copy_time.as_secs_f64() * 1e3,
        es.copy_gib_per_s().unwrap_or(0.0),
        100.0 * es.copy_time.as_secs_f64() / wall.as_secs_f64()
    );
    Ok(())
}
