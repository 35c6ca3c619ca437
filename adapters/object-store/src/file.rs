//! An object, as a file a stream reads.

use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, ObjectStore};
use pagestream::{EngineFile, FileId};
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// An object in an [`ObjectStore`], opened for streams: its store, its
/// location, and its length and version as `head` gave them when it was
/// opened ([`ObjectStoreEngine::open`](crate::ObjectStoreEngine::open)).
///
/// Its [`FileId`] is keyed by the object's name and version (ETag, or
/// size and modification time where the store has no ETag), so streams
/// over the same object share pages in a pool, and an object replaced
/// since is a new file. Cloning is cheap (one `Arc`).
#[derive(Clone)]
pub struct ObjectFile {
    inner: Arc<FileInner>,
}

pub(crate) struct FileInner {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) location: ObjectPath,
    /// What messages call the object: its URL, or `store/location`.
    pub(crate) name: String,
    /// `name` as a path, for [`EngineFile::path`].
    name_path: std::path::PathBuf,
    pub(crate) len: u64,
    /// The version every GET asks for: `If-Match` its ETag, or
    /// `If-Unmodified-Since` its modification time (see
    /// [`ObjectStoreEngine::open`](crate::ObjectStoreEngine::open)).
    pub(crate) conditions: GetOptions,
    id: FileId,
}

impl ObjectFile {
    pub(crate) fn new(
        store: Arc<dyn ObjectStore>,
        location: ObjectPath,
        name: String,
        len: u64,
        conditions: GetOptions,
        version: &str,
    ) -> Self {
        let id = FileId::keyed(&format!("{name}#{location}#{version}"));
        ObjectFile {
            inner: Arc::new(FileInner {
                store,
                location,
                name_path: std::path::PathBuf::from(&name),
                name,
                len,
                conditions,
                id,
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<FileInner> {
        &self.inner
    }

    /// The object's name in messages: the URL it was opened by, or the
    /// store and location.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The object's location in its store.
    pub fn location(&self) -> &ObjectPath {
        &self.inner.location
    }

    /// The store holding the object.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The object's length in bytes when it was opened.
    pub fn len(&self) -> u64 {
        self.inner.len
    }

    /// Whether the object was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
}

impl fmt::Debug for ObjectFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectFile")
            .field("name", &self.inner.name)
            .field("len", &self.inner.len)
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl EngineFile for ObjectFile {
    fn id(&self) -> FileId {
        self.inner.id
    }

    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.inner.len)
    }

    /// The object's name (its URL), for messages.
    fn path(&self) -> Option<&Path> {
        Some(&self.inner.name_path)
    }

    /// No kernel reads ahead of a GET: the planner keeps reads in flight
    /// for sequential runs too.
    fn kernel_readahead(&self) -> bool {
        false
    }
}
