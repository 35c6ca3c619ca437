//! Engine-specific behaviour: O_DIRECT alignment errors, the RWF_NOWAIT
//! inline path on warm files, the thread path on cold files, file options.

mod common;

use common::evict;
use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::files::temp_path;
use pagestream::testing::{stamp, PanicOnFinish, StampedFile};
use pagestream::{source, BufferPool, CachedReads, EngineFile, IoEngine, ReadStream, StreamStats};
use pagestream_threadpool::{
    BlockingReads, FileAdvice, OpenOptions, ThreadPoolEngine, ThreadPoolFile,
};
use std::io::{self, Read};
use std::os::fd::AsRawFd;

const BS: usize = 8192;

/// A stamped file of `BS` blocks, removed on drop.
fn stamped(tag: &str, seed: u64, nblocks: u64) -> StampedFile {
    StampedFile::with_seed(tag, seed, nblocks, BS)
}

/// Scans all of `file` forward, verifying every page; returns the stats.
fn scan_verify(engine: &ThreadPoolEngine, file: ThreadPoolFile, seed: u64, n: u64) -> StreamStats {
    let pool = BufferPool::new(1024, BS).unwrap();
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .build(source::forward(0..n))
        .unwrap();
    block_on(async {
        let mut next = 0;
        while let Some(page) = s.next().await {
            let page = page.expect("page");
            assert_eq!(page.block(), next);
            assert!(
                stamp::check(seed, next, &page),
                "block {next} has wrong bytes"
            );
            next += 1;
        }
        assert_eq!(next, n, "stream ended early");
        s.close().await
    })
}

#[test]
fn misaligned_direct_block_size_is_a_clear_error() {
    let f = stamped("align", 1, 8);
    for bad in [1000, 3 * 512, 0, 256] {
        let e = ThreadPoolFile::open_direct(f.path(), bad).expect_err("bad block size accepted");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(&bad.to_string()), "{e}");
    }
    let ok = ThreadPoolFile::open_direct(f.path(), BS).expect("8 KiB O_DIRECT");
    let align = ok.alignment();
    assert!(align >= 512 && align.is_power_of_two(), "alignment {align}");
    if align > 512 {
        // A power of two below the file system's alignment.
        let e = ThreadPoolFile::open_direct(f.path(), align / 2).expect_err("accepted");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains(&align.to_string()), "{e}");
    }
}

#[test]
fn direct_read_with_misaligned_block_size_fails_cleanly() {
    // Opened without a block size, the check happens at the first read.
    let f = stamped("align-read", 2, 64);
    let file = ThreadPoolFile::open_with(f.path(), OpenOptions::new().direct(true)).unwrap();
    let align = file.alignment();
    if align <= 512 {
        eprintln!("O_DIRECT alignment is {align}: every pool block size is aligned; skipped");
        return;
    }
    let pool = BufferPool::new(64, 512).unwrap();
    let mut s = ReadStream::builder(&pool, ThreadPoolEngine::new(), file)
        .build(source::forward(0..4))
        .unwrap();
    let first = block_on(s.next()).expect("an item");
    let e = first.expect_err("misaligned O_DIRECT read succeeded");
    assert!(e.to_string().contains("512"), "{e}");
}

#[test]
fn nowait_serves_warm_files_inline() {
    let n = 512;
    let f = stamped("warm", 3, n);
    // Warm: read it all once.
    let mut buf = Vec::new();
    std::fs::File::open(f.path())
        .unwrap()
        .read_to_end(&mut buf)
        .unwrap();
    assert_eq!(buf.len(), n as usize * BS);
    let engine = ThreadPoolEngine::new();
    let st = scan_verify(&engine, ThreadPoolFile::open(f.path()).unwrap(), 3, n);
    let es = engine.stats();
    assert!(es.nowait_full > 0, "no inline reads: {es:?}");
    assert_eq!(es.thread_preads, 0, "warm reads went to threads: {es:?}");
    assert_eq!(st.cached_reads, st.reads, "reads not marked cached: {st}");
    assert_eq!(st.blocks_read, n, "{st}");
}

