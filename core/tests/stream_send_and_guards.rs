//! A stream over a `Send` engine is `Send` (so it runs on tokio's
//! multi-thread runtime); guards outlive their stream and every pool handle.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::{stamp, MemEngine};
use pagestream::{source, BufferPool, PageGuard, ReadStream};

fn assert_send<T: Send>(_: &T) {}
fn assert_sync<T: Sync>(_: &T) {}

#[test]
fn streams_and_guards_are_send() {
    let pool = BufferPool::new(16, 4096).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(4, 4096);
    let mut s = ReadStream::builder(&pool, engine, file)
        .build(source::with_data(vec![(0u64, String::from("x"))]))
        .unwrap();
    assert_send(&s);
    let g = block_on(s.next()).unwrap().unwrap();
    assert_send(&g);
    assert_sync(&g);
    // The close future is Send too.
    let close = s.close();
    assert_send(&close);
    block_on(close);
}

#[test]
fn guards_outlive_the_stream_and_the_pool_handle() {
    let engine = MemEngine::new();
    let file = engine.create_stamped(32, 8192);
    let seed = file.seed();
    let guards: Vec<PageGuard> = {
        let pool = BufferPool::new(64, 8192).unwrap();
        let mut s = ReadStream::builder(&pool, engine, file)
            .build(source::iter([5u64, 30, 2]))
            .unwrap();
        let gs = block_on(async {
            let mut v = Vec::new();
            while let Some(p) = s.next().await {
                v.push(p.unwrap());
            }
            v
        });
        drop(s);
        drop(pool);
        gs
    };
    let blocks: Vec<u64> = guards.iter().map(|g| g.block()).collect();
    assert_eq!(blocks, [5, 30, 2]);
    for g in &guards {
        assert!(
            stamp::check(seed, g.block(), g),
            "page {} changed after its stream and pool were dropped",
            g.block()
        );
    }
    // A guard moved to another thread still reads its page.
    let g = guards.into_iter().next().unwrap();
    let ok = std::thread::spawn(move || stamp::check(seed, 5, &g))
        .join()
        .unwrap();
    assert!(ok);
}
