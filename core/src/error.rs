//! Typed errors: [`BuildError`] when a pool or stream is configured, and
//! [`ReadError`] while a stream runs. Both convert into [`std::io::Error`]
//! keeping a meaningful [`std::io::ErrorKind`]; [`ReadError::from_io`] gets
//! the typed error back out of the `io::Error` a stream yields.

use crate::BlockNumber;
use std::io;

/// A pool or stream was configured with values it cannot work with.
/// Returned by the builders before any I/O happens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// `block_size` must be a power of two of at least 512 bytes.
    #[error("block size {block_size} is not a power of two of at least 512 bytes")]
    BlockSize {
        /// The rejected value.
        block_size: usize,
    },
    /// A limit (a count or a time) that must be more than zero was zero.
    #[error("{what} must be more than zero (got 0)")]
    Zero {
        /// Which setting.
        what: &'static str,
    },
    /// A limit was larger than core supports.
    #[error("{what} = {value} is larger than the maximum {max}")]
    TooLarge {
        /// Which setting.
        what: &'static str,
        /// The rejected value.
        value: usize,
        /// The largest accepted value.
        max: usize,
    },
    /// The stream's block size differs from its pool's.
    #[error("stream block size {stream} differs from the pool's block size {pool}")]
    BlockSizeMismatch {
        /// The block size asked of the stream.
        stream: usize,
        /// The pool's block size.
        pool: usize,
    },
    /// The pool's memory could not be allocated.
    #[error("could not allocate {bytes} bytes for {frames} frames")]
    OutOfMemory {
        /// Frames asked for.
        frames: usize,
        /// Bytes that would take.
        bytes: usize,
    },
    /// A file stored in segments declared a segment size that is not a
    /// positive multiple of the block size.
    #[error("segment size {segment_bytes} bytes is not a positive multiple of the block size {block_size}")]
    SegmentSize {
        /// The file's segment size.
        segment_bytes: u64,
        /// The pool's block size.
        block_size: usize,
    },
    /// The file's length is not a multiple of the block size, and the
    /// stream was not asked to read the partial last block as a short page
    /// ([`StreamBuilder::short_last_page`](crate::StreamBuilder::short_last_page)).
    #[error(
        "{file} is {file_len} bytes, not a whole number of {block_size}-byte blocks: \
         its last {tail} bytes are a partial block (build the stream with \
         short_last_page(true) to read them as a short last page)"
    )]
    PartialBlock {
        /// The file: its path, or its id where the engine knows no path.
        file: String,
        /// Its length in bytes.
        file_len: u64,
        /// The pool's block size.
        block_size: usize,
        /// Bytes of the partial last block.
        tail: usize,
    },
    /// The engine could not tell the file's length, or open it.
    #[error("file: {source}")]
    File {
        /// What the engine said.
        #[source]
        source: io::Error,
    },
}

impl From<BuildError> for io::Error {
    fn from(e: BuildError) -> io::Error {
        let kind = match &e {
            BuildError::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            BuildError::File { source } => source.kind(),
            _ => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

/// What can go wrong while a stream runs. A stream yields these wrapped in an
/// [`io::Error`]; recover the typed value with [`ReadError::from_io`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The block source named a block at or past the end of the file.
    #[error("block {block} is past the end of the file ({file_len} bytes = {file_blocks} blocks of {block_size})")]
    PastEnd {
        /// The block asked for.
        block: BlockNumber,
        /// The file's length in bytes when the stream was built.
        file_len: u64,
        /// Blocks in the file (counting a partial last block the stream
        /// reads as a short page).
        file_blocks: u64,
        /// The block size.
        block_size: usize,
    },
    /// The file ended early: the engine read nothing at `block` although the
    /// file was long enough when the stream was built (it shrank).
    #[error("unexpected end of file at block {block} (offset {offset})")]
    UnexpectedEof {
        /// First block that could not be read.
        block: BlockNumber,
        /// Its byte offset.
        offset: u64,
    },
    /// The engine reported an I/O error reading `block` (alone: a combined
    /// read that fails is retried block by block, so the error names the
    /// block that fails by itself).
    #[error("reading block {block}: {source}")]
    Io {
        /// The block whose read failed.
        block: BlockNumber,
        /// What the engine said.
        #[source]
        source: io::Error,
    },
    /// Every frame of the pool is pinned and this stream holds none it could
    /// wait for, so it cannot make progress.
    #[error("buffer pool exhausted: {frames} frames, all pinned or being read")]
    PoolExhausted {
        /// The pool's size in frames.
        frames: usize,
    },
    /// The engine dropped a read of this stream without finishing it (for
    /// example because its runtime shut down).
    #[error("read of block {block} was cancelled by the engine")]
    Cancelled {
        /// First block of the cancelled read.
        block: BlockNumber,
    },
}

impl ReadError {
    /// The typed error inside an [`io::Error`] yielded by a stream, if any.
    ///
    /// ```
    /// use pagestream::ReadError;
    /// let e: std::io::Error = ReadError::PoolExhausted { frames: 8 }.into();
    /// assert!(matches!(ReadError::from_io(&e), Some(ReadError::PoolExhausted { frames: 8 })));
    /// ```
    pub fn from_io(e: &io::Error) -> Option<&ReadError> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<ReadError>())
    }

    /// The [`io::ErrorKind`] this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            ReadError::PastEnd { .. } => io::ErrorKind::InvalidInput,
            ReadError::UnexpectedEof { .. } => io::ErrorKind::UnexpectedEof,
            ReadError::Io { source, .. } => source.kind(),
            ReadError::PoolExhausted { .. } => io::ErrorKind::OutOfMemory,
            ReadError::Cancelled { .. } => io::ErrorKind::Interrupted,
        }
    }
}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}
