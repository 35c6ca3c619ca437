//! What a scan does when the store misbehaves, over nginx and moto: a
//! missing object or bucket, wrong credentials, a server killed mid-scan,
//! a server answering 503 for a while, an object replaced under a scan.
//! Every page handed out is checked against its stamp, every error must
//! name the object, and every scan runs under a watchdog.

mod common;

use common::{
    drain, moto, nginx, pool, runtime, s3_store, stamped_bytes, watchdog, Backend, Scan, BS,
};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, RetryConfig};
use pagestream::{source, EngineFile, ReadError, ReadStream};
use pagestream_object_store::{ObjectFile, ObjectStoreEngine};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Retries enough to outlast an outage of seconds: at least 100 ms apart,
/// up to 100 of them.
fn patient() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(300),
            base: 2.0,
        },
        max_retries: 100,
        retry_timeout: Duration::from_secs(50),
    }
}

/// Gives up at once: one retry, 10 ms later.
fn impatient() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            base: 2.0,
        },
        max_retries: 1,
        retry_timeout: Duration::from_secs(5),
    }
}

/// An engine on `rt` retrying as `retry` says.
fn engine_on(rt: &tokio::runtime::Runtime, retry: RetryConfig) -> ObjectStoreEngine {
    ObjectStoreEngine::builder()
        .handle(rt.handle().clone())
        .retry(retry)
        .build()
        .expect("engine")
}

/// Asserts `e` is of `kind` and its message names `name`.
fn assert_names(e: &io::Error, kind: io::ErrorKind, name: &str, what: &str) {
    assert_eq!(e.kind(), kind, "{what}: {e}");
    assert!(
        e.to_string().contains(name),
        "{what}: must name {name}: {e}"
    );
}

/// Asserts every error of `scan` is a read error naming `name` (the object)
/// and a byte range.
fn assert_errors_name(scan: &Scan, name: &str, what: &str) {
    for (i, e) in &scan.errors {
        assert!(
            matches!(ReadError::from_io(e), Some(ReadError::Io { .. })),
            "{what}: item {i}: not a read error: {e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(name) && msg.contains("GET bytes"),
            "{what}: item {i}: must name {name} and the range: {msg}"
        );
    }
}

/// A forward stream over blocks `from..n` of `file`: 4 reads of 16 blocks
/// in flight.
fn stream(
    pool: &pagestream::BufferPool,
    engine: &ObjectStoreEngine,
    file: ObjectFile,
    blocks: std::ops::Range<u64>,
) -> ReadStream<ObjectStoreEngine, impl pagestream::BlockSource<Data = ()>> {
    ReadStream::builder(pool, engine.clone(), file)
        .max_ios(4)
        .io_combine_limit(16)
        .build(source::forward(blocks))
        .expect("build")
}

#[test]
fn missing_object_is_not_found_naming_it() {
    let rt = runtime();
    if let Some((nginx, _root)) = nginx() {
        rt.block_on(watchdog("nginx", async {
            let url = nginx.url("no/such/object");
            let e = engine_on(&rt, impatient())
                .open_url(&url)
                .await
                .unwrap_err();
            assert_names(&e, io::ErrorKind::NotFound, &url, "nginx");
        }));
    }
    if let Some(moto) = moto("present") {
        rt.block_on(watchdog("moto", async {
            let store = Arc::new(moto.store("present").expect("store"));
            let e = engine_on(&rt, impatient())
                .open(store, ObjectPath::from("no/such"), "s3://present/no/such")
                .await
                .unwrap_err();
            assert_names(&e, io::ErrorKind::NotFound, "s3://present/no/such", "moto");
        }));
    }
}

#[test]
fn missing_bucket_is_not_found_naming_it() {
    let Some(moto) = moto("present") else {
        return;
    };
    let rt = runtime();
    rt.block_on(watchdog("moto", async {
        let store = Arc::new(moto.store("absent").expect("store"));
        let e = engine_on(&rt, impatient())
            .open(store, ObjectPath::from("key"), "s3://absent/key")
            .await
            .unwrap_err();
        assert_names(&e, io::ErrorKind::NotFound, "s3://absent/key", "moto");
    }));
}

