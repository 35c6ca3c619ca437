//! The engine contract: how a runtime's I/O plugs into a stream.
//!
//! An [`IoEngine`] performs positional reads into pool frames. The stream
//! hands it a [`ReadRequest`], which *owns* the frames it covers until the
//! engine calls [`ReadRequest::complete`] (or drops the request). Ownership
//! passing makes the contract sound for io_uring, where the kernel writes
//! into the memory after the submitting future may be gone: frame memory
//! belongs to the pool's `Arc`, which the request holds, so it is never
//! freed under a read in flight, even if every stream and pool handle is
//! dropped.
//!
//! # Contract for implementors
//!
//! An engine must implement [`start_read`](IoEngine::start_read) and
//! [`name`](IoEngine::name); the other methods have defaults that are
//! right for an engine whose reads are truly asynchronous (no advice, no
//! queued reads, one full-sized read ahead when reads are cached). A read:
//!
//! - **Completes on its own.** `start_read` must not block on the device,
//!   and the engine must end every request it accepts, by calling
//!   [`complete`](ReadRequest::complete) (issuing any remainder it returns)
//!   or by dropping it, without the issuing stream being polled or even
//!   alive. `complete` marks the frames valid (or empty again, on error) and
//!   wakes every task waiting for them, so a second stream waiting for the
//!   block is never held up by the first stream's consumer.
//! - **Owns its frames until the kernel is done with them.** The buffers
//!   ([`buffers_mut`](ReadRequest::buffers_mut),
//!   [`raw_buffers`](ReadRequest::raw_buffers)) are valid, and the
//!   request's alone, until it is completed or dropped. An engine that hands
//!   them to the kernel keeps the request alive until the kernel has
//!   returned the operation, even when the stream is gone.
//! - **Reports short reads as they happen.** `complete(Ok(n))` with `n`
//!   short of [`len_bytes`](ReadRequest::len_bytes) publishes the whole
//!   blocks read and returns the rest as a new request (continuing at the
//!   exact byte), which the engine must issue like any other. The remainder
//!   keeps the original's read slot in the stream, so a descending run read
//!   as one ascending I/O is complete before its first (highest) page is
//!   handed out, and caps are never exceeded.
//! - **Reports end of file as `Ok(0)`.** It becomes
//!   [`ReadError::UnexpectedEof`] — except where the stream reads a partial
//!   last block as a short page
//!   ([`StreamBuilder::short_last_page`](crate::StreamBuilder::short_last_page)):
//!   a read that has filled that block up to the end of the file is
//!   complete, so engines report the short read at end of file as they would
//!   any other, and no remainder follows it.
//! - **Is cancelled by dropping it.** Dropping a request without completing
//!   it (a cancelled io_uring op whose buffer the runtime releases, an engine
//!   shutting down) returns its frames to EMPTY — never valid — and tells
//!   the issuing stream it was cancelled; other waiters retry the read
//!   themselves.
//! - **Survives panics.** A panic in `start_read` drops the request (a
//!   cancellation). `complete` runs the request's finish hooks; if one
//!   panics, the stream still hears that the read is over and the panic is
//!   resumed afterwards. An engine that completes reads on threads of its
//!   own catches panics there, so its threads survive them.
//!
//! What the engine tells the stream about a file is asked once, when the
//! stream is built ([`IoEngine::hints`], an [`EngineHints`]): whether
//! read-ahead advice helps, how many cached reads to keep in flight, whether
//! the engine can do queued reads in [`help`](IoEngine::help). Files say
//! whether the kernel reads ahead for them
//! ([`EngineFile::kernel_readahead`]); where it does not (O_DIRECT, network
//! storage), the planner keeps reads in flight itself for sequential runs
//! too.
//!
//! # Contract for wrappers
//!
//! A wrapper (an engine that passes reads on to another: latency, limits,
//! faults, [`Segmented`](crate::segmented::Segmented)) **must implement
//! every method** and forward what it does not change: a wrapper that
//! inherits a default silently changes what the wrapped engine does (no
//! advice, no help, different hints), so tests wrapped around an engine
//! would test a path users never run. Put
//! `#[deny(clippy::missing_trait_methods)]` on the wrapper's impl so a new
//! method cannot be missed. A wrapper may:
//!
//! - delay, reorder or limit reads, as long as each one still completes on
//!   its own;
//! - watch a read end with [`ReadRequest::on_finish`];
//! - change where a read lands ([`ReadRequest::rebase`]) when it stores one
//!   file as several;
//! - change the hints it forwards, when what it adds changes them (a
//!   wrapper adding latency may say the kernel no longer reads ahead).
//!
//! Test wrappers may also rewrite the result an engine reports
//! ([`ReadRequest::add_filter`], with the `testing` feature). None of this
//! costs a request anything when unused: the hooks and filters live in one
//! optional box.

