//! An object whose store gives weak ETags (`W/"…"`, as HTTP servers do for
//! content they may transform): `If-Match` compares entity tags strongly,
//! so a weak tag never matches and cannot be what a GET asks for. Its
//! reads must still succeed, and a replacement must still fail them.

mod common;

use common::{drain, pool, runtime, stamped_bytes, watchdog};
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use pagestream::{source, ReadError, ReadStream};
use pagestream_object_store::ObjectStoreEngine;
use std::fmt;
use std::io;
use std::sync::Arc;

/// A store whose ETags are weak, and which compares `If-Match` as HTTP
/// says (strongly: a weak tag matches nothing).
#[derive(Debug)]
struct WeakETags(InMemory);

impl fmt::Display for WeakETags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WeakETags({})", self.0)
    }
}

fn weaken(mut meta: ObjectMeta) -> ObjectMeta {
    meta.e_tag = meta.e_tag.map(|e| format!("W/{e}"));
    meta
}

#[deny(clippy::missing_trait_methods)]
#[async_trait::async_trait]
impl ObjectStore for WeakETags {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if let Some(m) = &options.if_match {
            if m.split(',').all(|t| t.trim().starts_with("W/")) {
                return Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: format!("If-Match {m}: a weak entity tag never matches").into(),
                });
            }
        }
        let mut r = self.0.get_opts(location, options).await?;
        r.meta = weaken(r.meta);
        Ok(r)
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Vec<bytes::Bytes>> {
        self.0.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.0.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.0.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.0.rename_opts(from, to, options).await
    }
}

#[test]
fn weak_etag_object_is_read_and_its_replacement_fails_its_reads() {
    let rt = runtime();
    let engine = ObjectStoreEngine::builder()
        .handle(rt.handle().clone())
        .build()
        .expect("engine");
    let store = Arc::new(WeakETags(InMemory::new()));
    let n = 128;
    rt.block_on(watchdog("weak etag", async {
        let path = Path::from("t");
        store
            .put(&path, PutPayload::from(stamped_bytes(31, n, 0)))
            .await
            .expect("put");
        let dyn_store: Arc<dyn ObjectStore> = Arc::clone(&store) as _;
        let file = engine
            .open(dyn_store, path.clone(), "weak:///t")
            .await
            .expect("open");
        let pool = pool(64);
        let all: Vec<u64> = (0..n).collect();
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(2)
            .io_combine_limit(4)
            .build(source::forward(0..n))
            .expect("build");
        let scan = drain(&mut s, 31, &all, "weak etag").await;
        assert!(
            scan.errors.is_empty(),
            "{} reads failed, the first: {:?}",
            scan.errors.len(),
            scan.errors.first()
        );
        s.close().await;
        // Replaced (same size, new contents): the reads of blocks not in
        // the pool fail, naming the object; none hands out a new page.
        pool.invalidate(pagestream::EngineFile::id(&file));
        store
            .put(&path, PutPayload::from(stamped_bytes(32, n, 0)))
            .await
            .expect("replace");
        let mut s = ReadStream::builder(&pool, engine.clone(), file)
            .max_ios(2)
            .io_combine_limit(4)
            .build(source::forward(0..n))
            .expect("build");
        let scan = drain(&mut s, 31, &all, "weak etag, replaced").await;
        assert_eq!(scan.errors.len(), all.len(), "{:?}", scan.pages);
        for (i, e) in &scan.errors {
            assert!(
                matches!(ReadError::from_io(e), Some(ReadError::Io { .. })),
                "item {i}: {e}"
            );
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "item {i}: {e}");
            assert!(e.to_string().contains("weak:///t"), "item {i}: {e}");
        }
        s.close().await;
    }));
}