/// moto checks signatures once told to (`Moto::require_auth`): the right
/// credentials read every page, a wrong secret or an unknown key is
/// refused at open, naming the object.
#[test]
fn wrong_credentials_are_permission_denied() {
    let Some(mut moto) = moto("private") else {
        return;
    };
    let rt = runtime();
    let (key, secret) = moto.require_auth().expect("turn moto's auth on");
    let n = 64;
    rt.block_on(watchdog("moto auth", async {
        moto.put("private", "table", stamped_bytes(7, n, 0))
            .await
            .expect("put with the right credentials");
        let engine = engine_on(&rt, impatient());
        let name = "s3://private/table";
        for (k, s, what) in [
            (key.as_str(), "not-the-secret", "wrong secret"),
            ("AKIAUNKNOWNKEY000000", secret.as_str(), "unknown key"),
        ] {
            let store = Arc::new(moto.store_with_credentials("private", k, s).expect("store"));
            let e = engine
                .open(store, ObjectPath::from("table"), name)
                .await
                .unwrap_err();
            assert_names(&e, io::ErrorKind::PermissionDenied, name, what);
        }
        let store = Arc::new(moto.store("private").expect("store"));
        let file = engine
            .open(store, ObjectPath::from("table"), name)
            .await
            .expect("open with the right credentials");
        let pool = pool(128);
        let mut s = stream(&pool, &engine, file, 0..n);
        let expect: Vec<u64> = (0..n).collect();
        let scan = drain(&mut s, 7, &expect, "right credentials").await;
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
    }));
}

/// Takes pages from `s` (checking each is the next of `expect`, with its
/// stamp under `seed`) until the stream has to wait for a read: returns the
/// pages taken. The read it waits for is then in flight.
async fn until_waiting<S: pagestream::BlockSource>(
    s: &mut ReadStream<ObjectStoreEngine, S>,
    seed: u64,
    expect: &[u64],
) -> Vec<u64> {
    use futures::StreamExt;
    let mut got = Vec::new();
    watchdog("until the stream waits", async {
        loop {
            // Dropping `next()` unfinished leaves the stream as it was.
            match tokio::time::timeout(Duration::from_millis(300), s.next()).await {
                Err(_) => return,
                Ok(item) => {
                    let page = item.expect("a page").expect("no error yet");
                    let b = expect[got.len()];
                    assert_eq!(page.block(), b);
                    assert!(pagestream::testing::stamp::check(seed, b, &page));
                    got.push(b);
                }
            }
        }
    })
    .await;
    got
}

/// nginx killed mid-scan while it sends a response slowly (so a GET is
/// cut off mid-body) and started again a moment later: object_store's
/// retries (of the broken body, from where it broke, and of new GETs)
/// carry the scan over the outage, and every page is right.
#[test]
fn nginx_killed_and_restarted_mid_scan() {
    let Some((mut nginx, root)) = nginx() else {
        return;
    };
    let rt = runtime();
    let n = 512;
    std::fs::write(root.path().join("t"), stamped_bytes(11, n, 0)).expect("write");
    let engine = engine_on(&rt, patient());
    rt.block_on(watchdog("kill and restart", async {
        let file = engine.open_url(&nginx.url("t")).await.expect("open");
        let pool = pool(256);
        let mut s = stream(&pool, &engine, file, 0..n);
        let all: Vec<u64> = (0..n).collect();
        let mut pages = drain_some(&mut s, 11, &all[..40]).await.pages;
        nginx.set_slow(true).expect("slow");
        pages.extend(until_waiting(&mut s, 11, &all[40..]).await);
        assert!(pool.stats().reading > 0, "no read in flight at the kill");
        // This thread is not one of the runtime's workers: blocking it
        // leaves the reads running.
        nginx.kill();
        nginx.set_slow(false).expect("fast");
        std::thread::sleep(Duration::from_millis(300));
        nginx.restart().expect("restart nginx");
        let rest = &all[pages.len()..];
        let scan = drain(&mut s, 11, rest, "after the restart").await;
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
        assert_eq!(pages.len() + scan.pages.len(), n as usize);
        s.close().await;
        assert_eq!(pool.stats().pinned, 0);
    }));
    assert_eq!(engine.stats().failed, 0, "{:?}", engine.stats());
}

/// Drains the next `expect.len()` items of `s` (which must be those
/// pages), leaving the stream open.
async fn drain_some<S: pagestream::BlockSource>(
    s: &mut ReadStream<ObjectStoreEngine, S>,
    seed: u64,
    expect: &[u64],
) -> Scan {
    use futures::StreamExt;
    watchdog("first pages", async {
        let mut scan = Scan::default();
        for &b in expect {
            let page = s.next().await.expect("a page").expect("no error yet");
            assert_eq!(page.block(), b);
            assert!(pagestream::testing::stamp::check(seed, b, &page));
            scan.pages.push(b);
        }
        scan
    })
    .await
}