use crate::error::ReadError;
use crate::stream::StreamShared;
use crate::sync::Arc;
use crate::BlockNumber;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most buffers [`ReadRequest::buffers_mut`] and
/// [`ReadRequest::raw_buffers`] return for one read: Linux's `IOV_MAX`, the
/// most a `preadv` or an io_uring `READV` takes.
pub const MAX_BUFFERS: usize = 1024;

/// Identifies a file in the pool's block map. Streams over the same file
/// must use the same id to share frames; different files need different ids.
///
/// An id keeps the whole identity it was made from, never a lossy digest of
/// it: ids made the same way from different values differ, and ids made in
/// different ways ([`new`](Self::new), [`from_dev_ino`](Self::from_dev_ino),
/// [`block_device`](Self::block_device), [`anonymous`](Self::anonymous),
/// [`keyed`](Self::keyed))
/// never equal each other. Use the id itself as a key (it is `Copy`, `Eq`,
/// `Ord` and `Hash`), for example in [`SyncScans`](crate::source::SyncScans).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(IdRepr);

/// The identity a [`FileId`] was made from; one variant per constructor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum IdRepr {
    /// Chosen by the caller.
    Raw(u64),
    /// A file on a file system: its device and inode numbers.
    DevIno { dev: u64, ino: u64 },
    /// A block device: the device number it stands for (`st_rdev`).
    BlockDevice(u64),
    /// An in-memory file: a process-wide serial number.
    Anonymous(u64),
    /// A file named by a key (an object's URL and version): the key's
    /// serial number in the process-wide key table.
    Keyed(u64),
}

/// Source of anonymous serial numbers (a plain std atomic: a process-wide
/// counter, outside anything loom models). Starts high so that the stamp
/// seeds [`MemEngine`](crate::testing::MemEngine) derives from them stay
/// clear of the small seeds tests pick by hand.
static NEXT_ANON: AtomicU64 = AtomicU64::new(1 << 63);

impl FileId {
    /// An id from a value chosen by the caller (a relation number, a key in
    /// the caller's own registry). Distinct values give distinct ids, and
    /// none equals an id made by another constructor.
    pub const fn new(raw: u64) -> FileId {
        FileId(IdRepr::Raw(raw))
    }

    /// An id for a file identified by device and inode number (what engines
    /// over files on a file system use). Distinct `(dev, ino)` pairs give
    /// distinct ids, whatever their values.
    pub const fn from_dev_ino(dev: u64, ino: u64) -> FileId {
        FileId(IdRepr::DevIno { dev, ino })
    }

    /// An id for a block device, by the device number it stands for
    /// (`st_rdev`), so every device node naming the same device shares
    /// pages.
    pub const fn block_device(rdev: u64) -> FileId {
        FileId(IdRepr::BlockDevice(rdev))
    }

    /// A fresh id no other call of `anonymous` returns (for in-memory files).
    pub fn anonymous() -> FileId {
        FileId(IdRepr::Anonymous(NEXT_ANON.fetch_add(1, Ordering::Relaxed)))
    }

    /// The id of the file named `key`: equal keys give the same id in the
    /// whole process, different keys different ids (each key is kept, not
    /// hashed: ids never collide). For files that have no device and inode,
    /// such as objects in object storage (the key is the object's URL and
    /// its version, so a changed object gets a new id and none of the old
    /// version's pages). Each distinct key is kept for the life of the
    /// process.
    pub fn keyed(key: &str) -> FileId {
        static KEYS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
            std::sync::OnceLock::new();
        let mut keys = KEYS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let next = keys.len() as u64;
        let n = *keys.entry(key.to_owned()).or_insert(next);
        FileId(IdRepr::Keyed(n))
    }

    /// The value given to [`new`](Self::new), if the id was made that way.
    pub const fn raw(self) -> Option<u64> {
        match self.0 {
            IdRepr::Raw(r) => Some(r),
            _ => None,
        }
    }

    /// The serial number of an [`anonymous`](Self::anonymous) id.
    #[cfg(any(feature = "testing", test))]
    pub(crate) const fn anonymous_serial(self) -> Option<u64> {
        match self.0 {
            IdRepr::Anonymous(n) => Some(n),
            _ => None,
        }
    }
}

impl From<u64> for FileId {
    /// [`FileId::new`].
    fn from(raw: u64) -> FileId {
        FileId::new(raw)
    }
}

/// Names the file for messages: `file 7`, `file dev 8:1 ino 1234`, `block
/// device 259:0`, `in-memory file 9223372036854775810`. Device numbers are
/// shown as `major:minor` in Linux's `dev_t` encoding.
impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IdRepr::Raw(r) => write!(f, "file {r}"),
            IdRepr::DevIno { dev, ino } => {
                let (ma, mi) = dev_parts(dev);
                write!(f, "file dev {ma}:{mi} ino {ino}")
            }
            IdRepr::BlockDevice(rdev) => {
                let (ma, mi) = dev_parts(rdev);
                write!(f, "block device {ma}:{mi}")
            }
            IdRepr::Anonymous(n) => write!(f, "in-memory file {n}"),
            IdRepr::Keyed(n) => write!(f, "keyed file {n}"),
        }
    }
}

