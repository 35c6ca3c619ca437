//! A file stored as segments (PostgreSQL's `16384`, `16384.1`, …): the
//! conformance suite over segmented in-memory files, reads that never span
//! two segments while look-ahead runs across them, and errors for pieces of
//! the wrong size.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::segmented::{segment_paths, Segmented, SegmentedFile};
use pagestream::testing::conformance::{run_all, Harness};
use pagestream::testing::{stamp, Delayed, MemEngine, MemFile, ThreadTimer};
use pagestream::{
    source, BlockSource, BufferPool, EngineFile, FileId, IoEngine, ReadRequest, ReadStream,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Splits a stamped logical file of `nblocks` into pieces of `seg_blocks`.
fn pieces(mem: &MemEngine, seed: u64, nblocks: u64, seg_blocks: u64, bs: usize) -> Vec<MemFile> {
    pieces_with_tail(mem, seed, nblocks, seg_blocks, bs, 0)
}

/// As [`pieces`], the logical file followed by `tail` bytes of block
/// `nblocks`'s stamp.
fn pieces_with_tail(
    mem: &MemEngine,
    seed: u64,
    nblocks: u64,
    seg_blocks: u64,
    bs: usize,
    tail: usize,
) -> Vec<MemFile> {
    let mut bytes: Vec<u8> = (0..nblocks)
        .flat_map(|b| stamp::page(seed, b, bs))
        .collect();
    bytes.extend_from_slice(&stamp::page(seed, nblocks, bs)[..tail]);
    let seg = seg_blocks as usize * bs;
    let mut out: Vec<MemFile> = bytes.chunks(seg).map(|c| mem.create(c.to_vec())).collect();
    if out.is_empty() {
        out.push(mem.create(Vec::new()));
    }
    out
}

/// Segments of 7 blocks: boundaries fall inside every combined read.
struct Segments(MemEngine);

impl Harness for Segments {
    type Engine = Segmented<MemEngine>;
    fn engine(&self) -> Segmented<MemEngine> {
        Segmented::new(self.0.clone())
    }
    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (SegmentedFile<MemFile>, u64) {
        let seed = 0x5e6 ^ nblocks;
        let file = SegmentedFile::new(
            pieces(&self.0, seed, nblocks, 7, block_size),
            7 * block_size as u64,
        )
        .unwrap();
        (file, seed)
    }
    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (SegmentedFile<MemFile>, u64) {
        let seed = 0x7a11 ^ nblocks;
        let file = SegmentedFile::new(
            pieces_with_tail(&self.0, seed, nblocks, 7, block_size, tail),
            7 * block_size as u64,
        )
        .unwrap();
        (file, seed)
    }
    fn name(&self) -> String {
        "segmented(7 blocks)".into()
    }
}

#[test]
fn conformance_segmented() {
    block_on(run_all(&Segments(MemEngine::new())));
}

/// Records every read the inner engine is asked for: (piece id, offset,
/// bytes); the reads take a round trip, so that the consumer waits and the
/// look-ahead deepens.
#[derive(Clone)]
struct Recording {
    mem: Delayed<MemEngine>,
    log: Arc<Mutex<Vec<(FileId, u64, usize)>>>,
}

impl IoEngine for Recording {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        self.log
            .lock()
            .unwrap()
            .push((file.id(), req.offset(), req.len_bytes()));
        self.mem.start_read(file, req);
    }
    fn name(&self) -> &'static str {
        "recording"
    }
}

/// What a scan saw: blocks in order, the inner reads, stats, piece ids.
type Scanned = (
    Vec<u64>,
    Vec<(FileId, u64, usize)>,
    pagestream::StreamStats,
    Vec<FileId>,
);

