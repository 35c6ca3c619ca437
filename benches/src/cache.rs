//! OS page-cache control for cold / warm runs: evict a file, measure how
//! much of it is resident (`mmap` + `mincore`), warm it with a read loop.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Where a scan's blocks are when its timed run starts (`--cache`). Each
/// program accepts some of these ([`Cache::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cache {
    /// As they are: nothing is evicted or read first.
    None,
    /// Evicted from the OS page cache ([`make_cold`], checked with
    /// `mincore`).
    Cold,
    /// In the OS page cache ([`make_warm`]: evicted, then read whole in
    /// order, checked).
    Warm,
    /// In pagestream's buffer pool: a first scan fills a pool holding every
    /// block, the timed second one must read nothing (a program without a
    /// pool, such as a baseline: the OS page cache, as warm).
    Hot,
}

impl Cache {
    /// `none`, `cold`, `warm` or `hot`.
    pub const fn name(self) -> &'static str {
        match self {
            Cache::None => "none",
            Cache::Cold => "cold",
            Cache::Warm => "warm",
            Cache::Hot => "hot",
        }
    }

    /// Whether a run in this state can run on `rt`: warm means the OS page
    /// cache, which glommio's O_DIRECT-only reads bypass.
    pub fn runs_on(self, rt: pagestream_runtimes::Runtime) -> bool {
        self != Cache::Warm || rt.supports_buffered()
    }

    /// Parses `s` as one of `accepted`, or as `all` when `all` lists what
    /// that means; the error names what is accepted ("expected cold, warm,
    /// hot or all").
    pub fn parse(s: &str, accepted: &[Cache], all: Option<&[Cache]>) -> Result<Vec<Cache>, String> {
        if let Some(c) = accepted.iter().find(|c| c.name() == s) {
            return Ok(vec![*c]);
        }
        match all {
            Some(all) if s == "all" => Ok(all.to_vec()),
            _ => {
                let mut names: Vec<&str> = accepted.iter().map(|c| c.name()).collect();
                if all.is_some() {
                    names.push("all");
                }
                let last = names.pop().unwrap_or_default();
                Err(format!("{s:?}: expected {} or {last}", names.join(", ")))
            }
        }
    }
}

/// Writes back and drops `file`'s pages from the OS page cache
/// (`fsync`, then `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file).
/// Pages another process has mapped or locked may stay; check with
/// [`resident_fraction`].
pub fn evict(file: &File) -> io::Result<()> {
    file.sync_all()?;
    // SAFETY: posix_fadvise takes no pointers; a bad fd gives an error code.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// [`evict`]s `file` (found at `path`, named in the error) and checks that
/// at most 1% of it stays resident; returns the fraction resident.
///
/// Pages still being read (kernel read-ahead a previous run started, which
/// may outlive that run by a few milliseconds) are locked and cannot be
/// dropped yet: the eviction is retried, waiting 10, 20, 40, 80, 160, …
/// ms in between (about 1.1 s in all), before giving up with an error.
pub fn make_cold(file: &File, path: &Path) -> io::Result<f64> {
    let mut resident = 0.0;
    for attempt in 0..10u32 {
        evict(file)?;
        resident = resident_fraction(file)?;
        if resident <= 0.01 {
            return Ok(resident);
        }
        std::thread::sleep(std::time::Duration::from_millis(10 << attempt.min(4)));
    }
    Err(io::Error::other(format!(
        "cannot make {} cold: {:.1}% of it is still in the page cache after \
         POSIX_FADV_DONTNEED, retried for about a second (mapped or locked by another process?)",
        path.display(),
        resident * 100.0
    )))
}

/// The fraction (0.0–1.0) of `file`'s pages resident in the OS page cache,
/// measured with `mmap` + `mincore`. An empty file counts as 0.
pub fn resident_fraction(file: &File) -> io::Result<f64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0.0);
    }
    let len = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
    // SAFETY: sysconf takes no pointers.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // SAFETY: a fresh shared read-only mapping of `len` bytes of an open
    // file at offset 0; we never dereference it (mincore only inspects the
    // page tables) and unmap it below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `addr..addr+len` is the mapping made above; `vec` has one byte
    // per page of it, as mincore requires.
    let r = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = (r != 0).then(io::Error::last_os_error);
    // SAFETY: unmaps exactly the mapping made above, which nothing uses now.
    unsafe { libc::munmap(addr, len) };
    if let Some(e) = err {
        return Err(e);
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count();
    Ok(resident as f64 / pages as f64)
}

