//! Remote storage on a small pool (issue: a 16-buffer ring and
//! `shared_buffers ÷ backends` once cut PostgreSQL 17's look-ahead to one
//! block and made scans 5x slower). Here, a 1 MiB pool with `max_ios` 100
//! keeps many reads in flight for one stream, and 40 streams sharing it each
//! keep several; the stats name the pool's frames as the binding limit.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::{stamp, Delayed, MemEngine, ThreadTimer, Timer};
use pagestream::{source, BufferPool, Limit, ReadStream};
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 8192;

fn remote(latency_us: u64) -> (MemEngine, Delayed<MemEngine>) {
    let timer: Arc<dyn Timer> = Arc::new(ThreadTimer::new());
    let mem = MemEngine::new();
    let d = Delayed::new(mem.clone(), timer, Duration::from_micros(latency_us));
    (mem, d)
}

#[test]
fn one_stream_on_a_1mib_pool_keeps_many_reads_in_flight() {
    let (mem, engine) = remote(200);
    let file = mem.create_stamped(3000, BS);
    let seed = file.seed();
    let pool = BufferPool::builder()
        .capacity_bytes(1 << 20)
        .build()
        .unwrap();
    assert_eq!(pool.frames(), 128);
    let mut s = ReadStream::builder(&pool, engine, file)
        .max_ios(100)
        .io_combine_limit(16)
        .build(source::forward(0..3000))
        .unwrap();
    block_on(async {
        let mut b = 0;
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            assert!(p.block() == b && stamp::check(seed, b, &p));
            b += 1;
        }
        assert_eq!(b, 3000);
    });
    let st = s.stats();
    assert!(
        st.max_in_flight >= 50,
        "look-ahead collapsed on a small pool: {st}"
    );
    assert_eq!(st.binding_limit(), Some(Limit::Frames), "{st}");
}

#[test]
fn forty_streams_on_a_1mib_pool_each_keep_several_reads_in_flight() {
    let (mem, engine) = remote(200);
    let pool = BufferPool::builder()
        .capacity_bytes(1 << 20)
        .build()
        .unwrap();
    let n = 200;
    let files: Vec<_> = (0..40).map(|_| mem.create_stamped(n, BS)).collect();
    let mut streams: Vec<_> = files
        .iter()
        .map(|f| {
            ReadStream::builder(&pool, engine.clone(), f.clone())
                .max_ios(100)
                .io_combine_limit(16)
                .build(source::forward(0..n))
                .unwrap()
        })
        .collect();
    block_on(futures::future::join_all(
        streams.iter_mut().zip(&files).map(|(s, f)| async move {
            let mut b = 0;
            while let Some(p) = s.next().await {
                let p = p.unwrap_or_else(|e| panic!("stream failed: {e}"));
                assert!(p.block() == b && stamp::check(f.seed(), b, &p));
                b += 1;
            }
            assert_eq!(b, n);
        }),
    ));
    for s in &streams {
        let st = s.stats();
        assert!(
            st.max_in_flight >= 3,
            "a stream was cut to {} reads in flight: {st}",
            st.max_in_flight
        );
        assert_eq!(st.errors, 0);
    }
    let lat = engine.latency();
    assert!(
        lat.reads > 0 && lat.min >= Duration::from_micros(200),
        "{lat:?}"
    );
}