#[test]
fn cold_reads_are_correct_inline_or_on_threads() {
    let n = 512;
    let f = stamped("cold", 4, n);
    let file = ThreadPoolFile::open(f.path()).unwrap();
    evict(file.as_file());
    let engine = ThreadPoolEngine::new();
    let st = scan_verify(&engine, file, 4, n);
    let es = engine.stats();
    // Every read was either served whole by the inline RWF_NOWAIT attempt or
    // handed to the threads. Which, on a cold file, is the kernel's call:
    // it may start read-ahead and finish a RWF_NOWAIT read itself rather
    // than refuse it (seen here: a fully evicted file, every read inline),
    // so this test cannot insist that something blocked; the thread path
    // is exercised by `nowait_off_reads_on_threads`.
    assert_eq!(es.nowait_full + es.queued, st.reads, "{es:?} {st}");
    assert_eq!(st.blocks_read, n, "{st}");
}

#[test]
fn nowait_off_reads_on_threads() {
    let n = 256;
    let f = stamped("nowait-off", 5, n);
    let engine = ThreadPoolEngine::builder().nowait(false).threads(2).build();
    assert!(!engine.nowait());
    let st = scan_verify(&engine, ThreadPoolFile::open(f.path()).unwrap(), 5, n);
    let es = engine.stats();
    assert_eq!(
        es.nowait_full + es.nowait_partial + es.nowait_would_block,
        0
    );
    assert!(es.thread_preads >= st.reads, "{es:?} {st}");
    assert!(es.threads_started <= 2, "{es:?}");
}

#[test]
fn direct_cold_scan_is_correct() {
    let n = 512;
    let f = stamped("direct", 6, n);
    let engine = ThreadPoolEngine::new();
    let file = ThreadPoolFile::open_direct(f.path(), BS).unwrap();
    assert!(!engine.hints(&file).advice);
    let st = scan_verify(&engine, file, 6, n);
    assert_eq!(
        engine.stats().nowait_full,
        0,
        "O_DIRECT must not use RWF_NOWAIT"
    );
    assert_eq!(st.advice, 0, "advice under O_DIRECT: {st}");
    assert_eq!(st.blocks_read, n, "{st}");
    // No advice, so no read is primed.
    let es = engine.stats();
    assert_eq!(es.queued_primed, 0, "{es:?}");
    // Aligned O_DIRECT reads go through native AIO where the kernel has it.
    assert!(es.aio_reads > 0 || !engine.aio(), "{es:?}");
}

#[test]
fn direct_reads_without_aio_use_threads() {
    let n = 256;
    let f = stamped("direct-no-aio", 14, n);
    let engine = ThreadPoolEngine::builder().aio(false).build();
    assert!(!engine.aio());
    let file = ThreadPoolFile::open_direct(f.path(), BS).unwrap();
    let st = scan_verify(&engine, file, 14, n);
    assert_eq!(st.blocks_read, n, "{st}");
    let es = engine.stats();
    assert_eq!(es.aio_reads, 0, "{es:?}");
    assert_eq!(es.queued, st.reads, "every read on a thread: {es:?} {st}");
}

/// The system-wide limit of AIO events (`fs.aio-max-nr`).
fn aio_max_nr() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/aio-max-nr")
        .expect("/proc/sys/fs/aio-max-nr")
        .trim()
        .parse()
        .expect("a number in /proc/sys/fs/aio-max-nr")
}

#[test]
fn direct_scan_reads_on_threads_when_aio_setup_fails() {
    // An AIO context larger than `fs.aio-max-nr` allows: `io_setup` fails
    // (EAGAIN, as once other contexts have used the limit up; EINVAL if
    // the limit is so high that the request overflows instead), the same
    // way every time, without changing the machine-wide setting.
    let events = u32::try_from(aio_max_nr() + 1).unwrap_or(u32::MAX);
    let n = 512;
    let f = stamped("direct-aio-fails", 16, n);
    let engine = ThreadPoolEngine::builder().aio_events(events).build();
    assert!(engine.aio(), "AIO is wanted until it is found unavailable");
    let file = ThreadPoolFile::open_direct(f.path(), BS).unwrap();
    let st = scan_verify(&engine, file, 16, n);
    let es = engine.stats();
    assert_eq!(st.blocks_read, n, "{st}");
    // No read was cancelled (and retried block by block) for want of AIO.
    assert_eq!(
        st.retries, 0,
        "a read was cancelled when io_setup failed: {st}"
    );
    assert!(!engine.aio(), "{es:?}");
    assert_eq!(es.aio_reads, 0, "{es:?}");
    assert_eq!(es.queued, st.reads, "every read on a thread: {es:?} {st}");
    assert_eq!(es.aio_fallbacks, 1, "io_setup is tried once: {es:?}");
    let errno = es
        .aio_unavailable
        .expect("the stats say AIO is unavailable");
    assert!(
        errno == libc::EAGAIN || errno == libc::EINVAL,
        "io_setup failed with errno {errno}"
    );
    let shown = es.to_string();
    assert!(
        shown.contains("aio unavailable:") && shown.contains("reads on threads"),
        "{shown}"
    );
    // An engine whose AIO works says nothing of the kind.
    let ok = ThreadPoolEngine::new();
    let st = scan_verify(
        &ok,
        ThreadPoolFile::open_direct(f.path(), BS).unwrap(),
        16,
        n,
    );
    let es = ok.stats();
    assert_eq!(st.retries, 0, "{st}");
    if ok.aio() {
        assert_eq!(es.aio_unavailable, None, "{es:?}");
        assert!(!es.to_string().contains("unavailable"), "{es}");
    }
}

