//! The baselines: what a user would write instead of pagestream.
//!
//! - `pread-loop`: one blocking `pread` per block, in pattern order, relying
//!   on the kernel's read-ahead (PostgreSQL 16's sequential scan);
//! - `fadvise-prefetch`: the same, keeping `max_ios` `POSIX_FADV_WILLNEED`
//!   hints ahead of the read (PostgreSQL 16's bitmap heap scan prefetch);
//! - `tokio-fs`: `tokio::fs::File`, `seek` + `read_exact` per block, the way
//!   a tokio user reads pages;
//! - `glommio-stream`: glommio's own readers with their defaults: a
//!   `DmaStreamReader` (read-ahead = `max_ios` buffers of
//!   `io_combine_limit` blocks) for forward scans, `DmaFile::read_many`
//!   (concurrency `max_ios`, merged requests up to `io_combine_limit`
//!   blocks) for the other patterns. O_DIRECT only;
//! - `tokio-uring-fs`: tokio-uring used directly, as its user writes a page
//!   reader: `max_ios` tasks on a `tokio_uring::start` runtime (its
//!   defaults), each taking the next request and reading it with
//!   `File::read_exact_at` into a buffer of its own (4096-aligned, so that
//!   O_DIRECT works). A forward scan's requests are `io_combine_limit`
//!   blocks (fio's `bs`, pagestream's combined reads), the other patterns'
//!   one block.
//! - `bare-uring-tokio`: not what a user writes but the floor under it: one
//!   tokio task submitting reads to an io_uring and awaiting its descriptor
//!   in tokio's reactor, nothing else ([`bare_uring_tokio`]).

use crate::checksum::Checksum;
use crate::scan::{RunResult, ScanConfig, Target, Timer};
use serde_json::json;
use std::alloc::Layout;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// A zeroed heap buffer aligned to 4096 bytes (for O_DIRECT reads).
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("buffer layout");
        // SAFETY: the layout has a non-zero size (len.max(1)).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, layout }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live allocation of `layout.size()` bytes,
        // zero-initialised, owned by `self` and borrowed mutably here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

// SAFETY: `ptr` points to `layout.size()` bytes owned by the buffer, which
// neither moves nor frees them until it is dropped (moving the `AlignedBuf`
// moves only the pointer); all of them are initialised (zeroed at
// allocation), so `bytes_init` is the whole buffer.
unsafe impl tokio_uring::buf::IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr
    }

    fn bytes_init(&self) -> usize {
        self.layout.size()
    }

    fn bytes_total(&self) -> usize {
        self.layout.size()
    }
}

// SAFETY: the buffer owns its allocation alone (nothing else holds the
// pointer), so moving it to another thread moves that ownership.
unsafe impl Send for AlignedBuf {}