/// `(major, minor)` of a `dev_t` in the encoding of glibc's `makedev`.
fn dev_parts(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// What a stream needs to know of an open file.
pub trait EngineFile {
    /// The file's id in the pool's map.
    fn id(&self) -> FileId;

    /// The file's length in bytes, asked once when a stream is built.
    fn byte_len(&self) -> io::Result<u64>;

    /// The file's length in blocks of `block_size` bytes: whole blocks and
    /// the bytes of a partial last one, so a length that is not a multiple
    /// of the block size cannot go unnoticed. Default: from
    /// [`byte_len`](Self::byte_len).
    fn block_count(&self, block_size: usize) -> io::Result<BlockCount> {
        Ok(BlockCount::of(self.byte_len()?, block_size))
    }

    /// Where the file is, for messages that must name it (a partial last
    /// block, a file that cannot be read). Default `None`: messages name
    /// the file by its [`id`](Self::id).
    fn path(&self) -> Option<&Path> {
        None
    }

    /// Whether the kernel reads ahead on sequential reads of this file
    /// (a buffered local file). `false` for O_DIRECT, network storage and
    /// simulated latency: the planner then looks ahead for sequential runs
    /// as it does for random ones.
    fn kernel_readahead(&self) -> bool {
        true
    }

    /// If the file is stored as consecutive pieces of this many bytes (a
    /// PostgreSQL relation's 1 GiB segment files; see
    /// [`Segmented`](crate::segmented::Segmented)), no read may cross a
    /// multiple of it: the planner ends a combined read at every boundary
    /// (look-ahead still runs across it). Must be a multiple of the block
    /// size. `None` (the default): one piece.
    fn segment_bytes(&self) -> Option<u64> {
        None
    }
}

/// A file's length in blocks: see [`EngineFile::block_count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCount {
    /// Whole blocks.
    pub full: u64,
    /// Bytes after the last whole block: a partial last block if not 0
    /// (always less than the block size).
    pub tail: usize,
}

impl BlockCount {
    /// The blocks of a file of `len` bytes.
    ///
    /// ```
    /// use pagestream::engine::BlockCount;
    /// let c = BlockCount::of(12345, 8192);
    /// assert_eq!((c.full, c.tail, c.blocks()), (1, 4153, 2));
    /// ```
    ///
    /// # Panics
    ///
    /// If `block_size` is 0.
    pub fn of(len: u64, block_size: usize) -> BlockCount {
        let bs = block_size as u64;
        BlockCount {
            full: len / bs,
            tail: (len % bs) as usize,
        }
    }

    /// Blocks holding any of the file's bytes: the whole ones and a partial
    /// last one.
    pub fn blocks(&self) -> u64 {
        self.full + u64::from(self.tail != 0)
    }
}

/// What an engine tells a stream about reading one file, asked once when
/// the stream is built ([`IoEngine::hints`]).
///
/// The default suits an engine whose reads are truly asynchronous: no
/// advice, one full-sized read ahead when reads are cached, no help, and
/// the stream's own defaults for read size and reads in flight.
///
/// ```
/// use pagestream::engine::{CachedReads, EngineHints};
/// let h = EngineHints::new().with_advice(true).with_cached_reads(CachedReads::InFlight(4));
/// assert!(h.advice && !h.help);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineHints {
    /// Read-ahead advice ([`IoEngine::advise`]) helps: true only for engines
    /// whose reads block a thread, on buffered files.
    pub advice: bool,
    /// How many full-sized reads a stream keeps in flight while the engine
    /// serves its reads from the OS page cache.
    pub cached_reads: CachedReads,
    /// The engine may queue reads that [`IoEngine::help`] can do on the
    /// polling thread; the stream calls `help` only if this is set.
    pub help: bool,
    /// The read size this engine works best with, in bytes: a stream whose
    /// caller did not set
    /// [`io_combine_limit`](crate::StreamBuilder::io_combine_limit) combines
    /// up to this many bytes (rounded down to whole blocks, at most
    /// [`MAX_IO_COMBINE_LIMIT`](crate::MAX_IO_COMBINE_LIMIT) blocks). Object
    /// storage wants megabytes per request. `None`: PostgreSQL's 16 blocks.
    pub read_bytes: Option<usize>,
    /// Reads in flight this engine works best with: a stream whose caller
    /// did not set [`max_ios`](crate::StreamBuilder::max_ios) keeps up to
    /// this many (at most [`MAX_IOS`](crate::MAX_IOS)). `None`: 16.
    pub reads_in_flight: Option<usize>,
    /// Whether a failed read of several blocks is retried block by block
    /// (the default: a local device fails a combined read for one bad
    /// block, and the others still read), or its error is handed out for
    /// every block it covered (`false`: a request that fails as a whole,
    /// after the engine's own retries, where a retry per block would cost
    /// a round trip each, such as a range GET).
    pub retry_blocks: bool,
    /// Streams look ahead their full distance as soon as they need I/O:
    /// every read a stream starts (and every block it finds another stream
    /// reading) raises its distance to the pin budget
    /// (`max_ios` reads of `io_combine_limit` blocks, as the pool allows),
    /// so the first round trip already has `max_ios` reads in flight,
    /// instead of PostgreSQL's ramp, which doubles the distance once per
    /// read it waits for and takes about `log2(budget)` round trips to get
    /// there — longer than a whole scan of a few hundred MiB when a round
    /// trip costs tens of milliseconds (object storage). Hits still lower
    /// the distance one by one (after the hold-off of the design
    /// document's §2), so a scan of cached pages takes the fast path. For engines that cancel abandoned reads: a consumer that stops
    /// early then costs little. Default `false`.
    pub full_look_ahead: bool,
}