#[test]
fn direct_sparse_reads_through_aio_are_correct() {
    // Many single-block O_DIRECT reads in flight at once through AIO, in
    // two streams over one engine: every page right and in order.
    let n = 2048;
    let f = stamped("direct-aio", 15, n);
    let engine = ThreadPoolEngine::new();
    let pool = BufferPool::new(1024, BS).unwrap();
    for step in [3u64, 7] {
        let file = ThreadPoolFile::open_direct(f.path(), BS).unwrap();
        let blocks: Vec<u64> = (0..n).step_by(step as usize).collect();
        let mut s = ReadStream::builder(&pool, engine.clone(), file)
            .build(source::iter(blocks.clone()))
            .unwrap();
        let got = block_on(async {
            let mut got = Vec::new();
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert!(
                    stamp::check(15, page.block(), &page),
                    "block {}",
                    page.block()
                );
                got.push(page.block());
            }
            got
        });
        assert_eq!(got, blocks);
    }
    let es = engine.stats();
    assert!(es.aio_reads > 0 || !engine.aio(), "{es:?}");
}

#[test]
fn truncated_file_gives_eof_errors_not_panics() {
    let n = 64;
    let f = stamped("trunc", 7, n);
    let file = ThreadPoolFile::open(f.path()).unwrap();
    let pool = BufferPool::new(256, BS).unwrap();
    let mut s = ReadStream::builder(&pool, ThreadPoolEngine::new(), file)
        .build(source::forward(0..n))
        .unwrap();
    // Shrink the file after the stream asked its length.
    std::fs::OpenOptions::new()
        .write(true)
        .open(f.path())
        .unwrap()
        .set_len(10 * BS as u64)
        .unwrap();
    let (good, bad) = block_on(async {
        let (mut good, mut bad) = (0, 0);
        while let Some(item) = s.next().await {
            match item {
                Ok(page) => {
                    assert!(page.block() < 10);
                    assert!(stamp::check(7, page.block(), &page));
                    good += 1;
                }
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
                    bad += 1;
                }
            }
        }
        (good, bad)
    });
    assert_eq!((good, bad), (10, n - 10));
}

#[test]
fn file_properties() {
    let f = stamped("props", 8, 16);
    let a = ThreadPoolFile::open(f.path()).unwrap();
    let b =
        ThreadPoolFile::open_with(f.path(), OpenOptions::new().advice(FileAdvice::Random)).unwrap();
    let d = ThreadPoolFile::open_direct(f.path(), BS).unwrap();
    assert_eq!(a.id(), b.id(), "same inode, same id");
    assert_eq!(a.id(), d.id());
    assert_eq!(a.byte_len().unwrap(), 16 * BS as u64);
    assert!(a.kernel_readahead());
    assert!(
        !b.kernel_readahead(),
        "POSIX_FADV_RANDOM turns read-ahead off"
    );
    assert!(!d.kernel_readahead(), "O_DIRECT has no read-ahead");
    let engine = ThreadPoolEngine::new();
    assert!(engine.hints(&a).advice && engine.hints(&b).advice);
    assert!(!engine.hints(&d).advice);
    assert_eq!(engine.name(), "threadpool");
    let other = stamped("props2", 9, 1);
    assert_ne!(ThreadPoolFile::open(other.path()).unwrap().id(), a.id());
    let missing = ThreadPoolFile::open(temp_path("missing")).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
}

