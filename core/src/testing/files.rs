//! Stamped files on disk, for the integration tests of engines that read
//! real files.
//!
//! Runtime-free and std-only: this writes and removes files; opening them is
//! left to each engine's tests (buffered, `O_DIRECT`, through an executor),
//! which pass their opening code to [`DiskFiles`], the conformance
//! [`Harness`] over files on disk.
//!
//! ```
//! use pagestream::testing::files::StampedFile;
//! use pagestream::testing::stamp;
//!
//! let f = StampedFile::new("doc", 4, 4096);
//! let bytes = std::fs::read(f.path()).unwrap();
//! assert_eq!(bytes.len(), 4 * 4096);
//! assert!(stamp::check(f.seed(), 3, &bytes[3 * 4096..]));
//! // Dropping `f` removes the file.
//! ```

use super::conformance::Harness;
use super::stamp;
use crate::IoEngine;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Blocks stamped and written per `write_all`.
const CHUNK_BLOCKS: u64 = 64;

/// A fresh path in the temp dir, unique to this process and call; `tag`
/// goes into the file name to tell tests' files apart. Nothing is created.
pub fn temp_path(tag: &str) -> PathBuf {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("pagestream-{}-{tag}-{n}.dat", std::process::id()))
}

/// A seed no other call in this process returns (so no two files of a
/// process hold the same pages).
pub fn fresh_seed() -> u64 {
    0x5EED_0000_0000 ^ SEQ.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 40)
}

/// Writes `nblocks` blocks of `block_size`, stamped with `seed` (see
/// [`stamp::fill`]), to a new file at `path` (truncating any old one), and
/// fsyncs it. Panics on any I/O error.
pub fn write_stamped(path: &Path, seed: u64, nblocks: u64, block_size: usize) {
    let mut f = std::fs::File::create(path).expect("create temp file");
    let mut buf = vec![0u8; block_size * CHUNK_BLOCKS as usize];
    let mut b = 0;
    while b < nblocks {
        let n = (nblocks - b).min(CHUNK_BLOCKS) as usize;
        for (i, block) in buf[..n * block_size]
            .chunks_exact_mut(block_size)
            .enumerate()
        {
            stamp::fill(seed, b + i as u64, block);
        }
        f.write_all(&buf[..n * block_size]).expect("write");
        b += n as u64;
    }
    f.sync_all().expect("fsync");
}

/// A temp file of stamped blocks that removes itself when dropped.
///
/// Engines' harnesses typically open it, then drop it (the open file
/// outlives its name); plain tests keep it for the test's length.
#[derive(Debug)]
pub struct StampedFile {
    path: PathBuf,
    seed: u64,
}

impl StampedFile {
    /// `nblocks` blocks of `block_size` stamped with a [`fresh_seed`], at a
    /// [`temp_path`] named with `tag`.
    pub fn new(tag: &str, nblocks: u64, block_size: usize) -> StampedFile {
        StampedFile::with_seed(tag, fresh_seed(), nblocks, block_size)
    }

    /// As [`new`](Self::new), stamped with `seed`.
    pub fn with_seed(tag: &str, seed: u64, nblocks: u64, block_size: usize) -> StampedFile {
        let path = temp_path(tag);
        write_stamped(&path, seed, nblocks, block_size);
        StampedFile { path, seed }
    }

