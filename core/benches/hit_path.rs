//! Hit-path micro-benchmark: a fully cached scan through a stream, per page,
//! against iterating the same pages in a plain `Vec`, on one thread and on
//! two threads sharing one pool.
//!
//! If the hit path (map lookup + pin + guard + unpin) took a pool-wide lock,
//! two threads would slow each other down; the per-page cost with two
//! threads shows whether they do.
//!
//! Run: `cargo bench -p pagestream --features testing --bench hit_path`
//! (`-- --pages N --repeat R` to change the size). `-- --profile` runs one
//! hot scan through a stream and nothing else, for an instruction count
//! that does not depend on the machine's noise:
//! `valgrind --tool=callgrind target/release/deps/hit_path-* --profile`,
//! then `callgrind_annotate` (the stream's functions per page: divide by
//! `--pages`).

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::{MemEngine, MemFile};
use pagestream::{source, BufferPool, ReadStream, YieldBudget};
use std::hint::black_box;
use std::time::Instant;

const BS: usize = 8192;

fn consume(page: &[u8]) -> u64 {
    // What a scan touches first: the page header.
    u64::from_le_bytes(page[..8].try_into().unwrap()) ^ u64::from(page[24])
}

fn vec_scan(pages: &[Vec<u8>]) -> (f64, u64) {
    let t = Instant::now();
    let mut sum = 0u64;
    for p in pages {
        sum = sum.wrapping_add(consume(black_box(p)));
    }
    (t.elapsed().as_secs_f64(), sum)
}

fn stream_scan(
    pool: &BufferPool,
    engine: &MemEngine,
    file: &MemFile,
    n: u64,
    fast_path: bool,
    prefetch: bool,
    budget: YieldBudget,
) -> (f64, u64) {
    let t = Instant::now();
    let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
        .fast_path(fast_path)
        .prefetch(prefetch)
        .yield_budget(budget)
        .build(source::forward(0..n))
        .unwrap();
    let mut sum = 0u64;
    block_on(async {
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            sum = sum.wrapping_add(consume(&p));
        }
    });
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(s.stats().blocks_read, 0, "not a hot scan");
    (secs, sum)
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let mut n: u64 = 32768;
    let mut repeat = 7;
    let mut profile = false;
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--pages" => {
                n = args[i + 1].parse().expect("--pages N");
                i += 1;
            }
            "--repeat" => {
                repeat = args[i + 1].parse().expect("--repeat N");
                i += 1;
            }
            "--profile" => profile = true,
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    let engine = MemEngine::new();
    let fa = engine.create_stamped(n, BS);
    let fb = engine.create_stamped(n, BS);
    let pool = BufferPool::new(2 * n as usize, BS).unwrap();
    if profile {
        stream_scan_cold(&pool, &engine, &fa, n);
        let auto = YieldBudget::DEFAULT;
        let (t, _) = stream_scan(&pool, &engine, &fa, n, true, true, auto);
        println!(
            "one hot scan of {n} pages: {:.1} ns per page",
            t * 1e9 / n as f64
        );
        return;
    }
    let pages: Vec<Vec<u8>> = fa.bytes().chunks(BS).map(|c| c.to_vec()).collect();
    // Prewarm both files.
    stream_scan_cold(&pool, &engine, &fa, n);
    stream_scan_cold(&pool, &engine, &fb, n);

    let mut rows: Vec<(&str, Vec<f64>)> = vec![
        ("Vec<page> iteration, 1 thread", vec![]),
        ("stream hot scan, 1 thread", vec![]),
        ("stream hot scan, no fast path", vec![]),
        ("stream hot scan, prefetch off", vec![]),
        ("stream hot scan, 2 threads, same file", vec![]),
        ("stream hot scan, 2 threads, two files", vec![]),
        ("stream hot scan, no yield budget", vec![]),
    ];
    let auto = YieldBudget::DEFAULT;
    for _ in 0..repeat {
        // Interleave the configurations run by run.
        let (t, s1) = vec_scan(&pages);
        rows[0].1.push(t);
        let (t, s2) = stream_scan(&pool, &engine, &fa, n, true, true, auto);
        assert_eq!(s1, s2, "checksums differ");
        rows[1].1.push(t);
        rows[2]
            .1
            .push(stream_scan(&pool, &engine, &fa, n, false, true, auto).0);
        rows[3]
            .1
            .push(stream_scan(&pool, &engine, &fa, n, true, false, auto).0);
        rows[6]
            .1
            .push(stream_scan(&pool, &engine, &fa, n, true, true, YieldBudget::Unlimited).0);
        for (k, files) in [(4, [&fa, &fa]), (5, [&fa, &fb])] {
            let t = std::thread::scope(|sc| {
                let hs: Vec<_> = files
                    .iter()
                    .map(|f| {
                        let (pool, engine) = (pool.clone(), engine.clone());
                        sc.spawn(move || stream_scan(&pool, &engine, f, n, true, true, auto).0)
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap())
                    .fold(0.0, f64::max)
            });
            rows[k].1.push(t);
        }
    }
    println!("hit path, {n} pages of {BS} B, {repeat} interleaved runs, ns per page per thread: median (min-max)");
    let base = median(rows[0].1.clone()).0;
    for (name, v) in rows {
        let (m, lo, hi) = median(v);
        let per = |s: f64| s * 1e9 / n as f64;
        println!(
            "  {name:<42} {:>7.1} ({:.1}-{:.1})  {:>6.2} M pages/s  overhead vs Vec {:+.1} ns",
            per(m),
            per(lo),
            per(hi),
            n as f64 / m / 1e6,
            per(m) - per(base)
        );
    }
}

fn stream_scan_cold(pool: &BufferPool, engine: &MemEngine, file: &MemFile, n: u64) {
    let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
        .build(source::forward(0..n))
        .unwrap();
    block_on(async { while s.next().await.is_some() {} });
}