/// Panics (once) in the result filter of the first multi-block read, on
/// whichever thread completes it.
struct PanicOnce(std::sync::atomic::AtomicBool);

impl pagestream::ReadFilter for PanicOnce {
    fn filter(&self, req: &pagestream::ReadRequest, r: io::Result<usize>) -> io::Result<usize> {
        if req.nblocks() > 1 && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            panic!("injected panic in a read's completion (expected by the test)");
        }
        r
    }
}

#[derive(Clone, Debug)]
struct Panicky(ThreadPoolEngine, std::sync::Arc<PanicOnce>);

impl std::fmt::Debug for PanicOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PanicOnce")
    }
}

impl IoEngine for Panicky {
    type File = ThreadPoolFile;
    fn start_read(&self, file: &ThreadPoolFile, mut req: pagestream::ReadRequest) {
        req.add_filter(self.1.clone());
        self.0.start_read(file, req);
    }
    fn name(&self) -> &'static str {
        "panicky"
    }
}

#[test]
fn a_panic_on_an_io_thread_cancels_the_read_and_keeps_the_thread() {
    let n = 128;
    let f = stamped("panic", 10, n);
    // One thread, every read on it: if the panic killed it, nothing after
    // would complete.
    let inner = ThreadPoolEngine::builder().threads(1).nowait(false).build();
    let once = std::sync::Arc::new(PanicOnce(std::sync::atomic::AtomicBool::new(false)));
    let engine = Panicky(inner.clone(), once.clone());
    let pool = BufferPool::new(256, BS).unwrap();
    let file = ThreadPoolFile::open(f.path()).unwrap();
    let mut s = ReadStream::builder(&pool, engine, file)
        .build(source::forward(0..n))
        .unwrap();
    let st = block_on(async {
        let mut next = 0;
        while let Some(page) = s.next().await {
            let page = page.expect("the cancelled read is retried block by block");
            assert_eq!(page.block(), next);
            assert!(stamp::check(10, next, &page), "block {next}");
            next += 1;
        }
        assert_eq!(next, n);
        s.close().await
    });
    assert!(
        once.0.load(std::sync::atomic::Ordering::SeqCst),
        "no panic injected"
    );
    assert!(st.retries > 0, "cancelled read not retried: {st}");
    assert_eq!(inner.stats().threads_started, 1);
}

/// A panic payload whose own drop panics.
struct PayloadPanicsOnDrop;

impl Drop for PayloadPanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the panic's payload panics when dropped (expected by the test)");
        }
    }
}

/// Panics (once) in the result filter of the first multi-block read, with
/// a payload whose drop panics too.
struct PanicWithBadPayload(std::sync::atomic::AtomicBool);

impl pagestream::ReadFilter for PanicWithBadPayload {
    fn filter(&self, req: &pagestream::ReadRequest, r: io::Result<usize>) -> io::Result<usize> {
        if req.nblocks() > 1 && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::panic::panic_any(PayloadPanicsOnDrop);
        }
        r
    }
}

impl std::fmt::Debug for PanicWithBadPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PanicWithBadPayload")
    }
}

#[derive(Clone, Debug)]
struct BadPayload(ThreadPoolEngine, std::sync::Arc<PanicWithBadPayload>);

impl IoEngine for BadPayload {
    type File = ThreadPoolFile;
    fn start_read(&self, file: &ThreadPoolFile, mut req: pagestream::ReadRequest) {
        req.add_filter(self.1.clone());
        self.0.start_read(file, req);
    }
    fn name(&self) -> &'static str {
        "bad-payload"
    }
}