    /// As [`new`](Self::new), followed by a partial block of `tail` bytes:
    /// the first `tail` bytes of block `nblocks`'s stamp.
    pub fn with_tail(tag: &str, nblocks: u64, block_size: usize, tail: usize) -> StampedFile {
        let f = StampedFile::new(tag, nblocks, block_size);
        let page = stamp::page(f.seed, nblocks, block_size);
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .open(&f.path)
            .expect("reopen temp file");
        out.write_all(&page[..tail]).expect("write tail");
        out.sync_all().expect("fsync");
        f
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The seed its blocks are stamped with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Removes the file now, panicking if that fails (dropping ignores
    /// errors).
    pub fn remove(self) {
        std::fs::remove_file(&self.path).expect("unlink temp file");
        // Already gone: skip `Drop`.
        std::mem::forget(self);
    }
}

impl Drop for StampedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The conformance [`Harness`] over stamped files on disk: each file is a
/// [`StampedFile`] opened with `open(path, block_size)` (the engine's own
/// opening code: buffered, `O_DIRECT`, on an executor…) and then unlinked.
///
/// Files stay open (their inodes allocated) as long as the harness lives,
/// so no later file reuses an inode number, and with it a `FileId` whose
/// stale pages a pool may still hold.
pub struct DiskFiles<E: IoEngine, O> {
    engine: E,
    name: String,
    open: O,
    keep: Mutex<Vec<E::File>>,
    pending: bool,
}

impl<E, O> DiskFiles<E, O>
where
    E: IoEngine,
    O: Fn(&Path, usize) -> io::Result<E::File>,
{
    /// A harness handing out `engine` and files opened with `open`; `name`
    /// labels its output (and its temp files).
    pub fn new(engine: E, name: impl Into<String>, open: O) -> Self {
        DiskFiles {
            engine,
            name: name.into(),
            open,
            keep: Mutex::new(Vec::new()),
            pending: false,
        }
    }

    /// Declares that the engine never finishes a read before the poll that
    /// started it returns ([`Harness::reads_stay_pending`]), so scenarios
    /// check that reads are in flight where they expect them.
    pub fn reads_stay_pending(mut self, on: bool) -> Self {
        self.pending = on;
        self
    }

    /// The files made so far, no longer kept by the harness (to close them
    /// explicitly).
    pub fn take_files(&self) -> Vec<E::File> {
        std::mem::take(&mut *self.keep.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<E: IoEngine, O> fmt::Debug for DiskFiles<E, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskFiles")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<E, O> Harness for DiskFiles<E, O>
where
    E: IoEngine<File: Clone + 'static> + Clone + 'static,
    O: Fn(&Path, usize) -> io::Result<E::File>,
{
    type Engine = E;

    fn engine(&self) -> E {
        self.engine.clone()
    }

    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (E::File, u64) {
        self.keep_open(
            StampedFile::new(&self.name, nblocks, block_size),
            block_size,
        )
    }

    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (E::File, u64) {
        let stamped = StampedFile::with_tail(&self.name, nblocks, block_size, tail);
        self.keep_open(stamped, block_size)
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn reads_stay_pending(&self) -> bool {
        self.pending
    }
}

impl<E, O> DiskFiles<E, O>
where
    E: IoEngine<File: Clone + 'static> + Clone + 'static,
    O: Fn(&Path, usize) -> io::Result<E::File>,
{
    /// Opens `stamped`, unlinks it and keeps the open file.
    fn keep_open(&self, stamped: StampedFile, block_size: usize) -> (E::File, u64) {
        let file = (self.open)(stamped.path(), block_size).expect("open stamped file");
        let seed = stamped.seed();
        stamped.remove();
        self.keep
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(file.clone());
        (file, seed)
    }
}

/// Things no stream can read, for checking that an engine's open refuses
/// them: a directory, a FIFO, a Unix socket, and the character device
/// `/dev/null`. Made in a fresh temp directory, removed when dropped.
#[derive(Debug)]
pub struct NotRegularFiles {
    dir: PathBuf,
    paths: Vec<PathBuf>,
}

impl NotRegularFiles {
    /// Makes them; `mkfifo` makes a FIFO at a path (std cannot; engines'
    /// tests call `libc::mkfifo`).
    pub fn new(tag: &str, mkfifo: impl Fn(&Path) -> io::Result<()>) -> NotRegularFiles {
        let dir = temp_path(tag).with_extension("d");
        std::fs::create_dir(&dir).expect("create temp dir");
        let fifo = dir.join("fifo");
        mkfifo(&fifo).expect("mkfifo");
        let socket = dir.join("socket");
        // Only the socket file matters; the listener may go.
        drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind socket"));
        let paths = vec![dir.clone(), fifo, socket, PathBuf::from("/dev/null")];
        NotRegularFiles { dir, paths }
    }

    /// The paths.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Checks that `open` refuses every path with
    /// [`io::ErrorKind::InvalidInput`] and a message naming it. Each open
    /// runs on a thread of its own and must answer within 20 s: an open
    /// that blocks (a FIFO's, waiting for a writer) fails the check.
    pub fn assert_refused<O>(&self, open: O)
    where
        O: Fn(&Path) -> io::Result<()> + Clone + Send + 'static,
    {
        for p in &self.paths {
            let (tx, rx) = std::sync::mpsc::channel();
            let (open, path) = (open.clone(), p.clone());
            std::thread::spawn(move || {
                let _ = tx.send(open(&path));
            });
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("opening {} blocked (no answer in 20 s)", p.display()));
            let e = match r {
                Ok(()) => panic!("{} was opened as a file a stream can read", p.display()),
                Err(e) => e,
            };
            let msg = e.to_string();
            assert!(
                msg.contains(&p.display().to_string()),
                "the error must name {}: {msg}",
                p.display()
            );
            assert!(
                msg.contains("not a regular file or block device"),
                "the error must say why: {msg}"
            );
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{msg}");
        }
    }
}

impl Drop for NotRegularFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_file_round_trip_and_cleanup() {
        // Not a multiple of the chunk, so the last write is short.
        let n = CHUNK_BLOCKS + 3;
        let f = StampedFile::with_seed("files-test", 42, n, 512);
        assert_eq!(f.seed(), 42);
        let bytes = std::fs::read(f.path()).unwrap();
        assert_eq!(bytes.len() as u64, n * 512);
        for (b, block) in bytes.chunks_exact(512).enumerate() {
            assert!(stamp::check(42, b as u64, block), "block {b}");
        }
        let path = f.path().to_path_buf();
        drop(f);
        assert!(!path.exists());

        let g = StampedFile::new("files-test", 1, 512);
        let path = g.path().to_path_buf();
        g.remove();
        assert!(!path.exists());
    }

    #[test]
    fn paths_and_seeds_are_fresh() {
        assert_ne!(temp_path("x"), temp_path("x"));
        assert_ne!(fresh_seed(), fresh_seed());
    }
}
