//! The whole-stream property test's shapes (`core/tests/prop_stream_oracle.rs`)
//! over the object-store engine on real servers: one to three streams with
//! random block sequences (runs forward and backward, repeats, scattered
//! blocks, blocks past the end) share a pool of random size, at random
//! `max_ios` and `io_combine_limit`, all polled at once. Oracle: the naive
//! reader — each stream hands out exactly its sequence, in order, each page
//! with its stamp, blocks past the end as errors in place.
//!
//! Completions come in whatever order the server and the runtime give
//! (not chosen by the test, as the core test's are).

mod common;

use common::{moto, nginx, runtime, stamped_bytes, watchdog, BS};
use futures::StreamExt;
use object_store::ObjectStore;
use pagestream::testing::stamp;
use pagestream::{source, BufferPool, ReadError};
use pagestream_object_store::{ObjectFile, ObjectStoreEngine};
use proptest::prelude::*;
use std::sync::Arc;

const NBLOCKS: u64 = 72;
const SEED: u64 = 0x0_9a1e;

fn sequences() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec((0u64..80, 1usize..24, 0u8..4), 1..10).prop_map(|runs| {
        let mut v = Vec::new();
        for (start, len, kind) in runs {
            for i in 0..len as u64 {
                v.push(match kind {
                    0 => start + i,
                    1 => start.saturating_sub(i),
                    2 => start,
                    _ => (start * 11 + i * 17) % 80,
                });
            }
        }
        v
    })
}

/// Runs one case: `seqs` as streams over `file` on a pool of `frames`.
fn check(
    rt: &tokio::runtime::Runtime,
    engine: &ObjectStoreEngine,
    file: &ObjectFile,
    seqs: &[Vec<u64>],
    frames: usize,
    max_ios: usize,
    combine: usize,
) -> Result<(), TestCaseError> {
    rt.block_on(watchdog("property case", async {
        let pool = BufferPool::new(frames, BS).expect("pool");
        let drains = seqs.iter().map(|seq| {
            let mut s = pagestream::ReadStream::builder(&pool, engine.clone(), file.clone())
                .max_ios(max_ios)
                .io_combine_limit(combine)
                .build(source::iter(seq.clone()))
                .expect("build");
            async move {
                let mut pos = 0;
                while let Some(item) = s.next().await {
                    let want = seq[pos];
                    match item {
                        Ok(page) => {
                            prop_assert_eq!(page.block(), want);
                            prop_assert!(stamp::check(SEED, want, &page), "block {} bytes", want);
                        }
                        Err(e) => match ReadError::from_io(&e) {
                            Some(ReadError::PastEnd { block, .. }) => {
                                prop_assert!(want >= NBLOCKS, "{}", e);
                                prop_assert_eq!(*block, want);
                            }
                            // The other streams' look-ahead holds the pool:
                            // the same block comes next time.
                            Some(ReadError::PoolExhausted { .. }) => continue,
                            _ => prop_assert!(false, "block {}: unexpected error {}", want, e),
                        },
                    }
                    pos += 1;
                }
                prop_assert_eq!(pos, seq.len(), "the stream ended early");
                s.close().await;
                Ok(())
            }
        });
        for r in futures::future::join_all(drains).await {
            r?;
        }
        let st = pool.stats();
        prop_assert_eq!((st.pinned, st.reading), (0, 0), "{}", st);
        Ok(())
    }))
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 100,
        ..ProptestConfig::default()
    }
}

#[test]
fn streams_over_nginx_match_naive_reader() {
    let Some((nginx, dir)) = nginx() else {
        return;
    };
    std::fs::write(dir.path().join("t.dat"), stamped_bytes(SEED, NBLOCKS, 0)).expect("write");
    let rt = runtime();
    let engine = rt.block_on(async { ObjectStoreEngine::new().expect("engine") });
    let file = rt
        .block_on(engine.open_url(&nginx.url("t.dat")))
        .expect("open");
    proptest!(config(), |(
        seqs in prop::collection::vec(sequences(), 1..4),
        frames in 16usize..200,
        max_ios in 0usize..6,
        combine in 1usize..17,
    )| {
        check(&rt, &engine, &file, &seqs, frames, max_ios, combine)?;
    });
}

#[test]
fn streams_over_moto_match_naive_reader() {
    let Some(moto) = moto("prop-streams") else {
        return;
    };
    let rt = runtime();
    let engine = rt.block_on(async { ObjectStoreEngine::new().expect("engine") });
    let store: Arc<dyn ObjectStore> = Arc::new(moto.store("prop-streams").expect("store"));
    let file = rt.block_on(async {
        moto.put("prop-streams", "t.dat", stamped_bytes(SEED, NBLOCKS, 0))
            .await
            .expect("put");
        engine
            .open(store, "t.dat".into(), "s3://prop-streams/t.dat")
            .await
            .expect("open")
    });
    proptest!(
        ProptestConfig {
            cases: 24,
            ..config()
        },
        |(
            seqs in prop::collection::vec(sequences(), 1..4),
            frames in 16usize..200,
            max_ios in 0usize..6,
            combine in 1usize..17,
        )| {
            check(&rt, &engine, &file, &seqs, frames, max_ios, combine)?;
        }
    );
}
