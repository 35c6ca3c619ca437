//! Object URLs in the scan programs: every program that reads a file also
//! reads an object named by URL (`s3://bucket/key`, `http(s)://host/path`),
//! with the `object-store` runtime.
//!
//! What the programs share here:
//!
//! - [`runtimes_for`]: a URL is read by [`Runtime::ObjectStore`], chosen
//!   without `--runtime`; another runtime with a URL, or object-store with
//!   a local file, is a usage error naming both.
//! - [`not_for_url`]: the usage error for a flag that means nothing for an
//!   object (`--direct`, `--create`, the page-cache states `cold` and
//!   `warm`: there is no OS page cache between a scan and an object).
//! - [`url_modes`]: the cache states a scan of an object runs (`none`, read
//!   from the server; `hot`, from pagestream's pool).
//! - [`combine_for`], [`max_ios_for`]: `--combine` and `--max-ios` default
//!   to the engine's request size and GETs in flight for a URL
//!   ([`DEFAULT_READ_BYTES`], [`DEFAULT_READS_IN_FLIGHT`]) and to 16 for a
//!   local file.
//! - [`ObjectReader`]: an `ObjectStoreEngine` on the object-store runtime's
//!   tokio runtime, for the programs that drive their engine themselves
//!   (`backscan`, `bitmapscan`), and for an object's length
//!   ([`object_len`]).
//!
//! An `s3://` URL takes its endpoint, region and credentials from the
//! standard `AWS_*` environment variables (`AWS_ENDPOINT`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`).

use crate::args::UsageError;
use crate::cache::Cache;
use pagestream::EngineFile;
use pagestream_object_store::{ObjectFile, ObjectStoreEngine};
pub use pagestream_object_store::{DEFAULT_READS_IN_FLIGHT, DEFAULT_READ_BYTES};
pub use pagestream_runtimes::is_object_url;
use pagestream_runtimes::Runtime;
use std::io;
use std::path::Path;

/// `path` as an object URL, if it is one.
pub fn url_of(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| is_object_url(s))
}

/// The runtimes a program runs over `path` (`None`: its default local data
/// file): `given` (`--runtime`, if given) or `default`. For a URL that is
/// [`Runtime::ObjectStore`], whatever the default; a URL with `--runtime`
/// naming another runtime, or a local file with `--runtime object-store`,
/// is a usage error naming the runtime and the path.
pub fn runtimes_for(
    path: Option<&Path>,
    given: Option<Vec<Runtime>>,
    default: &[Runtime],
) -> Result<Vec<Runtime>, UsageError> {
    match path.and_then(url_of) {
        Some(url) => {
            if let Some(rt) = given.iter().flatten().find(|rt| !rt.reads_urls()) {
                return Err(UsageError(format!(
                    "--runtime {rt} reads local files, not the object URL {url}: a URL is read \
                     by the object-store runtime (leave --runtime out, or say --runtime \
                     object-store)"
                )));
            }
            Ok(vec![Runtime::ObjectStore])
        }
        None => {
            let runtimes = given.unwrap_or_else(|| default.to_vec());
            if runtimes.iter().any(|rt| rt.reads_urls()) {
                let what = match path {
                    Some(p) => format!("the local file {}", p.display()),
                    None => "the default local data file".to_string(),
                };
                return Err(UsageError(format!(
                    "--runtime object-store reads object URLs (s3://bucket/key, \
                     http(s)://host/path), not {what}"
                )));
            }
            Ok(runtimes)
        }
    }
}

/// The usage error for `flag`, which does not apply to the object `url`,
/// and `why`.
pub fn not_for_url(flag: &str, url: &str, why: &str) -> UsageError {
    UsageError(format!(
        "{flag} does not apply to the object URL {url}: {why}"
    ))
}

/// Why `--direct` does not apply to an object.
pub const NO_DIRECT: &str = "O_DIRECT bypasses the OS page cache, and an object is not read \
                             through one (leave --direct out)";

/// Why `--create` does not apply to an object.
pub const NO_CREATE: &str = "data files are created on local paths only (upload the object, or \
                             leave --create out)";

/// The cache states a scan of the object `url` runs: `given` (`--cache`,
/// if given) or `default`. `cold` and `warm` are states of the OS page
/// cache, which an object is not read through: a usage error saying so
/// (`none` reads every block from the server into an empty pool; `hot`
/// reads nothing, from a pool holding the blocks).
pub fn url_modes(
    url: &str,
    given: Option<Vec<Cache>>,
    default: &[Cache],
) -> Result<Vec<Cache>, UsageError> {
    let modes = given.unwrap_or_else(|| default.to_vec());
    let page_cache: Vec<&str> = modes
        .iter()
        .filter(|m| matches!(m, Cache::Cold | Cache::Warm))
        .map(|m| m.name())
        .collect();
    if !page_cache.is_empty() {
        return Err(not_for_url(
            &format!("--cache {}", page_cache.join(",")),
            url,
            "cold and warm are states of the OS page cache, which an object is not read \
             through; use none (every block from the server) or hot (from the pool)",
        ));
    }
    Ok(modes)
}