impl Default for EngineHints {
    /// [`EngineHints::new`].
    fn default() -> Self {
        EngineHints::new()
    }
}

impl EngineHints {
    /// The default: no advice, [`CachedReads::One`], no help, the stream's
    /// read size and reads in flight, failed reads retried block by block.
    pub const fn new() -> Self {
        EngineHints {
            advice: false,
            cached_reads: CachedReads::One,
            help: false,
            read_bytes: None,
            reads_in_flight: None,
            retry_blocks: true,
            full_look_ahead: false,
        }
    }

    /// Sets [`retry_blocks`](Self::retry_blocks).
    #[must_use]
    pub const fn with_retry_blocks(mut self, on: bool) -> Self {
        self.retry_blocks = on;
        self
    }

    /// Sets [`full_look_ahead`](Self::full_look_ahead).
    #[must_use]
    pub const fn with_full_look_ahead(mut self, on: bool) -> Self {
        self.full_look_ahead = on;
        self
    }

    /// Sets [`read_bytes`](Self::read_bytes).
    #[must_use]
    pub const fn with_read_bytes(mut self, bytes: usize) -> Self {
        self.read_bytes = Some(bytes);
        self
    }

    /// Sets [`reads_in_flight`](Self::reads_in_flight).
    #[must_use]
    pub const fn with_reads_in_flight(mut self, reads: usize) -> Self {
        self.reads_in_flight = Some(reads);
        self
    }

    /// Sets [`advice`](Self::advice).
    #[must_use]
    pub const fn with_advice(mut self, on: bool) -> Self {
        self.advice = on;
        self
    }

    /// Sets [`cached_reads`](Self::cached_reads).
    #[must_use]
    pub const fn with_cached_reads(mut self, reads: CachedReads) -> Self {
        self.cached_reads = reads;
        self
    }

    /// Sets [`help`](Self::help).
    #[must_use]
    pub const fn with_help(mut self, on: bool) -> Self {
        self.help = on;
        self
    }
}

/// How many full-sized reads a stream keeps in flight while its reads are
/// served from the OS page cache ([`EngineHints::cached_reads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CachedReads {
    /// One read ahead of the consumer (the default): a read served from
    /// the page cache is only a copy, so more in flight buys nothing (see
    /// [`design`](crate::design)).
    #[default]
    One,
    /// This many: for an engine that copies cached reads on another thread
    /// in parallel with the consumer (and lets the consumer do queued ones
    /// itself, see [`IoEngine::help`]), so that thread always has one to
    /// take. The stream clamps it to `1..=`[`MAX_IOS`](crate::MAX_IOS).
    InFlight(usize),
}

impl CachedReads {
    /// The number of reads, clamped to `1..=`[`MAX_IOS`](crate::MAX_IOS).
    pub fn reads(self) -> usize {
        match self {
            CachedReads::One => 1,
            CachedReads::InFlight(n) => n.clamp(1, crate::MAX_IOS),
        }
    }
}

/// The binding to one runtime's I/O.
///
/// Implementations must complete every request they accept, by calling
/// [`ReadRequest::complete`] (and issuing any remainder it returns) or by
/// dropping it. See the [module docs](self) for the contract, for
/// implementors and for wrappers (which must implement every method).
pub trait IoEngine {
    /// The engine's handle on an open file.
    type File: EngineFile;

    /// Starts reading `req.len_bytes()` bytes at `req.offset()` of `file`
    /// into `req`'s buffers. Must not block on the device.
    fn start_read(&self, file: &Self::File, req: ReadRequest);

    /// What the stream should know about reading `file`, asked once when a
    /// stream is built. Default: [`EngineHints::new`].
    fn hints(&self, file: &Self::File) -> EngineHints {
        let _ = file;
        EngineHints::new()
    }

    /// Advice: the `len` bytes at `offset` will be read soon (whole
    /// blocks). Asked only if [`EngineHints::advice`] is set: for a read,
    /// right before starting it (if the advice was taken, the read starts
    /// with [`ReadRequest::is_advised`] set), and for a descending scan's
    /// read-ahead window below its reads, after the read that reached it
    /// has started (see
    /// [`StreamBuilder::backward_readahead`](crate::StreamBuilder::backward_readahead)).
    /// Returns whether the advice was taken. Default: not taken.
    fn advise(&self, file: &Self::File, offset: u64, len: u64) -> bool {
        let _ = (file, offset, len);
        false
    }