/// A panic on an I/O thread whose payload panics when dropped still keeps
/// the thread (and the engine's count of its threads): with one thread,
/// every later read would otherwise wait forever for a thread the engine
/// counts as alive.
#[test]
fn a_panic_payload_that_panics_on_drop_keeps_the_io_thread() {
    let n = 128;
    let f = stamped("bad-payload", 12, n);
    let inner = ThreadPoolEngine::builder().threads(1).nowait(false).build();
    let once = std::sync::Arc::new(PanicWithBadPayload(std::sync::atomic::AtomicBool::new(
        false,
    )));
    let engine = BadPayload(inner.clone(), once.clone());
    let file = ThreadPoolFile::open(f.path()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pool = BufferPool::new(256, BS).unwrap();
        let mut s = ReadStream::builder(&pool, engine, file)
            .build(source::forward(0..n))
            .unwrap();
        let got = block_on(async {
            let mut next = 0;
            while let Some(page) = s.next().await {
                let page = page.expect("the cancelled read is retried block by block");
                assert_eq!(page.block(), next);
                assert!(stamp::check(12, next, &page), "block {next}");
                next += 1;
            }
            s.close().await;
            next
        });
        let _ = tx.send(got);
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the scan hangs: the I/O thread died with the panic's payload");
    assert_eq!(got, n);
    assert!(
        once.0.load(std::sync::atomic::Ordering::SeqCst),
        "no panic injected"
    );
    assert_eq!(inner.stats().threads_started, 1);
}

#[test]
fn random_advice_file_gets_willneed_advice_and_reads_correctly() {
    let n = 256;
    let f = stamped("fadv-random", 11, n);
    let file =
        ThreadPoolFile::open_with(f.path(), OpenOptions::new().advice(FileAdvice::Random)).unwrap();
    evict(file.as_file());
    assert_eq!(file.advice(), FileAdvice::Random);
    let engine = ThreadPoolEngine::new();
    let st = scan_verify(&engine, file, 11, n);
    // No kernel read-ahead: the planner advises its reads itself.
    assert!(st.advice > 0, "no advice without kernel read-ahead: {st}");
    assert_eq!(st.blocks_read, n, "{st}");
}

#[test]
fn advised_reads_are_queued_primed_and_read_correctly() {
    // A sparse ascending scan (every third block) of a cold file with
    // kernel read-ahead off: the planner advises every read right before
    // starting it, so every read that goes to a thread is primed, and the
    // threads that share them still deliver every page right.
    let n = 600;
    let f = stamped("primed", 12, n);
    let file =
        ThreadPoolFile::open_with(f.path(), OpenOptions::new().advice(FileAdvice::Random)).unwrap();
    evict(file.as_file());
    for nowait in [true, false] {
        evict(file.as_file());
        // No cached-read queue: a queued read would often find its advised
        // blocks read by the time it runs, and no read go to a thread.
        let engine = ThreadPoolEngine::builder()
            .nowait(nowait)
            .cached_reads(CachedReads::One)
            .build();
        let pool = BufferPool::new(1024, BS).unwrap();
        let blocks: Vec<u64> = (0..n).step_by(3).collect();
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .build(source::iter(blocks.clone()))
            .unwrap();
        let st = block_on(async {
            let mut got = Vec::new();
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert!(
                    stamp::check(12, page.block(), &page),
                    "block {} has wrong bytes",
                    page.block()
                );
                got.push(page.block());
            }
            assert_eq!(got, blocks, "pages out of order or missing");
            s.close().await
        });
        let es = engine.stats();
        assert!(st.advice > 0, "no advice without kernel read-ahead: {st}");
        assert!(
            es.queued > 0,
            "nowait {nowait}: nothing went to a thread: {es:?}"
        );
        assert_eq!(
            es.queued_primed, es.queued,
            "nowait {nowait}: an advised read was not primed: {es:?}"
        );
    }
}

#[test]
fn unadvised_reads_are_not_primed() {
    // Advice off: every read that goes to a thread needs that thread to
    // submit it, so none may wait for a busy thread.
    let n = 256;
    let f = stamped("unprimed", 13, n);
    let file = ThreadPoolFile::open(f.path()).unwrap();
    evict(file.as_file());
    let engine = ThreadPoolEngine::builder().nowait(false).build();
    let pool = BufferPool::new(1024, BS).unwrap();
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .advice(pagestream::AdvicePolicy::Never)
        .build(source::iter((0..n).step_by(2)))
        .unwrap();
    let st = block_on(async {
        while let Some(page) = s.next().await {
            let page = page.expect("page");
            assert!(stamp::check(13, page.block(), &page));
        }
        s.close().await
    });
    assert_eq!(st.advice, 0, "{st}");
    let es = engine.stats();
    assert!(es.queued > 0, "{es:?}");
    assert_eq!(es.queued_primed, 0, "{es:?}");
}

