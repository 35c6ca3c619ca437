//! Stamped data files for the scan programs, created once and reused.

use crate::args::format_size;
use pagestream::testing::stamp;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Seed of the scan programs' default data files.
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

/// `--file PATH|URL`, `--create`, `--size SIZE` (default 1GiB): the data
/// file a scan program reads, as [`scan_file`] finds or creates it (or the
/// object a URL names).
#[derive(Debug, Clone, clap::Args)]
pub struct FileArgs {
    /// `--file`: the data file (default: the stamped file for `size`), or
    /// an object URL.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// `--create`: a missing `--file` is created.
    #[arg(long)]
    pub create: bool,
    /// `--size`: the size of a file to create.
    #[arg(long, default_value = "1GiB", value_parser = crate::args::parse_size)]
    pub size: u64,
}

impl FileArgs {
    /// The object URL `--file` names, if it names one.
    pub fn url(&self) -> Option<&str> {
        self.file.as_deref().and_then(crate::object::url_of)
    }

    /// The checks across these flags: `--create` with a URL is a usage
    /// error (objects are not created; `--size` is not used for them).
    pub fn check(&self) -> Result<(), crate::args::UsageError> {
        match self.url() {
            Some(url) if self.create => Err(crate::object::not_for_url(
                "--create",
                url,
                crate::object::NO_CREATE,
            )),
            _ => Ok(()),
        }
    }

    /// [`scan_file`] for these flags.
    pub fn scan_file(&self, program: &str, block_size: usize) -> io::Result<(PathBuf, u64)> {
        scan_file(
            program,
            self.file.as_deref(),
            self.create,
            self.size,
            block_size,
        )
    }
}