/// nginx killed mid-scan (a GET cut off mid-body, as above) and not back
/// before the retries run out: the reads fail with errors naming the URL
/// (no hang, no wrong page); once nginx is back, a new scan on the same
/// pool reads every page right.
#[test]
fn nginx_killed_for_good_fails_clearly() {
    let Some((mut nginx, root)) = nginx() else {
        return;
    };
    let rt = runtime();
    let n = 256;
    std::fs::write(root.path().join("t"), stamped_bytes(12, n, 0)).expect("write");
    let engine = engine_on(&rt, impatient());
    let url = nginx.url("t");
    let pool = pool(128);
    let file = rt.block_on(async { engine.open_url(&url).await.expect("open") });
    rt.block_on(watchdog("killed", async {
        let mut s = stream(&pool, &engine, file.clone(), 0..n);
        let all: Vec<u64> = (0..n).collect();
        let mut taken = drain_some(&mut s, 12, &all[..32]).await.pages.len();
        nginx.set_slow(true).expect("slow");
        taken += until_waiting(&mut s, 12, &all[32..]).await.len();
        assert!(pool.stats().reading > 0, "no read in flight at the kill");
        nginx.kill();
        nginx.set_slow(false).expect("fast");
        let scan = drain(&mut s, 12, &all[taken..], "nginx down").await;
        assert!(!scan.errors.is_empty(), "no read failed with nginx down");
        assert_errors_name(&scan, &url, "nginx down");
        s.close().await;
    }));
    assert!(engine.stats().failed > 0, "{:?}", engine.stats());
    nginx.restart().expect("restart nginx");
    rt.block_on(watchdog("back", async {
        let mut s = stream(&pool, &engine, file, 0..n);
        let all: Vec<u64> = (0..n).collect();
        let scan = drain(&mut s, 12, &all, "nginx back").await;
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
        s.close().await;
    }));
    let st = pool.stats();
    assert_eq!((st.pinned, st.reading), (0, 0), "{st}");
}

/// moto killed and restarted mid-scan comes back empty (it keeps objects
/// in memory): the reads after it fail as NotFound, naming the object.
#[test]
fn moto_restarted_loses_the_object() {
    let Some(mut moto) = moto("volatile") else {
        return;
    };
    let rt = runtime();
    let n = 256;
    let engine = engine_on(&rt, impatient());
    let name = "s3://volatile/t";
    rt.block_on(watchdog("moto restart", async {
        moto.put("volatile", "t", stamped_bytes(13, n, 0))
            .await
            .expect("put");
        let store = Arc::new(moto.store("volatile").expect("store"));
        let file = engine
            .open(store, ObjectPath::from("t"), name)
            .await
            .expect("open");
        let pool = pool(128);
        let mut s = stream(&pool, &engine, file, 0..n);
        let _ = drain_some(&mut s, 13, &(0..32).collect::<Vec<_>>()).await;
        moto.restart().expect("restart moto");
        let rest: Vec<u64> = (32..n).collect();
        let scan = drain(&mut s, 13, &rest, "moto restarted").await;
        assert!(!scan.errors.is_empty(), "no read failed after the restart");
        assert_errors_name(&scan, name, "moto restarted");
        for (i, e) in &scan.errors {
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "item {i}: {e}");
        }
        s.close().await;
        let st = pool.stats();
        assert_eq!((st.pinned, st.reading), (0, 0), "{st}");
    }));
}

/// nginx answering 503 to everything for about a second: object_store's
/// retries wait it out and the scan completes with every page right; no
/// page arrives while nginx refuses.
#[test]
fn nginx_unavailable_for_a_while() {
    let Some((nginx, root)) = nginx() else {
        return;
    };
    let rt = runtime();
    let n = 256;
    std::fs::write(root.path().join("t"), stamped_bytes(14, n, 0)).expect("write");
    let engine = engine_on(&rt, patient());
    let nginx = Arc::new(nginx);
    let back = Arc::new(AtomicBool::new(false));
    rt.block_on(watchdog("503", async {
        let file = engine.open_url(&nginx.url("t")).await.expect("open");
        nginx.set_unavailable(true).expect("503 on");
        assert!(
            raw_get_status(nginx.port(), "/t").starts_with("HTTP/1.1 503"),
            "nginx does not answer 503"
        );
        let switch = {
            let (nginx, back) = (Arc::clone(&nginx), Arc::clone(&back));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(1));
                back.store(true, Ordering::SeqCst);
                nginx.set_unavailable(false).expect("503 off");
            })
        };
        let pool = pool(128);
        let mut s = stream(&pool, &engine, file, 0..n);
        {
            use futures::StreamExt;
            let first = s.next().await.expect("a page").expect("first page");
            assert!(
                back.load(Ordering::SeqCst),
                "a page arrived while nginx answered 503"
            );
            assert!(first.block() == 0 && pagestream::testing::stamp::check(14, 0, &first));
        }
        let rest: Vec<u64> = (1..n).collect();
        let scan = drain(&mut s, 14, &rest, "after the 503s").await;
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
        s.close().await;
        switch.join().expect("switch thread");
    }));
    assert_eq!(engine.stats().failed, 0, "{:?}", engine.stats());
}

