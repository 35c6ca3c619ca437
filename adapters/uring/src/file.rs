//! [`UringFile`]: an open file, buffered or `O_DIRECT`.

use pagestream::{EngineFile, FileId};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Frames in a pool are 4096-aligned: the strictest memory alignment an
/// `O_DIRECT` file may ask for and still read straight into them.
pub(crate) const FRAME_ALIGN: usize = 4096;

/// An open file that io_uring engines read: this crate's
/// [`UringEngine`](crate::UringEngine), and `pagestream-tokio-uring`'s
/// engine (which re-exports it as `TokioUringFile`).
///
/// A cheap handle (`Clone`, `Send`, `Sync`): it holds a plain file
/// descriptor, not a ring or runtime object, so one open file may be read
/// from several rings (one per thread); each read goes to the ring of the
/// engine or thread that starts it. Every read in flight holds the
/// descriptor open until the kernel has finished with it.
///
/// ```no_run
/// use pagestream_uring::UringFile;
///
/// # fn main() -> std::io::Result<()> {
/// let buffered = UringFile::open("table.dat")?;
/// // Checks 8192 against the file system's O_DIRECT alignment:
/// let direct = UringFile::open_direct("table.dat", 8192)?;
/// assert!(direct.is_direct() && !buffered.is_direct());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct UringFile {
    pub(crate) inner: Arc<FileInner>,
}

pub(crate) struct FileInner {
    pub(crate) file: std::fs::File,
    pub(crate) path: PathBuf,
    id: FileId,
    pub(crate) direct: bool,
    /// O_DIRECT file offset / length alignment (1 when buffered).
    pub(crate) align: usize,
    /// Kernel read-ahead was turned off ([`UringFile::disable_readahead`]).
    readahead_off: AtomicBool,
    /// Buffered reads of this file are tried with `RWF_NOWAIT` first
    /// (cleared when the file system refuses the flag).
    pub(crate) nowait: AtomicBool,
}

impl FileInner {
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl fmt::Debug for UringFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringFile")
            .field("path", &self.inner.path)
            .field("id", &self.inner.id)
            .field("direct", &self.inner.direct)
            .field("align", &self.inner.align)
            .field(
                "readahead_off",
                &self.inner.readahead_off.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl UringFile {
    /// Opens `path` read-only, buffered (the kernel reads ahead and caches).
    pub fn open(path: impl AsRef<Path>) -> io::Result<UringFile> {
        Self::open_inner(path.as_ref(), None)
    }

    /// Opens `path` read-only with `O_DIRECT`, for streams whose pool has
    /// `block_size`-byte blocks.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`], naming the block size and
    /// the alignment, when `block_size` is not a power of two of at least
    /// 512 that is a multiple of the file offset alignment the kernel
    /// reports for the file (`statx(STATX_DIOALIGN)`, else `st_blksize`), or
    /// when the file system wants memory aligned beyond the pool's 4096-byte
    /// frames. The file is then not opened.
    pub fn open_direct(path: impl AsRef<Path>, block_size: usize) -> io::Result<UringFile> {
        Self::open_inner(path.as_ref(), Some(block_size))
    }

    fn open_inner(path: &Path, direct: Option<usize>) -> io::Result<UringFile> {
        if let Some(bs) = direct {
            if bs < 512 || !bs.is_power_of_two() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "block size {bs} is not a power of two of at least 512 bytes \
                         (opening {} with O_DIRECT)",
                        path.display()
                    ),
                ));
            }
        }
        // Refuses anything but a regular file or a block device, naming it.
        let (file, md) = pagestream::os::open_readable(
            path,
            if direct.is_some() { libc::O_DIRECT } else { 0 },
            if direct.is_some() {
                " with O_DIRECT"
            } else {
                ""
            },
        )?;
        let align = match direct {
            None => 1,
            Some(bs) => {
                let (mem, off) = pagestream::os::direct_alignment(&file).map_or_else(
                    || (512, (md.blksize() as usize).max(512)),
                    |a| (a.memory, a.offset),
                );
                // Pool frames are aligned to min(block size, FRAME_ALIGN).
                let frame_align = bs.min(FRAME_ALIGN);
                if bs % off != 0 || frame_align % mem != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "block size {bs} does not meet the O_DIRECT alignment of {}: \
                             file offsets and lengths must be multiples of {off} bytes and \
                             memory aligned to {mem} (pool frames of this block size are \
                             aligned to {frame_align}); use a block size that is a multiple \
                             of {}",
                            path.display(),
                            off.max(mem)
                        ),
                    ));
                }
                off
            }
        };
        Ok(UringFile {
            inner: Arc::new(FileInner {
                id: pagestream::os::file_id(&md),
                file,
                path: path.to_owned(),
                direct: direct.is_some(),
                align,
                readahead_off: AtomicBool::new(false),
                nowait: AtomicBool::new(true),
            }),
        })
    }

    /// Whether the file was opened with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }

    /// The alignment reads of this file need: the `O_DIRECT` file offset
    /// alignment, or 1 for a buffered file. Reads that do not meet it (the
    /// remainder of a short read that ended mid-sector) go through a small
    /// aligned bounce buffer.
    pub fn alignment(&self) -> usize {
        self.inner.align
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Turns the kernel's read-ahead off for this open file (and its
    /// clones): `posix_fadvise(POSIX_FADV_RANDOM)` over the whole file, as
    /// a bitmap heap scan or any random access wants, so that a cold
    /// buffered read fetches only the blocks asked for. Streams built
    /// afterwards see [`EngineFile::kernel_readahead`] as `false`. A no-op
    /// on an `O_DIRECT` file, which has no read-ahead.
    pub fn disable_readahead(&self) -> io::Result<()> {
        if self.inner.direct {
            return Ok(());
        }
        pagestream::os::fadvise(self.inner.fd(), 0, 0, libc::POSIX_FADV_RANDOM).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot turn read-ahead off for {} (posix_fadvise POSIX_FADV_RANDOM): {e}",
                    self.inner.path.display()
                ),
            )
        })?;
        self.inner.readahead_off.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// The open descriptor, for system calls this crate does not wrap (`fstat`,
/// `posix_fadvise`, …). It stays open as long as any clone of the file or
/// any read of it is in flight; do not close it.
impl AsFd for UringFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.file.as_fd()
    }
}

impl AsRawFd for UringFile {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd()
    }
}

impl EngineFile for UringFile {
    fn id(&self) -> FileId {
        self.inner.id
    }

    fn byte_len(&self) -> io::Result<u64> {
        pagestream::os::file_len(&self.inner.file)
    }

    fn path(&self) -> Option<&Path> {
        Some(&self.inner.path)
    }

    fn kernel_readahead(&self) -> bool {
        !self.inner.direct && !self.inner.readahead_off.load(Ordering::Relaxed)
    }
}
