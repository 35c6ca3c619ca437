//! Files stored as consecutive pieces: PostgreSQL relation segments.
//!
//! PostgreSQL stores a relation as segment files of 1 GiB: `16384`,
//! `16384.1`, `16384.2`, … . A scan of the relation is one scan: look-ahead
//! must run across a segment boundary without a pause, but no read can span
//! two files. [`Segmented`] wraps any engine so that a [`SegmentedFile`] —
//! the list of pieces — is one file to a stream:
//!
//! - Block numbers are logical: block `b` lives in piece
//!   `b / blocks_per_segment`. The file's length is the sum of the pieces'.
//! - The file declares its segment size ([`EngineFile::segment_bytes`]), and
//!   the planner ends a combined read at every multiple of it, so each read
//!   falls inside one piece; [`Segmented`] hands it to the inner engine with
//!   its offset made relative to that piece ([`ReadRequest::rebase`]).
//! - Every piece but the last must be exactly one segment long; a short or
//!   long middle piece is an error naming it when the stream is built,
//!   never a silently shifted block.
//!
//! ```
//! use futures::{executor::block_on, StreamExt};
//! use pagestream::segmented::{Segmented, SegmentedFile};
//! use pagestream::{source, testing::{stamp, MemEngine}, BufferPool, ReadStream};
//!
//! // A 40-block relation stored as segments of 16 blocks: 16 + 16 + 8.
//! let mem = MemEngine::new();
//! let bytes: Vec<u8> = (0..40).flat_map(|b| stamp::page(7, b, 8192)).collect();
//! let pieces = bytes.chunks(16 * 8192).map(|c| mem.create(c.to_vec())).collect();
//! let file = SegmentedFile::new(pieces, 16 * 8192)?;
//!
//! let pool = BufferPool::new(128, 8192)?;
//! let mut stream = ReadStream::builder(&pool, Segmented::new(mem), file)
//!     .build(source::forward(0..40))?;
//! block_on(async {
//!     while let Some(page) = stream.next().await {
//!         let page = page?;
//!         assert!(stamp::check(7, page.block(), &page));
//!     }
//!     Ok::<_, std::io::Error>(())
//! })?;
//! // Reads stop at the boundaries at blocks 16 and 32: at least three reads.
//! assert!(stream.stats().reads >= 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::engine::{EngineFile, EngineHints, FileId, IoEngine, ReadRequest};
use std::io;
use std::path::{Path, PathBuf};
// Plain std types (not `crate::sync`): nothing here is modelled by loom.
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// PostgreSQL's segment size with default build options (`RELSEG_SIZE`
/// 131072 blocks of 8 KiB): 1 GiB.
pub const PG_SEGMENT_BYTES: u64 = 1 << 30;

/// An engine that reads a [`SegmentedFile`] by passing each read to the
/// inner engine's file for the piece holding it. Clone it as the inner
/// engine clones.
#[derive(Debug, Clone)]
pub struct Segmented<E> {
    inner: E,
}

impl<E> Segmented<E> {
    /// Wraps `inner`.
    pub fn new(inner: E) -> Self {
        Segmented { inner }
    }

    /// The inner engine.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

/// One logical file stored as consecutive pieces of `segment_bytes` each
/// (the last may be shorter). Open the pieces with the inner engine.
#[derive(Debug, Clone)]
pub struct SegmentedFile<F> {
    segments: Vec<F>,
    segment_bytes: u64,
    /// Pieces with reads started through [`Segmented`] that have not ended,
    /// ascending, with how many each: the pieces whose reads
    /// [`IoEngine::help`] offers the inner engine. Shared by clones.
    busy: Arc<Mutex<Vec<(usize, usize)>>>,
}

impl<F: EngineFile> SegmentedFile<F> {
    /// A file made of `segments`, in order, each `segment_bytes` long but
    /// the last. The lengths are checked when a stream is built (the
    /// pieces' lengths are asked then); here only that there is at least
    /// one piece and the segment size is not zero.
    pub fn new(segments: Vec<F>, segment_bytes: u64) -> io::Result<Self> {
        if segments.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a segmented file needs at least one segment",
            ));
        }
        if segment_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "segment size must be at least 1 byte (got 0)",
            ));
        }
        Ok(SegmentedFile {
            segments,
            segment_bytes,
            busy: Arc::default(),
        })
    }

    /// The pieces, in order.
    pub fn segments(&self) -> &[F] {
        &self.segments
    }

    /// Bytes per piece (all but the last).
    pub fn segment_len(&self) -> u64 {
        self.segment_bytes
    }

    /// The piece holding logical byte `offset`, that piece's first byte and
    /// its index.
    fn locate(&self, offset: u64) -> Option<(&F, u64, usize)> {
        let i = offset / self.segment_bytes;
        let index = usize::try_from(i).ok()?;
        let seg = self.segments.get(index)?;
        Some((seg, i * self.segment_bytes, index))
    }
}