/// The status line nginx answers a plain `GET path` with.
fn raw_get_status(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read");
    answer.lines().next().unwrap_or_default().to_owned()
}

/// Scans part of an object, replaces it (`replace` writes the new bytes),
/// and scans on: every page handed out is the old object's (its ETag is
/// asked for with `If-Match`, which the server refuses once the object
/// changed), the rest are errors naming the object; reopened, the object
/// is a new file whose pages (the new ones) the same pool serves right.
async fn replaced_under_a_scan(
    backend: &Backend,
    engine: &ObjectStoreEngine,
    new_blocks: u64,
    what: &str,
) {
    let (n, old_seed, new_seed) = (256u64, 21, 22);
    let key = format!("replaced-{new_blocks}");
    let name = backend.name(&key);
    let file = backend
        .put(engine, &key, stamped_bytes(old_seed, n, 0), false)
        .await
        .expect("put");
    let pool = pool(64);
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .max_ios(2)
        .io_combine_limit(4)
        .build(source::forward(0..n))
        .expect("build");
    let _ = drain_some(&mut s, old_seed, &(0..16).collect::<Vec<_>>()).await;
    backend
        .write(&key, stamped_bytes(new_seed, new_blocks, 0))
        .await
        .expect("replace");
    if let Backend::Nginx { root, .. } = backend {
        // nginx's ETag is the modification time in seconds and the size: a
        // same-size file written within the second would have the old one.
        let f = std::fs::File::options()
            .write(true)
            .open(root.path().join(&key))
            .expect("open replaced file");
        f.set_modified(SystemTime::now() - Duration::from_secs(100))
            .expect("set mtime");
    }
    let rest: Vec<u64> = (16..n).collect();
    let scan = drain(&mut s, old_seed, &rest, what).await;
    assert!(
        !scan.errors.is_empty(),
        "{what}: every read succeeded after the object was replaced"
    );
    assert_errors_name(&scan, &name, what);
    for (i, e) in &scan.errors {
        assert_eq!(
            e.kind(),
            io::ErrorKind::InvalidData,
            "{what}: item {i}: {e}"
        );
    }
    s.close().await;
    let new = backend.open(engine, &key, false).await.expect("reopen");
    assert_ne!(
        new.id(),
        file.id(),
        "{what}: the new version has the old id"
    );
    assert_eq!(new.len(), new_blocks * BS as u64);
    let mut s = stream(&pool, engine, new, 0..new_blocks);
    let all: Vec<u64> = (0..new_blocks).collect();
    let scan = drain(&mut s, new_seed, &all, what).await;
    assert!(scan.errors.is_empty(), "{what}: {:?}", scan.errors);
    s.close().await;
    let st = pool.stats();
    assert_eq!((st.pinned, st.reading), (0, 0), "{what}: {st}");
}

#[test]
fn replaced_object_fails_its_reads_on_nginx() {
    let Some((nginx, root)) = nginx() else {
        return;
    };
    let rt = runtime();
    // Patient: a GET in flight as the file is replaced may be cut off by
    // the server, and the pooled connection with it, a transport error to
    // retry; what the test is about, the replaced object's answer (another
    // ETag), is never retried.
    let engine = engine_on(&rt, patient());
    let backend = Backend::Nginx { nginx, root };
    rt.block_on(watchdog("nginx", async {
        replaced_under_a_scan(&backend, &engine, 100, "nginx, shorter").await;
        replaced_under_a_scan(&backend, &engine, 256, "nginx, same size").await;
    }));
}

#[test]
fn replaced_object_fails_its_reads_on_moto() {
    let Some(moto) = moto("replaced") else {
        return;
    };
    let rt = runtime();
    let engine = engine_on(&rt, impatient());
    let backend = Backend::S3 {
        shared: s3_store(&moto.env(), "replaced"),
        env: moto.env(),
        bucket: "replaced".into(),
    };
    rt.block_on(watchdog("moto", async {
        replaced_under_a_scan(&backend, &engine, 100, "moto, shorter").await;
        replaced_under_a_scan(&backend, &engine, 256, "moto, same size").await;
    }));
}