/// `--combine` as given, or the default: the object-store engine's request
/// size ([`DEFAULT_READ_BYTES`]) in blocks of `block_size` for an `object`
/// (a URL), 16 for a local file.
pub fn combine_for(object: bool, given: Option<usize>, block_size: usize) -> usize {
    given.unwrap_or(if object {
        (DEFAULT_READ_BYTES / block_size.max(1)).clamp(1, pagestream::MAX_IO_COMBINE_LIMIT)
    } else {
        16
    })
}

/// `--max-ios` as given, or the default: the object-store engine's GETs in
/// flight ([`DEFAULT_READS_IN_FLIGHT`]) for an `object` (a URL), 16 for a
/// local file.
pub fn max_ios_for(object: bool, given: Option<usize>) -> usize {
    given.unwrap_or(if object {
        DEFAULT_READS_IN_FLIGHT.min(pagestream::MAX_IOS)
    } else {
        16
    })
}

/// An [`ObjectStoreEngine`] on a tokio runtime of its own, the one
/// [`Runtime::ObjectStore`] runs on
/// ([`object_store_tokio`](pagestream_runtimes::object_store_tokio)): its
/// GETs are tasks on that runtime's workers, so a stream over it may be
/// polled by any executor (`futures::executor::block_on`).
#[derive(Debug)]
pub struct ObjectReader {
    rt: tokio::runtime::Runtime,
    engine: ObjectStoreEngine,
}

impl ObjectReader {
    /// Starts the runtime and the engine.
    pub fn start() -> io::Result<ObjectReader> {
        let rt = pagestream_runtimes::object_store_tokio()?;
        let engine = ObjectStoreEngine::builder()
            .handle(rt.handle().clone())
            .build()?;
        Ok(ObjectReader { rt, engine })
    }

    /// The engine (clones share its stores and counters).
    pub fn engine(&self) -> ObjectStoreEngine {
        self.engine.clone()
    }

    /// Opens the object `url` names (a `HEAD`).
    pub fn open(&self, url: &str) -> io::Result<ObjectFile> {
        self.rt.block_on(self.engine.open_url(url))
    }
}

/// The length of the object `url` names, from a `HEAD` (an error naming
/// the URL if it is missing or the server cannot be reached).
pub fn object_len(url: &str) -> io::Result<u64> {
    ObjectReader::start()?.open(url)?.byte_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_picks_object_store_and_refuses_other_runtimes() {
        let url = Path::new("s3://bucket/base/5/16384");
        let local = Path::new("/data/t.dat");
        let all = Runtime::ALL;
        assert_eq!(
            runtimes_for(Some(url), None, &all).unwrap(),
            [Runtime::ObjectStore]
        );
        assert_eq!(
            runtimes_for(Some(url), Some(vec![Runtime::ObjectStore]), &all).unwrap(),
            [Runtime::ObjectStore]
        );
        let e = runtimes_for(Some(url), Some(vec![Runtime::ThreadPool]), &all).unwrap_err();
        assert!(
            e.0.contains("--runtime threadpool")
                && e.0.contains("s3://bucket/base/5/16384")
                && e.0.contains("object-store"),
            "{e}"
        );
        assert_eq!(runtimes_for(Some(local), None, &all).unwrap(), all);
        assert_eq!(runtimes_for(None, None, &all).unwrap(), all);
        let e = runtimes_for(Some(local), Some(vec![Runtime::ObjectStore]), &all).unwrap_err();
        assert!(
            e.0.contains("/data/t.dat") && e.0.contains("object-store"),
            "{e}"
        );
        assert!(runtimes_for(None, Some(vec![Runtime::ObjectStore]), &all).is_err());
    }

    #[test]
    fn page_cache_states_are_refused_for_urls() {
        let url = "http://127.0.0.1:9/t.dat";
        assert_eq!(
            url_modes(url, None, &[Cache::None, Cache::Hot]).unwrap(),
            [Cache::None, Cache::Hot]
        );
        let e = url_modes(url, Some(vec![Cache::Cold, Cache::Warm, Cache::Hot]), &[]).unwrap_err();
        assert!(
            e.0.contains("--cache cold,warm") && e.0.contains(url),
            "{e}"
        );
    }

    #[test]
    fn defaults_follow_the_file() {
        assert_eq!(combine_for(true, None, 8192), DEFAULT_READ_BYTES / 8192);
        assert_eq!(combine_for(false, None, 8192), 16);
        assert_eq!(combine_for(true, Some(4), 8192), 4);
        assert_eq!(max_ios_for(true, None), DEFAULT_READS_IN_FLIGHT);
        assert_eq!(max_ios_for(false, None), 16);
        assert_eq!(max_ios_for(false, Some(0)), 0);
    }
}
