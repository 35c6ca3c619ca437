//! The open file shared by both io_uring engines: O_DIRECT alignment checked
//! at open, the descriptor, and the read-ahead switch.

mod common;

use common::stamped;
use pagestream::testing::StampedFile;
use pagestream::EngineFile;
use pagestream_uring::UringFile;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

const BS: usize = 8192;

/// O_DIRECT with a block size the file system cannot align to is refused at
/// open with InvalidInput naming the block size; a good one is accepted.
#[test]
fn direct_alignment_checked_at_open() {
    let tmp = StampedFile::with_seed("align", 1, 4, 4096);
    let path = tmp.path();
    for bad in [256usize, 1000, 6144] {
        let e = UringFile::open_direct(path, bad).expect_err("bad block size");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(&format!("block size {bad}")), "{e}");
    }
    let f = UringFile::open_direct(path, 4096).expect("4096 works on this machine");
    assert!(f.is_direct() && !f.kernel_readahead());
    let align = f.alignment();
    assert!(align >= 512 && 4096 % align == 0, "alignment {align}");
    if align > 512 {
        let e = UringFile::open_direct(path, 512).expect_err("below the alignment");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let msg = e.to_string();
        assert!(
            msg.contains("block size 512") && msg.contains(&align.to_string()),
            "{msg}"
        );
    }
    let b = UringFile::open(path).expect("buffered");
    assert!(!b.is_direct() && b.kernel_readahead() && b.alignment() == 1);
    assert_eq!(b.byte_len().expect("len"), 4 * 4096);
    assert_eq!(b.id(), f.id(), "same file, same id");
    std::fs::remove_file(path).expect("unlink");
}

/// The descriptor is the open file's; turning read-ahead off tells the
/// planner, and is a no-op for O_DIRECT files.
#[test]
fn descriptor_and_readahead_off() {
    let n = 8u64;
    let (buffered, _) = stamped(n, BS, false);
    assert_eq!(buffered.as_raw_fd(), buffered.as_fd().as_raw_fd());
    let dup = buffered.as_fd().try_clone_to_owned().expect("dup");
    let len = std::fs::File::from(dup).metadata().expect("fstat").len();
    assert_eq!(len, buffered.byte_len().expect("len"));
    assert!(buffered.kernel_readahead());
    let clone = buffered.clone();
    buffered.disable_readahead().expect("fadvise");
    assert!(!buffered.kernel_readahead());
    assert!(!clone.kernel_readahead(), "clones share the open file");
    let (direct, _) = stamped(n, BS, true);
    assert!(!direct.kernel_readahead());
    direct.disable_readahead().expect("no-op");
    assert!(!direct.kernel_readahead());
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
/// yield no pages; a FIFO's open does not block. (The tokio-uring engine
/// reads this same file type.)
#[test]
fn only_regular_files_and_block_devices_open() {
    let things = pagestream::testing::NotRegularFiles::new("uring-kinds", mkfifo);
    things.assert_refused(|p| UringFile::open(p).map(drop));
    things.assert_refused(|p| UringFile::open_direct(p, BS).map(drop));
}
