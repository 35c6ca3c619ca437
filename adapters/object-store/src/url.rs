//! Stores from URLs: `s3://bucket/key` and `http(s)://host/path`.

use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, RetryConfig};
use std::io;
use std::sync::Arc;
use url::Url;

/// Whether `s` is an object URL this crate opens (`s3://`, `http://`,
/// `https://`), as opposed to a local path.
///
/// ```
/// use pagestream_object_store::is_object_url;
/// assert!(is_object_url("s3://bucket/base/5/16384"));
/// assert!(is_object_url("http://127.0.0.1:8080/table.dat"));
/// assert!(!is_object_url("/var/lib/postgresql/base/5/16384"));
/// assert!(!is_object_url("table.dat"));
/// assert!(!is_object_url("donnée.dat"));
/// ```
pub fn is_object_url(s: &str) -> bool {
    ["s3://", "http://", "https://"]
        .iter()
        .any(|p| s.len() > p.len() && s.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes()))
}

/// The parts of an object URL: the store it names (`scheme://authority`),
/// and the object's location in it.
pub(crate) struct Parsed {
    pub(crate) store_key: String,
    pub(crate) location: ObjectPath,
    pub(crate) url: Url,
}

pub(crate) fn parse(s: &str) -> io::Result<Parsed> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{s}: {why}"));
    let url = Url::parse(s).map_err(|e| bad(format!("not a URL: {e}")))?;
    match url.scheme() {
        "s3" | "http" | "https" => {}
        other => {
            return Err(bad(format!(
                "unsupported scheme {other:?}: use s3://bucket/key or http(s)://host/path"
            )))
        }
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no bucket or host".into()))?;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad(
            "a query string or fragment is not part of an object's name: remove it".into(),
        ));
    }
    let location =
        ObjectPath::from_url_path(url.path()).map_err(|e| bad(format!("bad object path: {e}")))?;
    if location.as_ref().is_empty() {
        return Err(bad("no object key after the bucket or host".into()));
    }
    Ok(Parsed {
        store_key: format!("{}://{authority}", url.scheme()),
        location,
        url,
    })
}

/// Builds the store for a parsed URL: S3 with its endpoint, region and
/// credentials from the standard `AWS_*` environment variables
/// (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_REGION`, `AWS_ALLOW_HTTP`, …), or an HTTP server (plain `http://`
/// allowed: the URL says so).
pub(crate) fn build_store(
    p: &Parsed,
    retry: &RetryConfig,
    client: &ClientOptions,
) -> io::Result<Arc<dyn ObjectStore>> {
    let url = &p.url;
    let err = |e: object_store::Error| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: cannot set up the store: {e}", p.store_key),
        )
    };
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "s3" => Arc::new(
            AmazonS3Builder::from_env()
                .with_bucket_name(url.host_str().unwrap_or_default())
                .with_retry(retry.clone())
                // Replacing the client options would drop the
                // `AWS_ALLOW_HTTP` that `from_env` read into them.
                .with_client_options(client.clone().with_allow_http(env_allows_http()))
                .build()
                .map_err(err)?,
        ),
        _ => Arc::new(
            HttpBuilder::new()
                .with_url(p.store_key.clone())
                .with_retry(retry.clone())
                .with_client_options(client.clone().with_allow_http(url.scheme() == "http"))
                .build()
                .map_err(err)?,
        ),
    };
    Ok(store)
}

/// `AWS_ALLOW_HTTP` as object_store reads it: `true` (any case) or `1`.
fn env_allows_http() -> bool {
    std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}