    /// The stream polling on this thread is about to wait for one of its
    /// reads on `file`: an engine that queued reads for a thread of its own
    /// may perform one of them here instead, so the consumer never waits
    /// for a thread that has not started yet. Only reads on `file` (the
    /// stream's own, or other streams' reads of the same file it may be
    /// waiting for) may be done here, never other files': their hooks and
    /// filters would run inside this stream's poll. Returns whether it did
    /// any work (the stream then looks at its reads again before it waits).
    /// Called only if [`EngineHints::help`] is set. Must not block on the
    /// device. Default: does nothing.
    fn help(&self, file: &Self::File) -> bool {
        let _ = file;
        false
    }

    /// A short name for reports (`"threadpool"`, `"tokio-uring"`, …).
    fn name(&self) -> &'static str;
}

/// How a read ended, as seen by hooks registered with
/// [`ReadRequest::on_finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadOutcome {
    /// Every block was read.
    Done,
    /// The read failed (I/O error or end of file).
    Failed,
    /// The request was dropped unfinished.
    Cancelled,
}

/// Transforms the result an engine reports before the request acts on it.
/// Test wrappers use it to inject faults (an error, a short read); it is
/// carried over to a short read's remainder.
#[cfg(any(feature = "testing", test))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub trait ReadFilter: Send + Sync {
    /// Returns the result the request should act on.
    fn filter(&self, req: &ReadRequest, result: io::Result<usize>) -> io::Result<usize>;
}

type FinishHook = Box<dyn FnOnce(ReadOutcome) + Send>;

/// What wrappers attach to a request: boxed, so a request nobody
/// instruments carries one null pointer, not two empty `Vec`s.
#[derive(Default)]
struct Extras {
    #[cfg(any(feature = "testing", test))]
    filters: Vec<std::sync::Arc<dyn ReadFilter>>,
    hooks: Vec<FinishHook>,
}

/// One read in flight: a run of consecutive blocks, ascending, and exclusive
/// ownership of the frames they are read into. See the [module docs](self).
pub struct ReadRequest {
    stream: Arc<StreamShared>,
    /// The stream's read slot this request reports to.
    slot: u32,
    /// Frames, in ascending block order; `frames[done..]` are still owned.
    frames: Vec<u32>,
    /// Block of `frames[0]`.
    base: BlockNumber,
    /// Frames already published valid.
    done: usize,
    /// Bytes of `frames[done]` already filled by an earlier short read.
    skip: usize,
    /// The stream asked for these blocks in descending order.
    descending: bool,
    /// Set by the engine: no device wait happened (page-cache hit).
    cached: bool,
    /// The stream advised this read's range right before starting it, and
    /// the engine took the advice.
    advised: bool,
    /// Whether this request has been finished (so `Drop` does nothing).
    finished: bool,
    /// Bytes of the logical file before the piece this request reads from
    /// (see [`ReadRequest::rebase`]); `offset()` is relative to it.
    origin: u64,
    /// Filters and finish hooks, if a wrapper attached any.
    extras: Option<Box<Extras>>,
}

impl fmt::Debug for ReadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadRequest")
            .field("first_block", &self.first_block())
            .field("nblocks", &self.nblocks())
            .field("offset", &self.offset())
            .field("len_bytes", &self.len_bytes())
            .field("descending", &self.descending)
            .field("advised", &self.advised)
            .finish()
    }
}