fn scan<S: BlockSource<Data = ()>>(nblocks: u64, seg_blocks: u64, src: S) -> Scanned {
    let bs = 8192;
    let mem = MemEngine::new();
    let segs: Vec<MemFile> = pieces(&mem, 3, nblocks, seg_blocks, bs)
        .into_iter()
        .map(|f| f.with_kernel_readahead(false))
        .collect();
    let ids: Vec<FileId> = segs.iter().map(|s| s.id()).collect();
    let file = SegmentedFile::new(segs, seg_blocks * bs as u64).unwrap();
    let rec = Recording {
        mem: Delayed::new(mem, Arc::new(ThreadTimer::new()), Duration::from_micros(50)),
        log: Arc::default(),
    };
    let pool = BufferPool::new(256, bs).unwrap();
    let mut stream = ReadStream::builder(&pool, Segmented::new(rec.clone()), file)
        .max_ios(8)
        .io_combine_limit(16)
        .build(src)
        .unwrap();
    let blocks = block_on(async {
        let mut seen = Vec::new();
        while let Some(page) = stream.next().await {
            let page = page.unwrap();
            assert!(
                stamp::check(3, page.block(), &page),
                "block {} holds the wrong bytes",
                page.block()
            );
            seen.push(page.block());
        }
        seen
    });
    let log = rec.log.lock().unwrap().clone();
    (blocks, log, stream.stats(), ids)
}

#[test]
fn reads_stop_at_boundaries_and_look_ahead_crosses_them() {
    let (seg, n) = (40u64, 130u64);
    let (blocks, log, stats, ids) = scan(n, seg, source::forward(0..n));
    assert_eq!(blocks, (0..n).collect::<Vec<_>>());
    let bs = 8192u64;
    assert!(!log.is_empty());
    for &(id, off, len) in &log {
        let piece = ids.iter().position(|&i| i == id).unwrap() as u64;
        let piece_len = (n - piece * seg).min(seg) * bs;
        assert!(
            off + len as u64 <= piece_len,
            "read of {len} bytes at {off} runs past the end of piece {piece} ({piece_len} bytes)"
        );
    }
    // Pieces of 40 blocks and reads of at most 16: 3 + 3 + 3 + 1 reads at
    // least, and combining still works inside each piece.
    assert!(stats.reads >= 10, "{stats}");
    assert!(stats.blocks_read == n, "{stats}");
    assert!(stats.max_blocks_per_read == 16, "{stats}");
    // Look-ahead is not stopped by a boundary: it reached further than one
    // segment.
    assert!(stats.max_distance > seg, "{stats}");
}

#[test]
fn backward_runs_are_combined_per_segment() {
    let (seg, n) = (20u64, 60u64);
    let (blocks, log, stats, _) = scan(n, seg, source::backward(0..n));
    assert_eq!(blocks, (0..n).rev().collect::<Vec<_>>());
    assert!(stats.backward_reads > 0, "{stats}");
    // No read crosses a multiple of 20 blocks.
    // Offsets are relative to a piece, so no read crosses a multiple of 20
    // blocks if each ends inside its piece.
    for &(_, off, len) in &log {
        let last = (off + len as u64 - 1) / 8192;
        assert!(last < seg, "read {off}+{len} ends past its piece");
    }
}

#[test]
fn a_short_middle_segment_is_an_error_naming_it() {
    let mem = MemEngine::new();
    let bs = 8192;
    let mut segs = pieces(&mem, 1, 30, 10, bs);
    segs[1] = mem.create(vec![0; 9 * bs]);
    let file = SegmentedFile::new(segs, 10 * bs as u64).unwrap();
    let pool = BufferPool::new(64, bs).unwrap();
    let err = ReadStream::builder(&pool, Segmented::new(mem), file)
        .build(source::forward(0..30))
        .unwrap_err()
        .to_string();
    assert!(err.contains("segment 1 of 3"), "{err}");
}

