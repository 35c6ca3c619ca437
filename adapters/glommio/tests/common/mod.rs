//! Shared by the integration tests: a `Send` wrapper for glommio's engine
//! and files, a thread that opens DMA files for harnesses that must produce
//! files synchronously, and the conformance harness.

#![allow(dead_code)]

use glommio::io::{DmaFile, OwnedDmaFile};
use glommio::{LocalExecutorBuilder, Placement};
use pagestream::testing::DiskFiles;
use pagestream::{EngineFile, FileId, IoEngine, ReadRequest};
use pagestream_glommio::{GlommioEngine, GlommioFile, GLOMMIO_MIN_IO_MEMORY};
use std::io;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread::{self, ThreadId};

/// A `!Send` value made `Send` by checking, at every use, that it is used on
/// the thread that made it (the `send_wrapper` pattern). Needed because the
/// conformance `Harness` asks for `Send` engines and files, while glommio's
/// are `!Send` by design; the suite never leaves the executor's thread.
pub struct Local<T> {
    owner: ThreadId,
    inner: ManuallyDrop<T>,
}

// SAFETY: the `T` inside is only ever touched — borrowed through `get`,
// cloned, or dropped — on the thread that created the wrapper: `get` panics
// elsewhere, and `Drop` leaks the value rather than drop it elsewhere. Moving
// the wrapper to another thread moves only its bytes, which is no access to
// the `T` (an `Rc` moved and never touched is not shared).
unsafe impl<T> Send for Local<T> {}

impl<T> Local<T> {
    pub fn new(inner: T) -> Self {
        Local {
            owner: thread::current().id(),
            inner: ManuallyDrop::new(inner),
        }
    }

    pub fn get(&self) -> &T {
        assert_eq!(
            thread::current().id(),
            self.owner,
            "a glommio engine or file was used off its executor's thread"
        );
        &self.inner
    }
}

impl<T: Clone> Clone for Local<T> {
    fn clone(&self) -> Self {
        Local::new(self.get().clone())
    }
}

impl<T> Drop for Local<T> {
    fn drop(&mut self) {
        if thread::current().id() == self.owner {
            // SAFETY: `inner` is dropped once, here, and never used after;
            // we are on the thread that owns it.
            unsafe { ManuallyDrop::drop(&mut self.inner) }
        }
        // Elsewhere: leak it rather than touch it off its thread.
    }
}

#[deny(clippy::missing_trait_methods)]
impl IoEngine for Local<GlommioEngine> {
    type File = Local<GlommioFile>;

    fn start_read(&self, file: &Local<GlommioFile>, req: ReadRequest) {
        self.get().start_read(file.get(), req);
    }

    fn hints(&self, file: &Local<GlommioFile>) -> pagestream::EngineHints {
        self.get().hints(file.get())
    }

    fn advise(&self, file: &Local<GlommioFile>, offset: u64, len: u64) -> bool {
        self.get().advise(file.get(), offset, len)
    }

    fn help(&self, file: &Local<GlommioFile>) -> bool {
        self.get().help(file.get())
    }

    fn name(&self) -> &'static str {
        self.get().name()
    }
}

impl EngineFile for Local<GlommioFile> {
    fn id(&self) -> FileId {
        self.get().id()
    }

    fn byte_len(&self) -> io::Result<u64> {
        self.get().byte_len()
    }

    fn kernel_readahead(&self) -> bool {
        self.get().kernel_readahead()
    }

    fn path(&self) -> Option<&Path> {
        EngineFile::path(self.get())
    }
}

type OpenReply = mpsc::Sender<io::Result<OwnedDmaFile>>;

/// A thread running its own small glommio executor that opens DMA files and
/// sends them back as `OwnedDmaFile`s: lets code on another executor get a
/// `DmaFile` synchronously (the conformance `Harness` makes files in a
/// synchronous method, called on the executor, which cannot block on its
/// own reactor).
pub struct Opener {
    tx: Mutex<mpsc::Sender<(PathBuf, OpenReply)>>,
}

impl Opener {
    pub fn start() -> Opener {
        let (tx, rx) = mpsc::channel::<(PathBuf, OpenReply)>();
        thread::spawn(move || {
            let ex = LocalExecutorBuilder::new(Placement::Unbound)
                .io_memory(GLOMMIO_MIN_IO_MEMORY)
                .make()
                .expect("opener executor");
            ex.run(async move {
                // Blocking in recv is fine: this executor has nothing else
                // to do between requests.
                while let Ok((path, reply)) = rx.recv() {
                    let r = DmaFile::open(&path)
                        .await
                        .map(OwnedDmaFile::from)
                        .map_err(io::Error::from);
                    let _ = reply.send(r);
                }
            });
        });
        Opener { tx: Mutex::new(tx) }
    }

    /// Opens `path` as a DMA file on the opener's executor; convert the
    /// result to a `DmaFile` on the calling executor.
    pub fn open(&self, path: PathBuf) -> io::Result<DmaFile> {
        let (reply, answer) = mpsc::channel();
        self.tx
            .lock()
            .unwrap()
            .send((path, reply))
            .expect("opener thread alive");
        answer.recv().expect("opener replies").map(DmaFile::from)
    }
}

/// The conformance harness over real O_DIRECT files read through glommio.
/// Must be called on the executor's thread.
pub fn dma_files(
    engine: GlommioEngine,
    name: &str,
) -> DiskFiles<Local<GlommioEngine>, impl Fn(&Path, usize) -> io::Result<Local<GlommioFile>>> {
    let opener = Opener::start();
    // Reads complete in glommio's tasks, after the poll that started them.
    DiskFiles::new(Local::new(engine), name, move |path: &Path, block_size| {
        let dma = opener.open(path.to_path_buf())?;
        Ok(Local::new(GlommioFile::from_dma(dma, block_size)?))
    })
    .reads_stay_pending(true)
}

/// Closes `files` (a harness's [`DiskFiles::take_files`]), on the executor.
pub async fn close_all(files: Vec<Local<GlommioFile>>) {
    for f in files {
        let f: GlommioFile = f.get().clone();
        let _ = f.close().await;
    }
}