impl ReadRequest {
    pub(crate) fn new(
        stream: Arc<StreamShared>,
        slot: u32,
        base: BlockNumber,
        frames: Vec<u32>,
        descending: bool,
    ) -> Self {
        ReadRequest {
            stream,
            slot,
            frames,
            base,
            done: 0,
            skip: 0,
            descending,
            cached: false,
            advised: false,
            finished: false,
            origin: 0,
            extras: None,
        }
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> usize {
        self.stream.pool.block_size
    }

    /// First block this request (still) has to read.
    pub fn first_block(&self) -> BlockNumber {
        self.base + self.done as u64
    }

    /// Blocks this request (still) covers, counting a partly filled first one.
    pub fn nblocks(&self) -> usize {
        self.frames.len() - self.done
    }

    /// File offset to read at (relative to the piece set by
    /// [`rebase`](Self::rebase), if any).
    pub fn offset(&self) -> u64 {
        self.first_block() * self.block_size() as u64 + self.skip as u64 - self.origin
    }

    /// Makes [`offset`](Self::offset) relative to byte `origin` of the
    /// logical file: for wrappers that store one file as several pieces
    /// ([`Segmented`](crate::segmented::Segmented)) and pass the request on
    /// to the engine of the piece holding it. A short read's remainder keeps
    /// the origin. Block numbers ([`first_block`](Self::first_block)) stay
    /// logical.
    ///
    /// # Panics
    ///
    /// If `origin` is past the request's current offset (a wrapper bug).
    pub fn rebase(&mut self, origin: u64) {
        let logical = self.offset() + self.origin;
        assert!(
            origin <= logical,
            "rebase to {origin} past the read's offset {logical}"
        );
        self.origin = origin;
    }

    /// Bytes to read.
    pub fn len_bytes(&self) -> usize {
        self.nblocks() * self.block_size() - self.skip
    }

    /// Whether the stream wanted these blocks in descending order (a backward
    /// run read as one ascending I/O). Informational: engines read ascending.
    pub fn is_descending(&self) -> bool {
        self.descending
    }

    /// The destination buffers in file order: one per run of frames that
    /// are adjacent in memory (a ring or a fresh pool hands out adjacent
    /// frames, so a whole read is often one buffer), the first starting
    /// after any bytes an earlier short read filled.
    ///
    /// At most [`MAX_BUFFERS`] of them (the kernel's `IOV_MAX`): a large
    /// read into scattered frames gets the first `MAX_BUFFERS` runs, so an
    /// engine that reads what they hold reports a short read and issues the
    /// remainder like any other.
    pub fn buffers_mut(&mut self) -> Vec<IoSliceMut<'_>> {
        self.runs()
            .take(MAX_BUFFERS)
            .map(|(ptr, len)| {
                // SAFETY: each run covers whole frames owned by this request
                // (the first from `skip`), which holds their IO status
                // (frame.rs rule 1): no one else reads or writes those bytes
                // until `complete` or `Drop` publishes them, and `&mut self`
                // keeps the borrows unique. Runs only join frames whose
                // memory is adjacent, so each run is one range inside the
                // pool's allocation, and runs do not overlap.
                IoSliceMut::new(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
            })
            .collect()
    }

    /// Whether this request reads into frames of `pool`.
    pub fn is_in(&self, pool: &crate::BufferPool) -> bool {
        Arc::ptr_eq(&self.stream.pool, &pool.inner)
    }

    /// Raw destination pointers and lengths (at most [`MAX_BUFFERS`]), as [`buffers_mut`](Self::buffers_mut),
    /// for engines that hand memory to the kernel (io_uring). The pointers stay valid, and
    /// exclusively this request's, until it is completed or dropped.
    pub fn raw_buffers(&mut self) -> Vec<(*mut u8, usize)> {
        self.runs().take(MAX_BUFFERS).collect()
    }

    /// The destination as runs of adjacent frames, `(start, len)`, computed
    /// as they are asked for (no allocation): the first run starts `skip`
    /// bytes into the first remaining frame.
    fn runs(&self) -> Runs<'_> {
        Runs {
            pool: &self.stream.pool,
            frames: self.frames[self.done..].iter(),
            block_size: self.block_size(),
            first_off: self.skip,
            next: None,
        }
    }

    /// Copies `src` into the destination buffers (for engines that read into
    /// their own memory, like the in-memory engine or a DMA engine that owns
    /// its buffers). Returns the bytes copied.
    pub fn copy_from(&mut self, src: &[u8]) -> usize {
        self.copy_at(0, src)
    }

    /// Whether a stream still wants this read: some stream holds a pin on
    /// one of the pages it has still to fill. The stream that started it
    /// pins every page it will hand out until it does (the pages of holes
    /// it reads through are not pinned, but a read always ends with a page
    /// it hands out), so a read stops being wanted only
    /// when that stream is reset, closed or dropped and no other stream is
    /// waiting for one of its pages. An engine may then drop the request
    /// instead of finishing it (its frames go back empty, and a stream that
    /// asks for those blocks later reads them again). A momentary pin (a
    /// lookup through a stale table slot checking a frame's tag) can make a
    /// read look wanted; never the reverse.
    pub fn is_wanted(&self) -> bool {
        let pool = &self.stream.pool;
        self.frames[self.done..].iter().any(|&f| pool.is_pinned(f))
    }

    /// A future that is ready once this read is no longer
    /// [wanted](Self::is_wanted), for engines whose reads are worth
    /// aborting (a long network transfer): race it against the read and
    /// drop the request if it wins. It owns what it needs (not a borrow of
    /// the request, which the engine goes on filling), is woken whenever a
    /// stream on the pool releases its look-ahead (a reset, a `close`, a
    /// drop), never on the hot path, and never resolves while a stream
    /// still waits for one of the pages.
    pub fn abandoned(&self) -> Abandoned {
        Abandoned {
            pool: Arc::clone(&self.stream.pool),
            frames: self.frames[self.done..].to_vec(),
            key: None,
            waker: None,
            seen: None,
        }
    }