#[test]
fn blocking_inline_reads_on_the_calling_thread() {
    // Buffered and O_DIRECT (AIO off): no read goes to an I/O thread, and
    // every page is right.
    let n = 512;
    let f = stamped("inline", 16, n);
    for direct in [false, true] {
        let engine = ThreadPoolEngine::builder()
            .blocking_reads(BlockingReads::CallingThread)
            .aio(false)
            .build();
        let file = if direct {
            ThreadPoolFile::open_direct(f.path(), BS).unwrap()
        } else {
            let file = ThreadPoolFile::open(f.path()).unwrap();
            evict(file.as_file());
            file
        };
        let st = scan_verify(&engine, file, 16, n);
        assert_eq!(st.blocks_read, n, "{st}");
        let es = engine.stats();
        assert_eq!(es.queued, 0, "direct {direct}: {es:?}");
        assert_eq!(es.threads_started, 0, "direct {direct}: {es:?}");
        assert_eq!(
            es.inline_blocking_reads + es.nowait_full,
            st.reads,
            "direct {direct}: every read inline: {es:?} {st}"
        );
    }
}

/// Reads `path` whole, so the page cache holds it.
fn warm_up(path: &std::path::Path) {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .read_to_end(&mut buf)
        .unwrap();
}

#[test]
fn warm_reads_are_shared_with_the_cached_read_helper() {
    let n = 2048;
    let f = stamped("warm-helper", 11, n);
    warm_up(f.path());
    let engine = ThreadPoolEngine::builder()
        .cached_reads(CachedReads::InFlight(4))
        .build();
    let file = ThreadPoolFile::open(f.path()).unwrap();
    assert_eq!(engine.hints(&file).cached_reads.reads(), 4);
    let st = scan_verify(&engine, file, 11, n);
    // The helper counts a read once it is done, which may be just after
    // the stream has taken its page: wait (boundedly) for the last count.
    let mut es = engine.stats();
    for _ in 0..1000 {
        if es.cached_queued == es.helper_reads + es.helped_reads {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        es = engine.stats();
    }
    assert_eq!(es.thread_preads, 0, "warm reads went to threads: {es:?}");
    assert_eq!(st.cached_reads, st.reads, "reads not marked cached: {st}");
    assert_eq!(st.blocks_read, n, "{st}");
    // Past the first read (inline, it finds the file warm), every read was
    // queued and done by the helper or by the stream itself.
    assert!(es.cached_queued > 0, "nothing queued: {es:?}");
    assert_eq!(
        es.cached_queued,
        es.helper_reads + es.helped_reads,
        "{es:?}"
    );
    assert_eq!(es.nowait_full, st.reads, "{es:?}");
}

#[test]
fn cached_depth_below_two_reads_every_cached_read_inline() {
    let n = 512;
    let f = stamped("warm-nohelper", 12, n);
    warm_up(f.path());
    for depth in [0, 1] {
        let engine = ThreadPoolEngine::builder()
            .cached_reads(CachedReads::InFlight(depth))
            .build();
        let file = ThreadPoolFile::open(f.path()).unwrap();
        assert_eq!(engine.hints(&file).cached_reads.reads(), 1);
        let st = scan_verify(&engine, file, 12, n);
        let es = engine.stats();
        assert_eq!(es.cached_queued, 0, "{es:?}");
        assert_eq!(es.nowait_full, st.reads, "{es:?}");
    }
}

#[test]
fn cold_reads_through_the_cached_read_queue_fall_back_to_threads() {
    // Warm, then evicted while the stream reads: queued reads find the
    // cache cold and go to the I/O threads, with the right bytes.
    let n = 1024;
    let f = stamped("warm-then-cold", 13, n);
    for round in 0..3 {
        warm_up(f.path());
        let engine = ThreadPoolEngine::builder()
            .cached_reads(CachedReads::InFlight(6))
            .build();
        let pool = BufferPool::new(1024, BS).unwrap();
        let file = ThreadPoolFile::open(f.path()).unwrap();
        let mut s = ReadStream::builder(&pool, engine.clone(), file)
            .build(source::forward(0..n))
            .unwrap();
        block_on(async {
            let mut next = 0;
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert_eq!(page.block(), next);
                assert!(stamp::check(13, next, &page), "block {next} wrong");
                if next == 64 * (round + 1) {
                    // Drop what it can; not checked (reads in flight may
                    // bring pages back).
                    let file = std::fs::File::open(f.path()).unwrap();
                    // SAFETY: posix_fadvise takes no pointers.
                    let r = unsafe {
                        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                    };
                    assert_eq!(r, 0, "posix_fadvise(DONTNEED)");
                }
                next += 1;
            }
            assert_eq!(next, n);
        });
    }
}

