//! [`GlommioFile`]: a glommio DMA (`O_DIRECT`) file.

use glommio::io::DmaFile;
use pagestream::{EngineFile, FileId};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// An open glommio [`DmaFile`] the [`GlommioEngine`](crate::GlommioEngine)
/// reads. `O_DIRECT` always: glommio's DMA files bypass the page cache, so
/// the kernel does no read-ahead and the planner keeps reads in flight.
///
/// A cheap handle (`Clone`), `!Send` like everything glommio: it belongs to
/// the executor that opened it. Reads in flight hold it open.
#[derive(Clone)]
pub struct GlommioFile {
    pub(crate) inner: Rc<FileInner>,
}

pub(crate) struct FileInner {
    pub(crate) dma: DmaFile,
    /// A duplicate of `dma`'s descriptor, for its metadata and length.
    meta: std::fs::File,
    path: PathBuf,
    id: FileId,
    /// O_DIRECT offset alignment glommio found for the file.
    pub(crate) align: u64,
}

impl fmt::Debug for GlommioFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlommioFile")
            .field("path", &self.inner.path)
            .field("id", &self.inner.id)
            .field("align", &self.inner.align)
            .finish()
    }
}

impl GlommioFile {
    /// Opens `path` as a glommio DMA file, for streams whose pool has
    /// `block_size`-byte blocks. Must run on a glommio executor.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`], naming the block size and
    /// the alignment, when `block_size` is not a power of two of at least
    /// 512 that is a multiple of the file's `O_DIRECT` alignment.
    pub async fn open(path: impl AsRef<Path>, block_size: usize) -> io::Result<GlommioFile> {
        let path = path.as_ref();
        check_block_size(block_size, path)?;
        // Before `open`: a FIFO would block the open until a writer came.
        let md = std::fs::metadata(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
        })?;
        pagestream::os::check_file_type(path, &md)?;
        // glommio 0.9 keeps a clone of the polling task's waker for every
        // poll of a pending I/O, and counts a task's wakers in 16 bits: a
        // task polled often while the open is pending (one that `join`s
        // many scans, woken by their reads) would overflow the count, a
        // panic inside glommio. The open runs in a task of its own, polled
        // only when its I/O wakes it; the caller waits on its join handle,
        // which keeps one waker.
        let owned = path.to_owned();
        let dma = glommio::spawn_local(async move { DmaFile::open(&owned).await });
        let dma = dma.await.map_err(|e| {
            let e = io::Error::from(e);
            io::Error::new(
                e.kind(),
                format!("cannot open {} as a glommio DMA file: {e}", path.display()),
            )
        })?;
        match Self::check(&dma, block_size, path) {
            Ok(meta) => Self::wrap(dma, meta, path),
            Err(e) => {
                // In a task of its own, as the open.
                glommio::spawn_local(async move { drop(dma.close().await) }).await;
                Err(e)
            }
        }
    }

    /// Adopts a [`DmaFile`] opened elsewhere (for example one sent from
    /// another executor as an `OwnedDmaFile` and converted back), for
    /// streams whose pool has `block_size`-byte blocks. Must run on a
    /// glommio executor. Fails like [`GlommioFile::open`] on a block size
    /// the file cannot be read with (the `DmaFile` is then dropped).
    pub fn from_dma(dma: DmaFile, block_size: usize) -> io::Result<GlommioFile> {
        let path = dma
            .path()
            .map(|p| p.to_path_buf())
            .unwrap_or_else(|| PathBuf::from(format!("<fd {}>", dma.as_raw_fd())));
        check_block_size(block_size, &path)?;
        let meta = Self::check(&dma, block_size, &path)?;
        Self::wrap(dma, meta, &path)
    }

    /// Checks the open file (a regular file or a block device, which the
    /// path may no longer be) and the block size against its alignment;
    /// returns a duplicate of its descriptor for metadata.
    fn check(dma: &DmaFile, block_size: usize, path: &Path) -> io::Result<std::fs::File> {
        // SAFETY: `dma` owns the descriptor and keeps it open for this
        // borrow, which ends with this statement (the duplicate is a new
        // descriptor of its own).
        let fd = unsafe { BorrowedFd::borrow_raw(dma.as_raw_fd()) };
        let meta = std::fs::File::from(fd.try_clone_to_owned()?);
        pagestream::os::check_file_type(path, &meta.metadata()?)?;
        let align = dma.alignment();
        if block_size as u64 % align != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "block size {block_size} does not meet the O_DIRECT alignment of {}: \
                     file offsets and lengths must be multiples of {align} bytes; use a block \
                     size that is a multiple of {align}",
                    path.display()
                ),
            ));
        }
        Ok(meta)
    }

    fn wrap(dma: DmaFile, meta: std::fs::File, path: &Path) -> io::Result<GlommioFile> {
        Ok(GlommioFile {
            inner: Rc::new(FileInner {
                align: dma.alignment(),
                id: pagestream::os::file_id(&meta.metadata()?),
                dma,
                meta,
                path: path.to_owned(),
            }),
        })
    }

    /// The `O_DIRECT` alignment of the file's offsets and lengths.
    pub fn alignment(&self) -> u64 {
        self.inner.align
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Closes the file asynchronously if this is the last handle and no
    /// read holds it (glommio prefers an explicit close to closing on drop);
    /// otherwise just drops this handle. Returns whether it closed the file.
    pub async fn close(self) -> io::Result<bool> {
        match Rc::try_unwrap(self.inner) {
            Ok(inner) => {
                inner.dma.close().await.map_err(io::Error::from)?;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
}

impl EngineFile for GlommioFile {
    fn id(&self) -> FileId {
        self.inner.id
    }

    fn byte_len(&self) -> io::Result<u64> {
        pagestream::os::file_len(&self.inner.meta)
    }

    fn path(&self) -> Option<&Path> {
        Some(&self.inner.path)
    }

    fn kernel_readahead(&self) -> bool {
        false
    }
}

fn check_block_size(block_size: usize, path: &Path) -> io::Result<()> {
    if block_size < 512 || !block_size.is_power_of_two() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "block size {block_size} is not a power of two of at least 512 bytes \
                 (reading {} as a glommio DMA file)",
                path.display()
            ),
        ));
    }
    Ok(())
}