    /// Copies `src` into the destination, starting `at` bytes into it (the
    /// bytes [`offset`](Self::offset)` + at ..` of the file), for engines
    /// that receive a read in pieces (a network body). Returns the bytes
    /// copied: fewer than `src.len()` only past
    /// [`len_bytes`](Self::len_bytes).
    pub fn copy_at(&mut self, at: usize, src: &[u8]) -> usize {
        let mut skip = at;
        let mut copied = 0;
        for (ptr, len) in self.runs() {
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = (len - skip).min(src.len() - copied);
            // SAFETY: `ptr + skip .. ptr + skip + n` lies in a run of frames
            // this request owns the IO status of (frame.rs rule 1), inside
            // the pool's allocation (see `buffers_mut`), as `skip + n <=
            // len`; `&mut self` means no other borrow of them exists, and
            // `src` cannot overlap frames we own exclusively.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(copied), ptr.add(skip), n) };
            skip = 0;
            copied += n;
            if copied == src.len() {
                break;
            }
        }
        copied
    }

    /// Tells the stream no device wait happened for this read (the engine
    /// found the data in the OS page cache): the look-ahead distance then
    /// moves towards one combined read instead of growing.
    pub fn set_served_from_cache(&mut self, cached: bool) {
        self.cached = cached;
    }

    /// Whether the stream advised this read's range right before starting
    /// it and the engine took the advice ([`IoEngine::advise`] returned
    /// `true`): the kernel has then already been asked to read it. Kept
    /// across remainders.
    pub fn is_advised(&self) -> bool {
        self.advised
    }

    /// Marks the read as advised (see [`is_advised`](Self::is_advised)):
    /// for a wrapper that gives the inner engine advice of its own before
    /// passing the read on.
    pub fn set_advised(&mut self, advised: bool) {
        self.advised = advised;
    }

    /// Adds a result filter (fault injection), kept across remainders.
    #[cfg(any(feature = "testing", test))]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn add_filter(&mut self, filter: std::sync::Arc<dyn ReadFilter>) {
        self.extras
            .get_or_insert_with(Box::default)
            .filters
            .push(filter);
    }

    /// Runs `hook` once when this read (with its remainders) ends, however
    /// it ends. For wrappers that track reads in flight.
    pub fn on_finish(&mut self, hook: impl FnOnce(ReadOutcome) + Send + 'static) {
        self.extras
            .get_or_insert_with(Box::default)
            .hooks
            .push(Box::new(hook));
    }

    /// Runs the filters a wrapper attached, if any.
    #[cfg(any(feature = "testing", test))]
    fn filtered(&mut self, mut result: io::Result<usize>) -> io::Result<usize> {
        if let Some(extras) = self.extras.as_mut() {
            if !extras.filters.is_empty() {
                let filters = std::mem::take(&mut extras.filters);
                for f in &filters {
                    result = f.filter(self, result);
                }
                if let Some(extras) = self.extras.as_mut() {
                    extras.filters = filters;
                }
            }
        }
        result
    }

    #[cfg(not(any(feature = "testing", test)))]
    fn filtered(&mut self, result: io::Result<usize>) -> io::Result<usize> {
        result
    }

    /// Reports the engine's result. `Ok(n)` with `n < len_bytes()` is a short
    /// read: whole blocks read so far are published and the rest comes back
    /// as `Some(remainder)`, which the engine must issue. `Ok(0)` is end of
    /// file; `Err` fails the read. Returns `None` when the request is over.
    ///
    /// A read that ends exactly at the end of a partial last block the
    /// stream reads as a short page is over: that block is published (its
    /// frame's bytes past the end of the file zeroed) and no remainder is
    /// returned.
    #[must_use = "a short read's remainder must be issued"]
    pub fn complete(mut self, result: io::Result<usize>) -> Option<ReadRequest> {
        let result = self.filtered(result);
        match result {
            Ok(0) if self.len_bytes() > 0 && !self.at_short_end() => {
                let block = self.first_block();
                let offset = self.offset();
                self.fail(
                    ReadError::UnexpectedEof { block, offset }.into(),
                    ReadOutcome::Failed,
                );
                None
            }
            Ok(n) => {
                let bs = self.block_size();
                let n = n.min(self.len_bytes());
                let filled = self.skip + n;
                let whole = filled / bs;
                for i in self.done..self.done + whole {
                    self.stream.pool.finish_io(self.frames[i], true);
                }
                self.done += whole;
                self.skip = filled % bs;
                if self.at_short_end() {
                    let f = self.frames[self.done];
                    // SAFETY: `f` is a frame this request owns the IO status
                    // of (frame.rs rule 1), so no one else reads or writes
                    // its bytes; `skip < block_size`, so the `block_size -
                    // skip` bytes from `skip` are inside the frame.
                    unsafe {
                        std::ptr::write_bytes(
                            self.stream.pool.frame_ptr(f).add(self.skip),
                            0,
                            bs - self.skip,
                        );
                    }
                    self.stream.pool.finish_io(f, true);
                    self.done += 1;
                    self.skip = 0;
                }
                if self.done == self.frames.len() {
                    self.finish(Ok(()), ReadOutcome::Done);
                    None
                } else {
                    Some(self)
                }
            }
            Err(e) => {
                let block = self.first_block();
                self.fail(
                    ReadError::Io { block, source: e }.into(),
                    ReadOutcome::Failed,
                );
                None
            }
        }
    }

    /// Whether all that is left of this request is the stream's short last
    /// page, filled up to the end of the file.
    fn at_short_end(&self) -> bool {
        self.done + 1 == self.frames.len()
            && self.first_block() == self.stream.short_block
            && self.skip == self.stream.short_len
    }

    fn fail(&mut self, err: io::Error, outcome: ReadOutcome) {
        for i in self.done..self.frames.len() {
            self.stream.pool.finish_io(self.frames[i], false);
        }
        self.done = self.frames.len();
        self.finish(Err(err), outcome);
    }

    fn finish(&mut self, result: io::Result<()>, outcome: ReadOutcome) {
        self.finished = true;
        let result = result.map(|()| self.cached);
        // Hooks first: what they record (a wrapper's reads in flight, the
        // latency achieved) is then up to date when the woken stream looks.
        // A hook that panics must not keep the stream from hearing that the
        // read is over (its read slot would never be released, and the
        // stream, or its `close`, would wait forever): the panic is caught
        // and resumed once the stream is told — unless this thread is
        // already unwinding (the request dropped by another panic's
        // cleanup), where a second panic leaving `Drop` would abort the
        // process: the hook's panic is then dropped (never unwinding out of
        // here, even if dropping it panics), and the first one goes on.
        let hooks = self.extras.take().map(|e| e.hooks).unwrap_or_default();
        let panicked = if hooks.is_empty() {
            None
        } else {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for h in hooks {
                    h(outcome);
                }
            }))
            .err()
        };
        // The frame list goes back to the stream for its next read (one
        // allocation per read saved); this request is done with it.
        let frames = std::mem::take(&mut self.frames);
        self.done = 0;
        self.skip = 0;
        self.stream.read_finished(self.slot, result, frames);
        if let Some(p) = panicked {
            if !std::thread::panicking() {
                std::panic::resume_unwind(p);
            }
            // Dropping the payload is user code too, and may panic: caught
            // (a panic leaving this drop during an unwind would abort), and
            // that second payload leaked.
            if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p))) {
                std::mem::forget(again);
            }
        }
    }
}

