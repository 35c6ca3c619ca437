//! Stamped data files for the examples, created once and reused.

use crate::args::format_size;
use pagestream::testing::stamp;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Seed of the examples' default data files.
pub const DEFAULT_SEED: u64 = 0x5EC5_CA4D_A7A0_0001;

/// Where default data files live: `$CARGO_TARGET_DIR/pagestream-data`, or
/// `target/pagestream-data` in the workspace.
pub fn data_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("pagestream-data"),
        None => {
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            manifest
                .parent()
                .unwrap_or(manifest)
                .join("target")
                .join("pagestream-data")
        }
    }
}

/// The file a scan reads and its number of whole `block_size` blocks: the
/// file the user named (`file`), scanned as it is and never rewritten, or
/// if it does not exist yet, or none was named, a stamped file of `size`
/// bytes made with [`ensure_stamped`] (by default
/// `data_dir()/seqscan-<size>.dat`, shared by the scans). Says on stderr,
/// as `program`, when it creates one. A file without a whole block is an
/// error.
pub fn scan_file(
    program: &str,
    file: Option<&Path>,
    size: u64,
    block_size: usize,
) -> io::Result<(PathBuf, u64)> {
    let path = match file {
        Some(p) => p.to_path_buf(),
        None => data_dir().join(format!("seqscan-{}.dat", format_size(size))),
    };
    if !path.exists() {
        eprintln!(
            "{program}: creating {} ({}) …",
            path.display(),
            format_size(size)
        );
    }
    let len = if file.is_some() && path.exists() {
        // A file the user named is scanned as it is, never rewritten.
        std::fs::metadata(&path)?.len()
    } else {
        match ensure_stamped(&path, size, block_size, DEFAULT_SEED)? {
            Ensured::Created => size,
            Ensured::Existing => std::fs::metadata(&path)?.len(),
        }
    };
    let nblocks = len / block_size as u64;
    if nblocks == 0 {
        return Err(io::Error::other(format!(
            "{} holds no whole {}-byte block",
            path.display(),
            block_size
        )));
    }
    Ok((path, nblocks))
}

/// What [`ensure_stamped`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The file existed with the right length.
    Existing,
    /// The file was written now.
    Created,
}

/// Makes sure `path` is a stamped file of `bytes` bytes (a whole number of
/// `block_size` blocks; block `b` holds `stamp::fill(seed, b, …)`). An
/// existing file of that length is kept as it is; any other existing file is
/// an error (it is never overwritten). A new one is written with
/// 8 MiB writes to a temporary name, fsynced and renamed into place, so an
/// interrupted run never leaves a short file behind.
pub fn ensure_stamped(
    path: &Path,
    bytes: u64,
    block_size: usize,
    seed: u64,
) -> io::Result<Ensured> {
    if bytes == 0 || bytes % block_size as u64 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "data file size {bytes} is not a positive multiple of the block size {block_size}"
            ),
        ));
    }
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_file() && m.len() == bytes {
            return Ok(Ensured::Existing);
        }
        // Never overwrite something that is already there.
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists but is not a {bytes}-byte data file ({} bytes{}); \
                 remove it or choose another path",
                path.display(),
                m.len(),
                if m.is_file() {
                    ""
                } else {
                    ", not a regular file"
                }
            ),
        ));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        let chunk_blocks = ((8 << 20) / block_size).max(1);
        let mut buf = vec![0u8; chunk_blocks * block_size];
        let nblocks = bytes / block_size as u64;
        let mut b = 0u64;
        while b < nblocks {
            let n = (nblocks - b).min(chunk_blocks as u64) as usize;
            for (i, page) in buf[..n * block_size].chunks_mut(block_size).enumerate() {
                stamp::fill(seed, b + i as u64, page);
            }
            f.write_all(&buf[..n * block_size])?;
            b += n as u64;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| Ensured::Created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_once_with_stamps() {
        let p = std::env::temp_dir().join(format!("pagestream-data-{}.dat", std::process::id()));
        let _ = std::fs::remove_file(&p);
        assert_eq!(
            ensure_stamped(&p, 40 * 8192, 8192, 9).unwrap(),
            Ensured::Created
        );
        assert_eq!(
            ensure_stamped(&p, 40 * 8192, 8192, 9).unwrap(),
            Ensured::Existing
        );
        let bytes = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(bytes.len(), 40 * 8192);
        for b in [0u64, 17, 39] {
            let page = &bytes[b as usize * 8192..][..8192];
            assert!(stamp::check(9, b, page), "block {b}");
        }
        assert!(ensure_stamped(&p, 1000, 8192, 9).is_err());
        assert!(ensure_stamped(&p, 0, 8192, 9).is_err());
        // An existing file of another length is left alone.
        std::fs::write(&p, b"precious").unwrap();
        let e = ensure_stamped(&p, 40 * 8192, 8192, 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
        std::fs::remove_file(&p).unwrap();
    }
}
