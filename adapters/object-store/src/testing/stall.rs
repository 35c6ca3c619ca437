//! A store wrapper that stalls some GETs before they answer.

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Delays every `every`-th GET (`get_opts`, so `get_range` and the GETs
/// `get_ranges` makes too) by `stall` before passing it on: a straggler
/// whose first byte comes seconds late. Every other method is passed on
/// unchanged.
///
/// ```
/// use object_store::memory::InMemory;
/// use pagestream_object_store::testing::Stalling;
/// use std::time::Duration;
/// let store = Stalling::new(InMemory::new(), 20, Duration::from_secs(2));
/// assert_eq!(store.stalled(), 0);
/// ```
pub struct Stalling<T> {
    inner: T,
    every: u64,
    stall: Duration,
    gets: AtomicU64,
    stalled: Arc<AtomicU64>,
}

impl<T: ObjectStore> Stalling<T> {
    /// Wraps `inner`, stalling GETs `every`, `2 * every`, … (counting from
    /// 1) by `stall`. `every` 0 stalls none.
    pub fn new(inner: T, every: u64, stall: Duration) -> Self {
        Stalling {
            inner,
            every,
            stall,
            gets: AtomicU64::new(0),
            stalled: Arc::new(AtomicU64::new(0)),
        }
    }

    /// GETs stalled so far.
    pub fn stalled(&self) -> u64 {
        self.stalled.load(Ordering::Relaxed)
    }

    /// GETs seen so far.
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }
}

impl<T: fmt::Display> fmt::Display for Stalling<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Stalling({}, 1 in {} by {:?})",
            self.inner, self.every, self.stall
        )
    }
}

impl<T: fmt::Debug> fmt::Debug for Stalling<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stalling")
            .field("inner", &self.inner)
            .field("every", &self.every)
            .field("stall", &self.stall)
            .finish_non_exhaustive()
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait::async_trait]
impl<T: ObjectStore> ObjectStore for Stalling<T> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let n = self.gets.fetch_add(1, Ordering::Relaxed) + 1;
        if self.every != 0 && n % self.every == 0 && !options.head {
            self.stalled.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.stall).await;
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        // The default's coalescing, through this wrapper's GETs.
        object_store::coalesce_ranges(
            ranges,
            |range| async move {
                use object_store::ObjectStoreExt;
                self.get_range(location, range).await
            },
            object_store::OBJECT_STORE_COALESCE_DEFAULT,
        )
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

use bytes::Bytes;