/// The file a scan reads and its number of whole `block_size` blocks.
///
/// - A file the user named (`file`) that exists is scanned as it is, never
///   rewritten.
/// - A named file that does not exist is created only when the user asked
///   for it (`create`, the programs' `--create`); otherwise it is an error
///   naming the path, so a mistyped path never turns into a new file.
/// - With no file named, the default `data_dir()/seqscan-<size>.dat`
///   (shared by the scans) is created if absent.
///
/// A file is created with [`ensure_stamped`] (`size` bytes: free space is
/// checked first; an interrupted creation leaves nothing behind). Says on
/// stderr, as `program`, when it creates one. A file without a whole block
/// is an error.
///
/// An object URL (`s3://bucket/key`, `http(s)://host/path`; see
/// [`object`](crate::object)) is never created (`create` must be false:
/// the programs refuse `--create` with a URL): its length comes from a
/// `HEAD`, and a missing object is an error naming the URL.
pub fn scan_file(
    program: &str,
    file: Option<&Path>,
    create: bool,
    size: u64,
    block_size: usize,
) -> io::Result<(PathBuf, u64)> {
    if let Some(url) = file.and_then(crate::object::url_of) {
        debug_assert!(!create, "--create is refused for a URL");
        let nblocks = crate::object::object_len(url)? / block_size as u64;
        if nblocks == 0 {
            return Err(io::Error::other(format!(
                "{url} holds no whole {block_size}-byte block"
            )));
        }
        return Ok((PathBuf::from(url), nblocks));
    }
    let path = match file {
        Some(p) => p.to_path_buf(),
        None => data_dir().join(format!("seqscan-{}.dat", format_size(size))),
    };
    let existing = match std::fs::metadata(&path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let len = match (file, existing) {
        // A file the user named is scanned as it is, never rewritten.
        (Some(_), Some(m)) => m.len(),
        (Some(_), None) if !create => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} does not exist (to write a {} stamped data file there, add --create)",
                    path.display(),
                    format_size(size)
                ),
            ))
        }
        (_, existing) => {
            if existing.is_none() {
                eprintln!(
                    "{program}: creating {} ({}) …",
                    path.display(),
                    format_size(size)
                );
            }
            match ensure_stamped(&path, size, block_size, DEFAULT_SEED)? {
                Ensured::Created => size,
                Ensured::Existing => std::fs::metadata(&path)?.len(),
            }
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
/// an error (it is never overwritten).
///
/// A new file is written only if its file system has `bytes` free (an error
/// names the path, the size asked for and the space free), with 8 MiB writes
/// to a temporary name, fsynced and renamed into place, so an interrupted
/// run never leaves a short file behind: on an error the temporary file is
/// removed, and a SIGINT, SIGTERM or SIGHUP that arrives while it is written
/// removes it and then ends the process by that signal (the status a shell
/// reports as 128 + the signal number). Signals the process ignored when
/// the first file was created stay ignored.
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
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let free = free_bytes(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("free space of {}: {e}", dir.display())))?;
    if free < bytes {
        return Err(io::Error::other(format!(
            "not enough free space to create {}: {} asked for, {} free on {}",
            path.display(),
            format_size(bytes),
            format_approx(free),
            dir.display()
        )));
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    // From here on a signal that would end the process is held off until the
    // temporary file is gone (or in place under its final name).
    let creating = interrupt::Creating::begin()?;
    let result = (|| {
        let mut f = File::create(&tmp)?;
        let chunk_blocks = ((8 << 20) / block_size).max(1);
        let mut buf = vec![0u8; chunk_blocks * block_size];
        let nblocks = bytes / block_size as u64;
        let mut b = 0u64;
        while b < nblocks {
            if creating.caught().is_some() {
                return Err(interrupted());
            }
            let n = (nblocks - b).min(chunk_blocks as u64) as usize;
            for (i, page) in buf[..n * block_size].chunks_mut(block_size).enumerate() {
                stamp::fill(seed, b + i as u64, page);
            }
            f.write_all(&buf[..n * block_size])?;
            b += n as u64;
        }
        // Flushing a large file takes a while: a signal caught during the
        // last write ends the creation now, not after the flush.
        if creating.caught().is_some() {
            return Err(interrupted());
        }
        f.sync_all()?;
        if creating.caught().is_some() {
            return Err(interrupted());
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    // A signal caught while the file was written (also after the last check:
    // the file is then complete and stays) now takes its default effect.
    if let Some(sig) = creating.end() {
        interrupt::die(sig);
    }
    result.map(|()| Ensured::Created)
}

fn interrupted() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted by a signal")
}

/// Bytes an unprivileged user may still write on the file system of `dir`
/// (`statvfs`: `f_bavail` blocks of `f_frsize` bytes).
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that lives across the call, and
    // `st` is writable memory of the type `statvfs` fills in.
    let r = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `statvfs` returned 0, so it filled in `st`.
    let st = unsafe { st.assume_init() };
    // Both are `u64` on the 64-bit Linux targets this workspace runs on;
    // the conversion keeps narrower targets compiling.
    #[allow(clippy::useless_conversion)]
    let (blocks, frsize) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Ok(blocks.saturating_mul(frsize))
}

/// `bytes` in the largest binary unit it reaches, to one decimal
/// (`60.9GiB`), for messages about amounts that are not round.
fn format_approx(bytes: u64) -> String {
    for (unit, shift) in crate::args::UNITS {
        if bytes >= 1 << shift {
            return format!("{:.1}{unit}", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes}B")
}

/// Holding off SIGINT, SIGTERM and SIGHUP while a data file is written.
///
/// The handlers (signal-hook's, installed once, when the first file is
/// created) only store to atomics, which is async-signal-safe: while a file
/// is being created the signal's number is recorded for the writer loop to
/// act on; at any other time the signal's default action is run at once
/// (signal-hook's `emulate_default_handler`: default disposition, raise),
/// so the program still dies by the signal as it would without a handler.
mod interrupt {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use std::io;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};

    struct State {
        /// The last signal caught while a file was being created (0: none).
        caught: Arc<AtomicUsize>,
        /// No file is being created: a signal takes its default action.
        idle: Arc<AtomicBool>,
        /// Files being created now (by any thread).
        active: Mutex<usize>,
    }

    fn state() -> io::Result<&'static State> {
        static STATE: OnceLock<Result<State, String>> = OnceLock::new();
        STATE
            .get_or_init(|| {
                let s = State {
                    caught: Arc::new(AtomicUsize::new(0)),
                    idle: Arc::new(AtomicBool::new(true)),
                    active: Mutex::new(0),
                };
                for sig in [SIGINT, SIGTERM, SIGHUP] {
                    if ignored(sig) {
                        continue;
                    }
                    let n = sig.unsigned_abs() as usize;
                    signal_hook::flag::register_usize(sig, Arc::clone(&s.caught), n)
                        .and_then(|_| {
                            signal_hook::flag::register_conditional_default(
                                sig,
                                Arc::clone(&s.idle),
                            )
                        })
                        .map_err(|e| format!("installing a handler for signal {sig}: {e}"))?;
                }
                Ok(s)
            })
            .as_ref()
            .map_err(|e| io::Error::other(e.clone()))
    }

    /// Whether `sig` is ignored (`SIG_IGN`, e.g. inherited from `nohup` or a
    /// shell's background job), which the program keeps.
    fn ignored(sig: libc::c_int) -> bool {
        let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: a null new action only queries the current one, which
        // `sigaction` writes to `old`, writable memory of the right type.
        let r = unsafe { libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) };
        // SAFETY: `old` was zero-initialised (a valid `sigaction`) and, on
        // success, filled in.
        r == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
    }

    /// A file being created: signals are recorded instead of acted on.
    pub(super) struct Creating {
        state: &'static State,
        ended: bool,
    }

    impl Creating {
        pub(super) fn begin() -> io::Result<Creating> {
            let state = state()?;
            let mut active = state.active.lock().unwrap_or_else(|e| e.into_inner());
            *active += 1;
            state.idle.store(false, Ordering::SeqCst);
            drop(active);
            Ok(Creating {
                state,
                ended: false,
            })
        }

        /// The signal caught since a creation began, if any.
        pub(super) fn caught(&self) -> Option<libc::c_int> {
            match self.state.caught.load(Ordering::SeqCst) {
                0 => None,
                n => libc::c_int::try_from(n).ok(),
            }
        }

        /// Ends this creation (signals take their default action again once
        /// no file is being created) and returns the signal caught, if any.
        pub(super) fn end(mut self) -> Option<libc::c_int> {
            self.finish();
            self.caught()
        }

        fn finish(&mut self) {
            if std::mem::replace(&mut self.ended, true) {
                return;
            }
            let mut active = self.state.active.lock().unwrap_or_else(|e| e.into_inner());
            *active -= 1;
            if *active == 0 {
                self.state.idle.store(true, Ordering::SeqCst);
            }
        }
    }

    impl Drop for Creating {
        fn drop(&mut self) {
            self.finish();
        }
    }

    /// Ends the process by `sig`'s default action (exit status 128 + `sig`
    /// if that action does not end it).
    pub(super) fn die(sig: libc::c_int) -> ! {
        let _ = signal_hook::low_level::emulate_default_handler(sig);
        std::process::exit(128 + sig)
    }
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