fn lock_busy(busy: &Mutex<Vec<(usize, usize)>>) -> MutexGuard<'_, Vec<(usize, usize)>> {
    busy.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts a read of piece `seg` starting.
fn busy_enter(busy: &Mutex<Vec<(usize, usize)>>, seg: usize) {
    let mut b = lock_busy(busy);
    match b.binary_search_by_key(&seg, |&(s, _)| s) {
        Ok(i) => b[i].1 += 1,
        Err(i) => b.insert(i, (seg, 1)),
    }
}

/// Counts a read of piece `seg` ending.
fn busy_leave(busy: &Mutex<Vec<(usize, usize)>>, seg: usize) {
    let mut b = lock_busy(busy);
    if let Ok(i) = b.binary_search_by_key(&seg, |&(s, _)| s) {
        b[i].1 -= 1;
        if b[i].1 == 0 {
            b.remove(i);
        }
    }
}

impl<F: EngineFile> EngineFile for SegmentedFile<F> {
    /// The first piece's id: pieces are never streamed on their own.
    fn id(&self) -> FileId {
        self.segments[0].id()
    }

    fn byte_len(&self) -> io::Result<u64> {
        let last = self.segments.len() - 1;
        let mut total = 0u64;
        for (i, seg) in self.segments.iter().enumerate() {
            let len = seg.byte_len()?;
            if (i < last && len != self.segment_bytes) || len > self.segment_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "segment {i} of {} is {len} bytes; {} must be {} bytes",
                        self.segments.len(),
                        if i < last {
                            "every segment but the last"
                        } else {
                            "no segment can be longer than"
                        },
                        self.segment_bytes
                    ),
                ));
            }
            total += len;
        }
        Ok(total)
    }

    fn kernel_readahead(&self) -> bool {
        self.segments[0].kernel_readahead()
    }

    /// The first piece's path: it names the relation.
    fn path(&self) -> Option<&Path> {
        self.segments[0].path()
    }

    fn segment_bytes(&self) -> Option<u64> {
        Some(self.segment_bytes)
    }
}

#[deny(clippy::missing_trait_methods)]
impl<E: IoEngine> IoEngine for Segmented<E> {
    type File = SegmentedFile<E::File>;

    fn start_read(&self, file: &Self::File, mut req: ReadRequest) {
        // The planner never lets a read cross a segment boundary, so the
        // piece holding its first byte holds all of it.
        match file.locate(req.offset()) {
            Some((seg, origin, index)) => {
                req.rebase(origin);
                // Counted until the read (with its remainders) ends, however
                // it ends, so `help` knows which pieces have reads to do.
                busy_enter(&file.busy, index);
                let busy = Arc::clone(&file.busy);
                req.on_finish(move |_| busy_leave(&busy, index));
                self.inner.start_read(seg, req);
            }
            None => {
                let offset = req.offset();
                let rest = req.complete(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("offset {offset} is past the last segment"),
                )));
                debug_assert!(rest.is_none());
            }
        }
    }

    /// The first piece's: every piece is a file of the same kind.
    fn hints(&self, file: &Self::File) -> EngineHints {
        self.inner.hints(&file.segments[0])
    }

    fn help(&self, file: &Self::File) -> bool {
        // The stream may be waiting for a read of any piece: offer the inner
        // engine each piece with reads outstanding, lowest first (a forward
        // scan waits for the lowest), until it does one. The lock is not
        // held while the inner engine works: the read it does ends here,
        // and its hook takes the lock.
        let mut after = None;
        loop {
            let next = lock_busy(&file.busy)
                .iter()
                .map(|&(seg, _)| seg)
                .find(|&seg| after.is_none_or(|a| seg > a));
            let Some(seg) = next else {
                return false;
            };
            if self.inner.help(&file.segments[seg]) {
                return true;
            }
            after = Some(seg);
        }
    }

    /// Advises each piece the range covers; taken if every piece took it.
    fn advise(&self, file: &Self::File, mut offset: u64, mut len: u64) -> bool {
        let mut taken = true;
        while len > 0 {
            let Some((seg, origin, _)) = file.locate(offset) else {
                return false;
            };
            let here = len.min(origin + file.segment_bytes - offset);
            taken &= self.inner.advise(seg, offset - origin, here);
            offset += here;
            len -= here;
        }
        taken
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// The paths of a relation's pieces, PostgreSQL-style: `first`, then
/// `first.1`, `first.2`, … for as long as they exist.
///
/// ```no_run
/// let paths = pagestream::segmented::segment_paths("base/5/16384".as_ref())?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn segment_paths(first: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::metadata(first)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", first.display())))?;
    let mut paths = vec![first.to_path_buf()];
    for n in 1u64.. {
        let mut name = first.as_os_str().to_owned();
        name.push(format!(".{n}"));
        let p = PathBuf::from(name);
        if !p.exists() {
            break;
        }
        paths.push(p);
    }
    Ok(paths)
}
