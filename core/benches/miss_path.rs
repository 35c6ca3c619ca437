//! Miss-path micro-benchmark: the stream's own cost per page when every page
//! must be read, with an engine that completes every read at once without
//! touching memory (so only pagestream's machinery is measured: lookups,
//! ring claims, requests, completions, the planner).
//!
//! Run: `cargo bench -p pagestream --features testing --bench miss_path`

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::{
    source, BufferPool, EngineFile, FileId, IoEngine, ReadRequest, ReadStream, RingSize,
};
use std::hint::black_box;
use std::io;
use std::time::Instant;

#[derive(Clone, Debug)]
struct Null;

#[derive(Clone, Debug)]
struct NullFile(FileId, u64);

impl EngineFile for NullFile {
    fn id(&self) -> FileId {
        self.0
    }
    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.1)
    }
}

impl IoEngine for Null {
    type File = NullFile;
    fn start_read(&self, _file: &NullFile, mut req: ReadRequest) {
        req.set_served_from_cache(true);
        let n = req.len_bytes();
        let rest = req.complete(Ok(n));
        debug_assert!(rest.is_none());
    }
    fn name(&self) -> &'static str {
        "null"
    }
}

fn main() {
    let n: u64 = 1 << 18;
    let bs = 8192;
    let file = NullFile(FileId::new(1), n * bs as u64);
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    let configs = [
        (16usize, Some(RingSize::BULKREAD)),
        (32, Some(RingSize::BULKREAD)),
        (16, None),
    ];
    for _ in 0..7 {
        for (i, (combine, ring)) in configs.iter().enumerate() {
            let pool = BufferPool::new(16384, bs).unwrap();
            let mut s = ReadStream::builder(&pool, Null, file.clone())
                .io_combine_limit(*combine)
                .ring(*ring)
                .build(source::forward(0..n))
                .unwrap();
            let t = Instant::now();
            block_on(async {
                while let Some(p) = s.next().await {
                    black_box(p.unwrap().block());
                }
            });
            let ns = t.elapsed().as_secs_f64() * 1e9 / n as f64;
            if rows.len() <= i {
                rows.push((format!("combine {combine}, ring {ring:?}"), Vec::new()));
            }
            rows[i].1.push(ns);
        }
    }
    println!("miss path, {n} pages, 7 interleaved runs: ns per page, median (min-max)");
    for (name, mut v) in rows {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("  {name:<50} {:>6.1} ({:.1}-{:.1})", v[3], v[0], v[6]);
    }
}