/// Resolves when a read is no longer wanted: see [`ReadRequest::abandoned`].
#[must_use = "futures do nothing unless polled"]
pub struct Abandoned {
    pool: Arc<crate::pool::PoolInner>,
    /// The frames the read had still to fill when this was made.
    frames: Vec<u32>,
    /// This future's slot in the pool's watcher list, once registered.
    key: Option<usize>,
    /// The waker registered there (so a poll with the same waker takes no
    /// lock).
    waker: Option<std::task::Waker>,
    /// The pool's release count when the pins were last found held.
    seen: Option<u64>,
}

impl fmt::Debug for Abandoned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Abandoned")
            .field("frames", &self.frames.len())
            .field("registered", &self.key.is_some())
            .finish()
    }
}

impl std::future::Future for Abandoned {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let this = self.get_mut();
        let watchers = &this.pool.watchers;
        // Register first, then read the count, then the pins: a release
        // after the registration wakes this task, and one before it is seen
        // in the count and in the pins (see `pool/watchers.rs`).
        if this.key.is_none() || !this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            watchers.register(&mut this.key, cx.waker());
            this.waker = Some(cx.waker().clone());
        }
        if this.pool.still_pinned(&this.frames, &mut this.seen) {
            std::task::Poll::Pending
        } else {
            watchers.unregister(&mut this.key);
            this.waker = None;
            std::task::Poll::Ready(())
        }
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.pool.watchers.unregister(&mut self.key);
    }
}

/// Iterator over a request's destination runs; see [`ReadRequest::runs`].
struct Runs<'a> {
    pool: &'a crate::pool::PoolInner,
    frames: std::slice::Iter<'a, u32>,
    block_size: usize,
    /// Offset into the first frame (the request's `skip`), then 0.
    first_off: usize,
    /// A run started by a frame that did not join the previous one.
    next: Option<(*mut u8, usize)>,
}

impl Iterator for Runs<'_> {
    type Item = (*mut u8, usize);

    fn next(&mut self) -> Option<(*mut u8, usize)> {
        let bs = self.block_size;
        let (start, mut len) = match self.next.take() {
            Some(r) => r,
            None => {
                let &f = self.frames.next()?;
                let off = std::mem::take(&mut self.first_off);
                // `off < block_size`, so this stays inside frame `f`.
                (self.pool.frame_ptr(f).wrapping_add(off), bs - off)
            }
        };
        for &f in self.frames.by_ref() {
            let ptr = self.pool.frame_ptr(f);
            if start.wrapping_add(len) == ptr {
                len += bs;
            } else {
                self.next = Some((ptr, bs));
                break;
            }
        }
        Some((start, len))
    }
}

impl Drop for ReadRequest {
    fn drop(&mut self) {
        if !self.finished {
            let block = self.first_block();
            self.fail(
                ReadError::Cancelled { block }.into(),
                ReadOutcome::Cancelled,
            );
        }
    }
}