// SAFETY: as for `IoBuf`: the pointer is stable and writable for
// `bytes_total()` bytes while the buffer lives, and every byte is always
// initialised, so there is nothing for `set_init` to record.
unsafe impl tokio_uring::buf::IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    unsafe fn set_init(&mut self, _pos: usize) {}
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// `posix_fadvise` on a whole-file descriptor range.
pub fn fadvise(file: &impl AsRawFd, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: posix_fadvise takes no pointers; a bad fd gives an error code.
    let r = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            advice,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

fn open_plain(cfg: &ScanConfig, target: &Target) -> io::Result<File> {
    let mut oo = std::fs::OpenOptions::new();
    oo.read(true);
    if cfg.direct {
        oo.custom_flags(libc::O_DIRECT);
    }
    let f = oo.open(&target.path)?;
    if !cfg.readahead && !cfg.direct {
        fadvise(&f, 0, 0, libc::POSIX_FADV_RANDOM)?;
    }
    Ok(f)
}

/// `pread-loop` (`prefetch == 0`) or `fadvise-prefetch` (`prefetch` hints
/// kept ahead of the read).
pub fn pread_loop(
    cfg: &ScanConfig,
    target: &Target,
    blocks: &[u64],
    run: usize,
    prefetch: usize,
) -> io::Result<RunResult> {
    let f = open_plain(cfg, target)?;
    let bs = cfg.block_size;
    let mut buf = AlignedBuf::new(bs);
    let resident = target.prepare(cfg.cache, cfg.direct)?;
    let mut ck = Checksum::default();
    let mut hints = 0u64;
    let mut next_hint = 0usize;
    let timer = Timer::start(target);
    for (i, &b) in blocks.iter().enumerate() {
        if prefetch > 0 {
            // Keep hints for blocks i+1 ..= i+prefetch issued.
            next_hint = next_hint.max(i + 1);
            while next_hint < blocks.len() && next_hint <= i + prefetch {
                fadvise(
                    &f,
                    blocks[next_hint] * bs as u64,
                    bs as u64,
                    libc::POSIX_FADV_WILLNEED,
                )?;
                hints += 1;
                next_hint += 1;
            }
        }
        let page = buf.as_mut_slice();
        f.read_exact_at(page, b * bs as u64)?;
        ck.add(b, page);
    }
    let mut r = RunResult::from_checksum(cfg, run, ck, timer.stop(), resident);
    r.reads = Some(blocks.len() as u64);
    r.mean_blocks_per_read = Some(1.0);
    r.max_in_flight = Some(1);
    if prefetch > 0 {
        r.extra.insert("advice".into(), json!(hints));
    }
    Ok(r)
}

/// `tokio-fs`: a current-thread tokio runtime (`tokio::fs` does its I/O on
/// the blocking pool either way), `seek` + `read_exact` per block.
pub fn tokio_fs(
    cfg: &ScanConfig,
    target: &Target,
    blocks: &[u64],
    run: usize,
) -> io::Result<RunResult> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    rt.block_on(async {
        let std = File::open(&target.path)?;
        if !cfg.readahead {
            fadvise(&std, 0, 0, libc::POSIX_FADV_RANDOM)?;
        }
        let mut f = tokio::fs::File::from_std(std);
        let bs = cfg.block_size;
        let mut page = vec![0u8; bs];
        // Start tokio's blocking pool outside the timing.
        f.read_exact(&mut page).await?;
        let resident = target.prepare(cfg.cache, false)?;
        let mut ck = Checksum::default();
        let timer = Timer::start(target);
        for &b in blocks {
            f.seek(io::SeekFrom::Start(b * bs as u64)).await?;
            f.read_exact(&mut page).await?;
            ck.add(b, &page);
        }
        let mut r = RunResult::from_checksum(cfg, run, ck, timer.stop(), resident);
        r.reads = Some(blocks.len() as u64);
        r.mean_blocks_per_read = Some(1.0);
        r.max_in_flight = Some(1);
        Ok(r)
    })
}

