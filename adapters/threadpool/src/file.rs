//! [`ThreadPoolFile`]: an open file, buffered or O_DIRECT.

use crate::sync::{Arc, AtomicBool};
use pagestream::{EngineFile, FileId};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Access-pattern advice given to the kernel when the file is opened
/// (`posix_fadvise` over the whole file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FileAdvice {
    /// No advice: the kernel's default read-ahead.
    #[default]
    Normal,
    /// `POSIX_FADV_SEQUENTIAL`: the kernel reads ahead further.
    Sequential,
    /// `POSIX_FADV_RANDOM`: kernel read-ahead off for this file (bitmap
    /// scans, or to let the stream's own advice do the work).
    Random,
}

/// How [`ThreadPoolFile::open_with`] opens a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    direct: bool,
    advice: FileAdvice,
    block_size: Option<usize>,
}

impl OpenOptions {
    /// Buffered, no advice, block size learned from the first read.
    pub fn new() -> Self {
        Self::default()
    }

    /// Open with `O_DIRECT` (bypass the OS page cache). Reads must then be
    /// aligned: give the pool's block size with [`block_size`](Self::block_size)
    /// to have it checked at open; otherwise a misaligned read fails with
    /// [`io::ErrorKind::InvalidInput`].
    pub fn direct(mut self, on: bool) -> Self {
        self.direct = on;
        self
    }

    /// Advice given to the kernel at open. Ignored under O_DIRECT.
    pub fn advice(mut self, advice: FileAdvice) -> Self {
        self.advice = advice;
        self
    }

    /// The block size streams over this file will use: checked against the
    /// O_DIRECT alignment at open, and used to turn block numbers into byte
    /// ranges for advice before the first read.
    pub fn block_size(mut self, block_size: usize) -> Self {
        self.block_size = Some(block_size);
        self
    }
}

/// An open file for the [`ThreadPoolEngine`](crate::ThreadPoolEngine).
/// Cheap to clone (an `Arc` inside); every clone is the same open file.
///
/// ```
/// use pagestream::EngineFile;
/// use pagestream_threadpool::{FileAdvice, OpenOptions, ThreadPoolFile};
///
/// let path = std::env::temp_dir().join(format!("pagestream-doc-{}.dat", std::process::id()));
/// std::fs::write(&path, vec![0u8; 3 * 8192])?;
///
/// // Buffered, with the kernel's read-ahead: most scans.
/// let file = ThreadPoolFile::open(&path)?;
/// assert_eq!(file.block_count(8192)?.blocks(), 3);
/// assert!(!file.is_direct());
///
/// // Kernel read-ahead off (`POSIX_FADV_RANDOM`): the stream's own
/// // look-ahead and advice do the work, as a bitmap scan wants.
/// let random = ThreadPoolFile::open_with(&path, OpenOptions::new().advice(FileAdvice::Random))?;
/// assert_eq!(random.advice(), FileAdvice::Random);
///
/// // O_DIRECT: reads bypass the page cache; the block size is checked
/// // against the file system's alignment at open.
/// match ThreadPoolFile::open_direct(&path, 8192) {
///     Ok(direct) => assert!(direct.is_direct()),
///     Err(e) => println!("no O_DIRECT on this file system: {e}"), // tmpfs has none
/// }
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ThreadPoolFile {
    pub(crate) inner: Arc<FileInner>,
}

#[derive(Debug)]
pub(crate) struct FileInner {
    pub(crate) file: File,
    pub(crate) direct: bool,
    /// O_DIRECT offset/length alignment (1 for buffered files).
    pub(crate) align: usize,
    /// O_DIRECT memory alignment (1 for buffered files).
    pub(crate) mem_align: usize,
    advice: FileAdvice,
    id: FileId,
    /// The path the file was opened with.
    path: PathBuf,
    /// The last inline `RWF_NOWAIT` attempt on this file read all of its
    /// request: the next reads go to the cached-read queue (see the
    /// engine's module docs).
    pub(crate) warm: AtomicBool,
}

