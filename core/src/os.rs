//! What engines over files on a Unix system share when they open one: which
//! files a stream can read, their identity in the pool and their length,
//! the alignment `O_DIRECT` needs, and `posix_fadvise`.
//!
//! A stream reads blocks at offsets of one file of known length, so only a
//! regular file or a block device will do. Anything else — a directory, a
//! FIFO, a character device such as `/dev/null`, a socket — is refused when
//! it is opened, with an error naming it; a FIFO is refused before `open`,
//! which would block until a writer came.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! let (file, md) = pagestream::os::open_readable("table.dat".as_ref(), 0, "")?;
//! let id = pagestream::os::file_id(&md);
//! let len = pagestream::os::file_len(&file)?;
//! # let _ = (id, len);
//! # Ok(())
//! # }
//! ```

use crate::FileId;
use std::fs::{File, Metadata};
use std::io::{self, Seek, SeekFrom};
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Checks that `md`, the metadata of the file at `path`, is a regular file
/// or a block device. Otherwise fails with [`io::ErrorKind::InvalidInput`],
/// naming the path and what it is.
pub fn check_file_type(path: &Path, md: &Metadata) -> io::Result<()> {
    let ft = md.file_type();
    if ft.is_file() || ft.is_block_device() {
        return Ok(());
    }
    let what = if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "of an unknown file type"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}, not a regular file or block device: a stream reads only those",
            path.display()
        ),
    ))
}

/// Opens `path` read-only with `custom_flags` (such as `O_DIRECT`) after
/// checking what it is, and checks the file opened again (the path may
/// have changed in between). Errors name the path; `how` is added after it
/// in a failed open's message (`" with O_DIRECT"`). Returns the file and its
/// metadata.
pub fn open_readable(path: &Path, custom_flags: i32, how: &str) -> io::Result<(File, Metadata)> {
    let named = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot open {}{how}: {e}", path.display()),
        )
    };
    // Before `open`: opening a FIFO for reading blocks until a writer comes.
    check_file_type(path, &std::fs::metadata(path).map_err(named)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(custom_flags)
        .open(path)
        .map_err(named)?;
    let md = file.metadata().map_err(named)?;
    check_file_type(path, &md)?;
    Ok((file, md))
}

/// The pool's id for the file `md` describes: its device and inode, or for
/// a block device the device it stands for (so every node naming one device
/// shares pages).
pub fn file_id(md: &Metadata) -> FileId {
    if md.file_type().is_block_device() {
        FileId::block_device(md.rdev())
    } else {
        FileId::from_dev_ino(md.dev(), md.ino())
    }
}

/// The length of `file` in bytes: its size, or for a block device (whose
/// size `stat` reports as 0) the offset of its end. Reads are positional,
/// so moving the file's offset to find the end disturbs none of them.
pub fn file_len(file: &File) -> io::Result<u64> {
    let md = file.metadata()?;
    if md.file_type().is_block_device() {
        let mut f = file;
        f.seek(SeekFrom::End(0))
    } else {
        Ok(md.len())
    }
}

/// The alignments `O_DIRECT` reads of a file need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectAlignment {
    /// File offsets and lengths must be multiples of this many bytes.
    pub offset: usize,
    /// Buffers must start at addresses that are multiples of this.
    pub memory: usize,
}

/// The `O_DIRECT` alignments the kernel reports for `file`
/// (`statx(STATX_DIOALIGN)`), or `None` when it reports none (kernels
/// before 6.1, some file systems): callers then fall back on the file
/// system's block size (`st_blksize`).
#[cfg(target_os = "linux")]
pub fn direct_alignment(file: &File) -> Option<DirectAlignment> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: the path is a valid NUL-terminated empty string, which with
    // AT_EMPTY_PATH means the descriptor itself (open for as long as
    // `file` is borrowed); `stx` points to writable memory for one
    // `struct statx`, which is all the kernel writes.
    let r = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: zero-initialised, then partly filled by the kernel; every field
    // of `struct statx` is a plain integer, valid for any bit pattern.
    let stx = unsafe { stx.assume_init() };
    (stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0).then_some(
        DirectAlignment {
            offset: stx.stx_dio_offset_align as usize,
            memory: stx.stx_dio_mem_align.max(1) as usize,
        },
    )
}

/// `posix_fadvise(fd, offset, len, advice)`; `len` 0 means to the end of
/// the file (so `0, 0` is the whole file). Values past `off_t` are taken
/// as its largest.
#[cfg(target_os = "linux")]
pub fn fadvise(fd: RawFd, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    let off = libc::off_t::try_from(offset).unwrap_or(libc::off_t::MAX);
    let len = libc::off_t::try_from(len).unwrap_or(libc::off_t::MAX);
    // SAFETY: posix_fadvise takes no pointers; any descriptor, range and
    // advice value is allowed (a bad one is reported as an error number).
    let r = unsafe { libc::posix_fadvise(fd, off, len, advice) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

#[cfg(all(test, not(pagestream_loom)))]
mod tests {
    use super::*;
    use crate::testing::NotRegularFiles;

    #[test]
    fn refuses_what_is_not_a_regular_file_or_block_device() {
        let things = NotRegularFiles::new("os-kinds", |p| {
            let st = std::process::Command::new("mkfifo").arg(p).status()?;
            if st.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("mkfifo {}: {st}", p.display())))
            }
        });
        things.assert_refused(|p| open_readable(p, 0, "").map(drop));
    }

    #[test]
    fn a_regular_file_opens_with_its_length_and_id() {
        let f = crate::testing::StampedFile::new("os-regular", 3, 512);
        let (file, md) = open_readable(f.path(), 0, "").expect("open");
        assert_eq!(file_len(&file).expect("len"), 3 * 512);
        assert_eq!(file_id(&md), FileId::from_dev_ino(md.dev(), md.ino()));
    }

    /// A block device's length is its size (which `stat` reports as 0),
    /// checked against sysfs; its id is the device it stands for. Skipped
    /// where no block device of any size can be opened.
    #[test]
    fn a_block_device_opens_with_its_size() {
        let Ok(dir) = std::fs::read_dir("/sys/class/block") else {
            return;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let dev = Path::new("/dev").join(&name);
            let Ok((file, md)) = open_readable(&dev, 0, "") else {
                continue;
            };
            let Ok(sectors) = std::fs::read_to_string(entry.path().join("size")) else {
                continue;
            };
            let sectors: u64 = sectors.trim().parse().expect("sysfs size");
            if sectors == 0 {
                // An unattached loop device, say: 0 would prove nothing.
                continue;
            }
            assert_eq!(
                file_len(&file).expect("len"),
                sectors * 512,
                "{}",
                dev.display()
            );
            assert_eq!(file_id(&md), FileId::block_device(md.rdev()));
            return;
        }
        eprintln!("no block device to open: skipped");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn fadvise_reports_the_kernels_error() {
        let e = fadvise(-1, 0, 0, libc::POSIX_FADV_WILLNEED).expect_err("a bad descriptor");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        let f = File::open("/proc/self/exe").expect("open our executable");
        fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED).expect("advice on a file");
    }
}