#[test]
fn segment_size_must_be_whole_blocks() {
    let mem = MemEngine::new();
    let file = SegmentedFile::new(vec![mem.create(vec![0; 8192])], 12288).unwrap();
    let pool = BufferPool::new(64, 8192).unwrap();
    let err = ReadStream::builder(&pool, Segmented::new(mem.clone()), file)
        .build(source::forward(0..1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("segment size 12288"), "{err}");
    assert!(SegmentedFile::<MemFile>::new(Vec::new(), 8192).is_err());
    assert!(SegmentedFile::new(vec![mem.create(vec![0; 8192])], 0).is_err());
}

#[test]
fn segment_paths_follow_postgres_naming() {
    let dir = std::env::temp_dir().join(format!("pagestream-segpaths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = dir.join("16384");
    for p in ["16384", "16384.1", "16384.2", "16384.4"] {
        std::fs::write(dir.join(p), b"").unwrap();
    }
    let paths = segment_paths(&first).unwrap();
    let names: Vec<_> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // `.3` is missing, so `.4` is not part of the relation.
    assert_eq!(names, ["16384", "16384.1", "16384.2"]);
    let missing = segment_paths(&dir.join("nope")).unwrap_err().to_string();
    assert!(missing.contains("nope"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Queues every read and does them only when a stream asks for help with
/// the file they are of (as the thread pool's cached-read queue does, with
/// no thread of its own): records the file of every `help` call.
#[derive(Clone, Default)]
struct HelpOnly {
    mem: MemEngine,
    queued: Arc<Mutex<Vec<(MemFile, ReadRequest)>>>,
    helped: Arc<Mutex<Vec<FileId>>>,
}

impl IoEngine for HelpOnly {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        self.queued.lock().unwrap().push((file.clone(), req));
    }
    fn hints(&self, _file: &MemFile) -> pagestream::EngineHints {
        pagestream::EngineHints::new().with_help(true)
    }
    fn help(&self, file: &MemFile) -> bool {
        self.helped.lock().unwrap().push(file.id());
        let job = {
            let mut q = self.queued.lock().unwrap();
            let i = q.iter().position(|(f, _)| f.id() == file.id());
            i.map(|i| q.remove(i))
        };
        match job {
            Some((f, req)) => {
                self.mem.start_read(&f, req);
                true
            }
            None => false,
        }
    }
    fn name(&self) -> &'static str {
        "help-only"
    }
}

#[test]
fn reads_of_every_segment_are_helped() {
    use futures::task::noop_waker_ref;
    use futures::Stream;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    let (bs, seg, n) = (8192, 4u64, 12u64);
    let engine = HelpOnly::default();
    let segs = pieces(&engine.mem, 9, n, seg, bs);
    let ids: Vec<FileId> = segs.iter().map(|s| s.id()).collect();
    let file = SegmentedFile::new(segs, seg * bs as u64).unwrap();
    let pool = BufferPool::new(64, bs).unwrap();
    let mut stream = ReadStream::builder(&pool, Segmented::new(engine.clone()), file)
        .max_ios(2)
        .io_combine_limit(2)
        .build(source::forward(0..n))
        .unwrap();
    let mut cx = Context::from_waker(noop_waker_ref());
    let mut seen = Vec::new();
    // Nothing but `help` does a read: a stream that returns `Pending` has
    // nothing left to wake it, so a few in a row mean it is stuck.
    let mut pending = 0;
    loop {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(Some(page)) => {
                let page = page.unwrap();
                assert!(
                    stamp::check(9, page.block(), &page),
                    "block {}",
                    page.block()
                );
                seen.push(page.block());
                pending = 0;
            }
            Poll::Ready(None) => break,
            Poll::Pending => {
                pending += 1;
                let helped = engine.helped.lock().unwrap().clone();
                assert!(
                    pending < 10,
                    "stuck after blocks {seen:?}: {} reads queued; help was offered only \
                     {helped:?} (pieces are {ids:?})",
                    engine.queued.lock().unwrap().len()
                );
            }
        }
    }
    assert_eq!(seen, (0..n).collect::<Vec<_>>());
    let helped = engine.helped.lock().unwrap().clone();
    for (i, id) in ids.iter().enumerate() {
        assert!(
            helped.contains(id),
            "piece {i} never offered to help: {helped:?}"
        );
    }
}