#[test]
fn a_queued_read_completes_without_its_stream_being_polled() {
    // The stream stops polling with reads queued: the helper takes them
    // (a lone one after its linger), so their frames become valid anyway.
    let n = 256;
    let f = stamped("warm-unpolled", 14, n);
    warm_up(f.path());
    let engine = ThreadPoolEngine::builder()
        .cached_reads(CachedReads::InFlight(6))
        .build();
    let pool = BufferPool::new(1024, BS).unwrap();
    let file = ThreadPoolFile::open(f.path()).unwrap();
    let id = file.id();
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .build(source::forward(0..n))
        .unwrap();
    // Take pages until reads have been queued.
    let mut taken = Vec::new();
    block_on(async {
        while engine.stats().cached_queued < 3 {
            taken.push(s.next().await.expect("a page").expect("ok"));
        }
    });
    let queued_to = s.reads_in_flight();
    assert!(queued_to > 0, "no reads in flight");
    // Without polling: every queued read is done by the helper (the
    // counters count a read once it is published).
    let next = taken.last().unwrap().block() + 1;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let es = engine.stats();
        if es.cached_queued == es.helper_reads + es.helped_reads && pool.contains(id, next) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "queued reads never completed: {es:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(taken);
    let rest = block_on(async {
        let mut k = 0;
        while let Some(p) = s.next().await {
            p.expect("page");
            k += 1;
        }
        k
    });
    assert_eq!(rest as u64, n - next);
}

/// `Cpus_allowed_list` of a `/proc/.../status` file.
fn cpus_allowed(status: &std::path::Path) -> String {
    std::fs::read_to_string(status)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_owned()
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set (a plain bit
    // array).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    assert!(
        cpu < libc::CPU_SETSIZE as usize,
        "CPU {cpu} beyond a cpu_set_t"
    );
    // SAFETY: `set` is a valid `cpu_set_t` and `cpu` is below
    // `CPU_SETSIZE`, so the bit it sets is inside it.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `&set` is a valid `cpu_set_t` of the size passed, only read
    // during the call; pid 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    assert_eq!(r, 0, "sched_setaffinity: {}", io::Error::last_os_error());
}

#[test]
fn the_helper_has_a_whole_name_and_the_process_affinity() {
    let process = cpus_allowed("/proc/self/status".as_ref());
    // "0-3" or "0,2,5-7": the first allowed CPU.
    let first: usize = process
        .split([',', '-'])
        .next()
        .and_then(|c| c.parse().ok())
        .expect("a CPU number");
    if process == first.to_string() {
        eprintln!("one CPU allowed ({process}): nothing to check");
        return;
    }
    let n = 512;
    let f = stamped("warm-helper-affinity", 16, n);
    warm_up(f.path());
    let engine = ThreadPoolEngine::builder()
        .cached_reads(CachedReads::InFlight(6))
        .thread_name("tp-aff")
        .build();
    // The consumer that starts the helper is pinned to one CPU.
    let (e2, path) = (engine.clone(), f.path().to_owned());
    std::thread::spawn(move || {
        pin_to(first);
        scan_verify(&e2, ThreadPoolFile::open(path).unwrap(), 16, n);
    })
    .join()
    .unwrap();
    assert!(engine.stats().cached_queued > 0, "no helper started");
    // The helper lives as long as the engine; its name fits in `comm`.
    let helper = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|t| t.unwrap().path())
        .find(|t| {
            std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim_end() == "tp-aff-cached")
        })
        .expect("a thread named tp-aff-cached");
    // It sets its affinity once it runs: wait for that, without a time
    // limit the test relies on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mask = cpus_allowed(&helper.join("status"));
        if mask == process {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "helper allowed on {mask}, the process on {process}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(engine);
}