impl FileInner {
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub(crate) fn id(&self) -> FileId {
        self.id
    }
}

impl ThreadPoolFile {
    /// Opens `path` read-only, buffered, without advice.
    pub fn open(path: impl AsRef<Path>) -> io::Result<ThreadPoolFile> {
        Self::open_with(path, OpenOptions::new())
    }

    /// Opens `path` read-only with `O_DIRECT` for streams of `block_size`
    /// blocks. Fails with [`io::ErrorKind::InvalidInput`], naming the block
    /// size and the alignment the file system requires, when `block_size`
    /// is not a power of two multiple of that alignment.
    pub fn open_direct(path: impl AsRef<Path>, block_size: usize) -> io::Result<ThreadPoolFile> {
        Self::open_with(path, OpenOptions::new().direct(true).block_size(block_size))
    }

    /// Opens `path` read-only as `opts` says.
    pub fn open_with(path: impl AsRef<Path>, opts: OpenOptions) -> io::Result<ThreadPoolFile> {
        let path = path.as_ref();
        if let Some(bs) = opts.block_size {
            if bs < 512 || !bs.is_power_of_two() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("block size {bs} is not a power of two of at least 512 bytes"),
                ));
            }
        }
        // Refuses anything but a regular file or a block device, naming it.
        let (file, md) = pagestream::os::open_readable(
            path,
            if opts.direct { libc::O_DIRECT } else { 0 },
            if opts.direct { " with O_DIRECT" } else { "" },
        )?;
        let fd = file.as_raw_fd();
        let (align, mem_align) = if opts.direct {
            match pagestream::os::direct_alignment(&file) {
                Some(a) => (a.offset, a.memory),
                None => {
                    // No statx answer: the file system block size is safe.
                    let a = (md.blksize() as usize).max(512);
                    (a, a)
                }
            }
        } else {
            (1, 1)
        };
        if let Some(bs) = opts.block_size {
            if opts.direct && bs % align != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "block size {bs} is not a multiple of the {align}-byte alignment \
                         O_DIRECT needs on {}",
                        path.display()
                    ),
                ));
            }
        }
        if !opts.direct {
            let advice = match opts.advice {
                FileAdvice::Normal => None,
                FileAdvice::Sequential => Some(libc::POSIX_FADV_SEQUENTIAL),
                FileAdvice::Random => Some(libc::POSIX_FADV_RANDOM),
            };
            if let Some(a) = advice {
                pagestream::os::fadvise(fd, 0, 0, a)?;
            }
        }
        Ok(ThreadPoolFile {
            inner: Arc::new(FileInner {
                id: pagestream::os::file_id(&md),
                path: path.to_owned(),
                direct: opts.direct,
                align,
                mem_align,
                advice: if opts.direct {
                    FileAdvice::Normal
                } else {
                    opts.advice
                },
                file,
                warm: AtomicBool::new(false),
            }),
        })
    }

    /// Whether the file was opened with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }

    /// The alignment reads need: the O_DIRECT offset alignment, or 1 for a
    /// buffered file.
    pub fn alignment(&self) -> usize {
        self.inner.align
    }

    /// The advice given at open.
    pub fn advice(&self) -> FileAdvice {
        self.inner.advice
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The underlying `std::fs::File`.
    pub fn as_file(&self) -> &File {
        &self.inner.file
    }
}

impl AsRawFd for ThreadPoolFile {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd()
    }
}

impl EngineFile for ThreadPoolFile {
    fn id(&self) -> FileId {
        self.inner.id()
    }

    fn byte_len(&self) -> io::Result<u64> {
        pagestream::os::file_len(&self.inner.file)
    }

    fn path(&self) -> Option<&Path> {
        Some(&self.inner.path)
    }

    fn kernel_readahead(&self) -> bool {
        !self.inner.direct && self.inner.advice != FileAdvice::Random
    }
}
