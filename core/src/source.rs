//! Block sources: what tells a stream which block comes next.
//!
//! A [`BlockSource`] is PostgreSQL's read-stream callback. It returns the next
//! block number and optional per-block user data (`Data`), or `None` at the
//! end. The stream asks it only as far ahead as its look-ahead distance, so a
//! source may be lazy (a bitmap iterator, a shared parallel allocator).
//!
//! Provided: [`forward`], [`backward`], [`iter`] and [`with_data`].

use crate::BlockNumber;
use std::ops::Range;

/// What tells a stream which block to read next.
///
/// ```
/// use pagestream::source::{self, BlockSource};
/// let mut s = source::backward(3..6);
/// assert_eq!(s.next_block(), Some((5, ())));
/// assert_eq!(s.next_block(), Some((4, ())));
/// assert_eq!(s.next_block(), Some((3, ())));
/// assert_eq!(s.next_block(), None);
/// ```
pub trait BlockSource {
    /// User data carried with each block to its [`PageGuard`](crate::PageGuard).
    type Data;

    /// The next block, or `None` at the end of the stream.
    fn next_block(&mut self) -> Option<(BlockNumber, Self::Data)>;
}

impl<S: BlockSource + ?Sized> BlockSource for Box<S> {
    type Data = S::Data;
    fn next_block(&mut self) -> Option<(BlockNumber, S::Data)> {
        (**self).next_block()
    }
}

/// Blocks `range.start, range.start + 1, …, range.end - 1`.
#[derive(Debug, Clone)]
pub struct Forward(Range<BlockNumber>);

/// Blocks `range.end - 1` down to `range.start`.
#[derive(Debug, Clone)]
pub struct Backward(Range<BlockNumber>);

/// Every block of `range`, ascending.
pub fn forward(range: Range<BlockNumber>) -> Forward {
    Forward(range)
}

/// Every block of `range`, descending (a backward scan).
pub fn backward(range: Range<BlockNumber>) -> Backward {
    Backward(range)
}

impl BlockSource for Forward {
    type Data = ();
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.0.next().map(|b| (b, ()))
    }
}

impl BlockSource for Backward {
    type Data = ();
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.0.next_back().map(|b| (b, ()))
    }
}

/// Blocks from any iterator of block numbers (random, sparse, repeated …).
#[derive(Debug, Clone)]
pub struct Iter<I>(I);

/// Blocks from an iterator of block numbers.
///
/// ```
/// let s = pagestream::source::iter(vec![7u64, 3, 3, 9]);
/// # let _ = s;
/// ```
pub fn iter<I: IntoIterator<Item = BlockNumber>>(it: I) -> Iter<I::IntoIter> {
    Iter(it.into_iter())
}

impl<I: Iterator<Item = BlockNumber>> BlockSource for Iter<I> {
    type Data = ();
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.0.next().map(|b| (b, ()))
    }
}

/// Blocks and their user data from an iterator of `(block, data)` pairs.
#[derive(Debug, Clone)]
pub struct WithData<I>(I);

/// Blocks with per-block user data, e.g. a bitmap heap scan's matching
/// tuple offsets.
///
/// ```
/// let s = pagestream::source::with_data(vec![(4u64, "a"), (9, "b")]);
/// # let _ = s;
/// ```
pub fn with_data<D, I: IntoIterator<Item = (BlockNumber, D)>>(it: I) -> WithData<I::IntoIter> {
    WithData(it.into_iter())
}

impl<D, I: Iterator<Item = (BlockNumber, D)>> BlockSource for WithData<I> {
    type Data = D;
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, D)> {
        self.0.next()
    }
}