#[test]
fn a_huge_cached_depth_is_clamped_and_scans() {
    let n = 1024;
    let f = stamped("warm-huge-depth", 15, n);
    warm_up(f.path());
    for depth in [usize::MAX, 1 << 60] {
        let engine = ThreadPoolEngine::builder()
            .cached_reads(CachedReads::InFlight(depth))
            .build();
        let file = ThreadPoolFile::open(f.path()).unwrap();
        assert_eq!(
            engine.hints(&file).cached_reads.reads(),
            pagestream::MAX_IOS
        );
        let st = scan_verify(&engine, file, 15, n);
        assert_eq!(st.blocks_read, n, "depth {depth}: {st}");
    }
}

/// A finish hook that panics on an I/O thread still lets the stream hear
/// that its read is over (the core tells the stream before resuming the
/// panic): the scan gets every page and `close` returns, nothing pinned.
#[test]
fn panicking_finish_hook_does_not_hang_the_stream() {
    let n = 256;
    let tmp = StampedFile::new("panic-hook", n, 8192);
    let file =
        ThreadPoolFile::open_with(tmp.path(), OpenOptions::new().direct(true).block_size(8192))
            .expect("open");
    let seed = tmp.seed();
    tmp.remove();
    // No AIO, no inline reads: every read completes on an I/O thread.
    let engine = PanicOnFinish::new(ThreadPoolEngine::builder().aio(false).build(), 2);
    let pool = BufferPool::new(512, 8192).expect("pool");
    block_on(async {
        let mut s = ReadStream::builder(&pool, engine, file)
            .max_ios(4)
            .io_combine_limit(4)
            .build(source::forward(0..n))
            .expect("build");
        let mut i = 0;
        while let Some(page) = s.next().await {
            let page = page.unwrap_or_else(|e| panic!("block {i}: {e}"));
            assert!(stamp::check(seed, i, &page), "block {i}");
            i += 1;
        }
        assert_eq!(i, n);
        s.close().await;
    });
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
}

fn mkfifo(p: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL in path");
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A directory, a FIFO, a socket and a character device are refused at
/// open (buffered and O_DIRECT) with an error naming them, never opened to
/// yield no pages; a FIFO's open does not block.
#[test]
fn only_regular_files_and_block_devices_open() {
    let things = pagestream::testing::NotRegularFiles::new("tp-kinds", mkfifo);
    things.assert_refused(|p| ThreadPoolFile::open(p).map(drop));
    things.assert_refused(|p| ThreadPoolFile::open_direct(p, BS).map(drop));
}

/// Scans `file` from its last block down to block 0 with `readahead` bytes
/// of backward read-ahead, verifying every page; returns the stats.
fn scan_down(file: ThreadPoolFile, seed: u64, n: u64, readahead: u64) -> StreamStats {
    let pool = BufferPool::new(1024, BS).unwrap();
    let mut s = ReadStream::builder(&pool, ThreadPoolEngine::new(), file)
        .backward_readahead(readahead)
        .build(source::backward(0..n))
        .unwrap();
    block_on(async {
        let mut want = n;
        while let Some(page) = s.next().await {
            want -= 1;
            let page = page.expect("page");
            assert_eq!(page.block(), want);
            assert!(
                stamp::check(seed, want, &page),
                "block {want} has wrong bytes"
            );
        }
        assert_eq!(want, 0, "blocks missing");
    });
    s.stats().clone()
}

/// A cold buffered scan down the file advises read-ahead windows below its
/// reads (the kernel reads ahead only upwards), one per 1 MiB window here;
/// O_DIRECT files and a window of 0 get none. Pages are right either way.
#[test]
fn a_buffered_backward_scan_reads_ahead_below_itself() {
    let n = 2048; // 16 MiB
    let f = stamped("backward-ra", 11, n);
    let file = ThreadPoolFile::open(f.path()).unwrap();
    evict(file.as_file());
    let st = scan_down(file, 11, n, 1 << 20);
    // 128 blocks a window, from a few reads below the top down to block 0.
    assert!(
        (14..=16).contains(&st.backward_readahead),
        "windows below: {st}"
    );
    let file = ThreadPoolFile::open(f.path()).unwrap();
    evict(file.as_file());
    assert_eq!(scan_down(file, 11, n, 0).backward_readahead, 0);
    let file = ThreadPoolFile::open_direct(f.path(), BS).unwrap();
    assert_eq!(scan_down(file, 11, n, 1 << 20).backward_readahead, 0);
}