/// Makes `file` (found at `path`, named in errors) warm from a known state:
/// evicted first where it can be ([`evict`], best effort: a file on tmpfs,
/// or mapped or locked by another process, stays cached, and its state is
/// then what it is), then read whole in order ([`warm`]), so that the
/// kernel's read-ahead caches it in large folios whatever cached it before;
/// checks that at least 99% stays resident (reading it again, up to 3
/// reads in all, if not) and returns the fraction resident.
///
/// What earlier runs leave in the page cache changes how fast it is
/// copied from: the same 1 GiB file, wholly resident either way, was
/// copied 30–35% slower by every engine and by a plain `read()` loop after
/// backward and random buffered scans had cached it piece by piece than
/// after one sequential read (`seqscan --cache warm` over two copies of the
/// file, 5 interleaved rounds). Warm runs start from the same state.
pub fn make_warm(file: &File, path: &Path) -> io::Result<f64> {
    if file.metadata()?.len() == 0 {
        return Ok(0.0);
    }
    // Not `make_cold`: a file that cannot be evicted can still be warm.
    let _ = evict(file);
    let mut resident = 0.0;
    // Memory pressure, or a proactive reclaimer (DAMON's `pageout`), may
    // take pages back right after they were read: read again, then give up.
    for _ in 0..WARM_ATTEMPTS {
        warm(file).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot read {} to warm it: {e}", path.display()),
            )
        })?;
        resident = resident_fraction(file)?;
        if resident >= 0.99 {
            return Ok(resident);
        }
    }
    Err(io::Error::other(format!(
        "cannot keep {} warm: only {:.1}% of it stays in the page cache after reading it \
         {WARM_ATTEMPTS} times (memory pressure?)",
        path.display(),
        resident * 100.0
    )))
}

/// Whole reads [`make_warm`] makes before it gives up.
const WARM_ATTEMPTS: usize = 3;

/// Reads all of `file` from the start with 128 KiB `read`s (to bring it into
/// the page cache). Returns the bytes read.
///
/// The buffer is 4096-aligned and small: here a copy into a 1 MiB buffer
/// at `malloc`'s 16-byte offset ran about 5x slower than into an aligned
/// 128 KiB one, and the warm-up dominated profiles of warm scans.
pub fn warm(file: &File) -> io::Result<u64> {
    const CHUNK: usize = 128 << 10;
    let mut f = file;
    let mut storage = vec![0u8; CHUNK + 4096];
    let start = storage.as_ptr().align_offset(4096);
    let buf = &mut storage[start..start + CHUNK];
    let mut total = 0u64;
    std::io::Seek::seek(&mut f, io::SeekFrom::Start(0))?;
    loop {
        match f.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The cache states a scan program runs: `given` (`--cache`, if given) or
/// `default`, checked against `--direct` and the runtimes: `--direct` drops
/// the warm state (an error when warm is all that was asked for), and some
/// state must run on some runtime ([`Cache::runs_on`]).
pub fn check_modes(
    direct: bool,
    given: Option<Vec<Cache>>,
    default: &[Cache],
    runtimes: &[pagestream_runtimes::Runtime],
) -> Result<Vec<Cache>, crate::args::UsageError> {
    use crate::args::UsageError;
    let cache_given = given.is_some();
    let mut modes = given.unwrap_or_else(|| default.to_vec());
    if direct {
        if cache_given && modes == [Cache::Warm] {
            return Err(UsageError(
                "--cache warm means the OS page cache, which --direct bypasses".into(),
            ));
        }
        modes.retain(|&m| m != Cache::Warm);
    }
    if !runtimes
        .iter()
        .any(|&rt| modes.iter().any(|&m| m.runs_on(rt)))
    {
        return Err(UsageError(
            "--cache warm means the OS page cache, which glommio's O_DIRECT reads bypass; \
             nothing to run on glommio"
                .into(),
        ));
    }
    Ok(modes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_parse() {
        use Cache::*;
        let three = [Cold, Warm, Hot];
        assert_eq!(Cache::parse("warm", &three, Some(&three)), Ok(vec![Warm]));
        assert_eq!(
            Cache::parse("all", &three, Some(&three)),
            Ok(three.to_vec())
        );
        assert_eq!(
            Cache::parse("none", &three, Some(&three)),
            Err(r#""none": expected cold, warm, hot or all"#.to_string())
        );
        assert_eq!(
            Cache::parse("all", &[None, Cold, Warm], Option::None),
            Err(r#""all": expected none, cold or warm"#.to_string())
        );
    }
    use std::io::Write;

    #[test]
    fn evict_then_warm_changes_residency() {
        let path =
            std::env::temp_dir().join(format!("pagestream-cache-{}.dat", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; 4 << 20]).unwrap();
        drop(f);
        let f = File::open(&path).unwrap();
        evict(&f).unwrap();
        let cold = resident_fraction(&f).unwrap();
        assert_eq!(warm(&f).unwrap(), 4 << 20);
        let warmed = resident_fraction(&f).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(cold < 0.01, "still resident after eviction: {cold}");
        assert!(warmed > 0.99, "not resident after warming: {warmed}");
    }
}