/// `glommio-stream`: glommio's `DmaStreamReader` (forward) or
/// `DmaFile::read_many` (other patterns) on an executor whose `io_memory`
/// fits `RLIMIT_MEMLOCK` (`pagestream_glommio::make_executor`).
pub fn glommio_stream(
    cfg: &ScanConfig,
    target: &Target,
    blocks: &[u64],
    run: usize,
) -> io::Result<RunResult> {
    use crate::pattern::Pattern;
    use futures::StreamExt;
    use glommio::io::{DmaFile, DmaStreamReaderBuilder, MergedBufferLimit, ReadAmplificationLimit};
    std::thread::scope(|s| {
        s.spawn(|| -> io::Result<RunResult> {
            let ex = pagestream_glommio::make_executor()?;
            ex.run(async {
                let bs = cfg.block_size;
                let file = DmaFile::open(&target.path).await.map_err(io::Error::from)?;
                let depth = cfg.max_ios.max(1);
                let chunk = bs * cfg.combine;
                let resident = target.prepare(cfg.cache, true)?;
                let mut ck = Checksum::default();
                let timer;
                let api;
                let reads: Option<u64>;
                if cfg.pattern == Pattern::Forward {
                    api = "DmaStreamReader";
                    let mut reader = DmaStreamReaderBuilder::new(file)
                        .with_read_ahead(depth)
                        .with_buffer_size(chunk)
                        .with_end_pos(target.nblocks * bs as u64)
                        .build();
                    timer = Timer::start(target);
                    for &b in blocks {
                        let page = reader
                            .get_buffer_aligned(bs as u64)
                            .await
                            .map_err(io::Error::from)?;
                        if page.len() != bs {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                format!("short read of block {b}"),
                            ));
                        }
                        ck.add(b, &page);
                    }
                    reads = Some((blocks.len() as u64 * bs as u64).div_ceil(chunk as u64));
                    reader.close().await.map_err(io::Error::from)?;
                } else {
                    api = "read_many";
                    let file = std::rc::Rc::new(file);
                    let iovs = futures::stream::iter(blocks.iter().map(|&b| (b * bs as u64, bs)));
                    timer = Timer::start(target);
                    let mut results = file
                        .read_many(
                            iovs,
                            MergedBufferLimit::Custom(chunk),
                            ReadAmplificationLimit::NoAmplification,
                        )
                        .with_concurrency(depth);
                    while let Some(r) = results.next().await {
                        let ((pos, _), page) = r.map_err(io::Error::from)?;
                        ck.add(pos / bs as u64, &page);
                    }
                    // The merged requests read_many issued are not visible
                    // through its API.
                    reads = None;
                }
                let mut r = RunResult::from_checksum(cfg, run, ck, timer.stop(), resident);
                if let Some(n) = reads {
                    r.reads = Some(n);
                    r.mean_blocks_per_read = Some(ck.pages as f64 / n.max(1) as f64);
                }
                r.extra.insert("glommio_api".into(), json!(api));
                r.extra.insert("read_ahead".into(), json!(depth));
                Ok(r)
            })
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The requests of the baselines that read through io_uring themselves,
/// (first block, blocks) each: a forward scan's blocks (0..n) in requests
/// of `io_combine_limit` blocks (fio's `bs`, pagestream's combined reads),
/// the other patterns' one block a request. Returns them with the blocks
/// per request and how many requests are in flight at most.
fn requests(cfg: &ScanConfig, blocks: &[u64]) -> (Vec<(u64, usize)>, usize, usize) {
    let per = if cfg.pattern == crate::pattern::Pattern::Forward {
        cfg.combine.max(1)
    } else {
        1
    };
    let requests: Vec<(u64, usize)> = blocks.chunks(per).map(|c| (c[0], c.len())).collect();
    let depth = cfg.max_ios.max(1).min(requests.len().max(1));
    (requests, per, depth)
}

/// `r` with what a baseline of [`requests`] did: `reads` requests of
/// `request_bytes`, at most `depth` in flight, from `tasks` tasks.
fn with_requests(
    mut r: RunResult,
    reads: u64,
    depth: usize,
    tasks: usize,
    request_bytes: usize,
) -> RunResult {
    r.reads = Some(reads);
    r.mean_blocks_per_read = Some(r.blocks as f64 / reads.max(1) as f64);
    r.max_in_flight = Some(depth as u64);
    r.extra.insert("tasks".into(), json!(tasks));
    r.extra.insert("request_bytes".into(), json!(request_bytes));
    r
}

/// `tokio-uring-fs`: see the module docs. tokio-uring's runtime panics
/// where io_uring is unavailable, so the ring is probed first
/// (`pagestream_uring::probe`, an error naming the cause).
pub fn tokio_uring_fs(
    cfg: &ScanConfig,
    target: &Target,
    blocks: &[u64],
    run: usize,
) -> io::Result<RunResult> {
    use std::cell::Cell;
    use std::rc::Rc;
    use tokio_uring::buf::BoundedBuf;
    pagestream_uring::probe()?;
    let bs = cfg.block_size;
    let (requests, per, depth) = requests(cfg, blocks);
    std::thread::scope(|s| {
        s.spawn(|| -> io::Result<RunResult> {
            let requests = Rc::new(requests);
            tokio_uring::start(async {
                let mut oo = tokio_uring::fs::OpenOptions::new();
                oo.read(true);
                if cfg.direct {
                    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut oo, libc::O_DIRECT);
                }
                let file = Rc::new(oo.open(&target.path).await?);
                if !cfg.readahead && !cfg.direct {
                    fadvise(&*file, 0, 0, libc::POSIX_FADV_RANDOM)?;
                }
                // One buffer per task, touched now (a fresh allocation is
                // lazily mapped), and one read to start the ring, outside
                // the timing.
                let mut bufs: Vec<AlignedBuf> = (0..depth)
                    .map(|_| {
                        let mut b = AlignedBuf::new(bs * per);
                        b.as_mut_slice().fill(0);
                        b
                    })
                    .collect();
                let first = bufs.pop().expect("depth >= 1");
                let (res, first) = file.read_exact_at(first.slice(..bs), 0).await;
                res?;
                bufs.push(first.into_inner());
                let resident = target.prepare(cfg.cache, cfg.direct)?;
                let next = Rc::new(Cell::new(0usize));
                let timer = Timer::start(target);
                let tasks: Vec<_> = bufs
                    .into_iter()
                    .map(|mut buf| {
                        let (file, next, requests) =
                            (Rc::clone(&file), Rc::clone(&next), Rc::clone(&requests));
                        tokio_uring::spawn(async move {
                            let mut ck = Checksum::default();
                            let mut reads = 0u64;
                            loop {
                                let i = next.get();
                                let Some(&(b, n)) = requests.get(i) else {
                                    return Ok::<_, io::Error>((ck, reads));
                                };
                                next.set(i + 1);
                                let len = n * bs;
                                let (res, slice) =
                                    file.read_exact_at(buf.slice(..len), b * bs as u64).await;
                                buf = slice.into_inner();
                                res.map_err(|e| {
                                    io::Error::new(e.kind(), format!("block {b}: {e}"))
                                })?;
                                let data = &buf.as_mut_slice()[..len];
                                for (k, page) in data.chunks_exact(bs).enumerate() {
                                    ck.add(b + k as u64, page);
                                }
                                reads += 1;
                            }
                        })
                    })
                    .collect();
                let mut ck = Checksum::default();
                let mut reads = 0u64;
                for t in tasks {
                    let (c, n) = t.await.map_err(io::Error::other)??;
                    ck.merge(c);
                    reads += n;
                }
                let r = RunResult::from_checksum(cfg, run, ck, timer.stop(), resident);
                Ok(with_requests(r, reads, depth, depth, bs * per))
            })
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The reads a `bare-uring-tokio` run has handed to the ring, with the ring,
/// the file and the buffers they read into. Its drop waits for every read
/// still in flight (submitting any a failed `submit` left queued) before
/// the buffers and the file go (a read that failed the scan, or a panic,
/// leaves some), and leaks the buffers if the kernel refuses to wait.
struct BareRing {
    ring: io_uring::IoUring,
    bufs: Vec<AlignedBuf>,
    in_flight: usize,
    /// Dropped after `drop` has waited: a read still queued names its
    /// descriptor.
    file: std::fs::File,
}

impl Drop for BareRing {
    fn drop(&mut self) {
        let mut failures = 0;
        while self.in_flight > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => failures = 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) if failures < 100 => failures += 1,
                Err(_) => {
                    // The kernel may still write into them: never free them.
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    return;
                }
            }
            self.in_flight -= self.ring.completion().count();
        }
    }
}

/// The ring's descriptor as tokio's reactor sees it: a duplicate it owns,
/// open for as long as it is registered whenever the ring is closed.
struct RingFd(std::os::fd::OwnedFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// `bare-uring-tokio`: the least a tokio program does to read through
/// io_uring, the floor under any engine that learns of completions from
/// tokio's reactor (as pagestream's `uring-tokio` does). One task, spawned
/// on a multi-thread runtime of `--workers` workers, owns a ring and
/// `max_ios` buffers: it submits a read (`io_uring_enter`) as soon as a
/// buffer is free, takes the completions from the queue itself and, when
/// none is there, awaits the ring's descriptor in tokio's reactor
/// (`AsyncFd`, `epoll`). No pool, no stream, no second task. Requests as in
/// `tokio-uring-fs`.
pub fn bare_uring_tokio(
    cfg: &ScanConfig,
    target: &Target,
    blocks: &[u64],
    run: usize,
) -> io::Result<RunResult> {
    use io_uring::{opcode, types};
    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;
    pagestream_uring::probe()?;
    let bs = cfg.block_size;
    let (requests, per, depth) = requests(cfg, blocks);
    let mut oo = std::fs::OpenOptions::new();
    oo.read(true);
    if cfg.direct {
        oo.custom_flags(libc::O_DIRECT);
    }
    let file = oo
        .open(&target.path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", target.path.display())))?;
    if !cfg.readahead && !cfg.direct {
        fadvise(&file, 0, 0, libc::POSIX_FADV_RANDOM)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.workers)
        .enable_io()
        .build()?;
    let entries = u32::try_from(depth.next_power_of_two()).unwrap_or(4096);
    let mut bufs: Vec<AlignedBuf> = (0..depth).map(|_| AlignedBuf::new(bs * per)).collect();
    for b in &mut bufs {
        // A fresh allocation is mapped lazily: fault it in before the timing.
        b.as_mut_slice().fill(1);
    }
    let ring = io_uring::IoUring::new(entries)?;
    // SAFETY: the ring's descriptor is open for as long as `ring`, alive
    // here.
    let ring_fd =
        unsafe { std::os::fd::BorrowedFd::borrow_raw(ring.as_raw_fd()) }.try_clone_to_owned()?;
    let mut state = BareRing {
        ring,
        bufs,
        in_flight: 0,
        file,
    };
    let resident = target.prepare(cfg.cache, cfg.direct)?;
    let reads = requests.len() as u64;
    let timer = Timer::start(target);
    let scan = async move {
        // SAFETY: the registered descriptor is `ring_fd`, which the
        // `AsyncFd` owns: it stays open until the `AsyncFd` is dropped,
        // after tokio deregistered it.
        let afd = unsafe { AsyncFd::register_with_interest(RingFd(ring_fd), Interest::READABLE) }?;
        // Which request each buffer is reading.
        let mut reading = vec![0usize; depth];
        let mut free: Vec<usize> = (0..depth).rev().collect();
        let (mut next, mut done) = (0, 0);
        let mut ck = Checksum::default();
        while done < requests.len() {
            while next < requests.len() {
                let Some(i) = free.pop() else { break };
                let (b, n) = requests[next];
                let buf = state.bufs[i].as_mut_slice();
                let fd = types::Fd(state.file.as_raw_fd());
                let sqe = opcode::Read::new(fd, buf.as_mut_ptr(), (n * bs) as u32)
                    .offset(b * bs as u64)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the SQE reads into buffer `i`, which no other read
                // uses until its completion is taken (it is off `free`), and
                // which `state` keeps until every read in flight completed
                // (`BareRing`'s drop, on every path out of this task, a
                // panic's too), and so does the file the read names.
                unsafe { state.ring.submission().push(&sqe) }
                    .map_err(|_| io::Error::other("bare-uring-tokio: submission queue full"))?;
                state.in_flight += 1;
                reading[i] = next;
                next += 1;
                state.ring.submit()?;
            }
            let mut took = 0;
            while let Some(cqe) = state.ring.completion().next() {
                state.in_flight -= 1;
                took += 1;
                let i = cqe.user_data() as usize;
                let (b, n) = requests[reading[i]];
                let want = n * bs;
                match usize::try_from(cqe.result()) {
                    Ok(got) if got == want => {}
                    Ok(got) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("block {b}: read {got} of {want} bytes"),
                        ))
                    }
                    Err(_) => {
                        let e = io::Error::from_raw_os_error(-cqe.result());
                        return Err(io::Error::new(e.kind(), format!("block {b}: {e}")));
                    }
                }
                for (k, page) in state.bufs[i].as_mut_slice()[..want]
                    .chunks_exact(bs)
                    .enumerate()
                {
                    ck.add(b + k as u64, page);
                }
                free.push(i);
                done += 1;
            }
            if took == 0 {
                // Readiness is cleared before the queue is looked at again:
                // a completion posted after that look wakes this again.
                afd.readable().await?.clear_ready();
            }
        }
        drop(afd);
        Ok::<_, io::Error>((ck, state))
    };
    let (ck, state) = match rt.block_on(rt.spawn(scan)) {
        Ok(done) => done?,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => return Err(io::Error::other(format!("bare-uring-tokio: {e}"))),
    };
    let timed = timer.stop();
    drop(state);
    let mut r = with_requests(
        RunResult::from_checksum(cfg, run, ck, timed, resident),
        reads,
        depth,
        1,
        bs * per,
    );
    r.extra.insert("workers".into(), json!(cfg.workers));
    Ok(r)
}
