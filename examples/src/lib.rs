//! Shared code of the example programs (`seqscan`, and later `backscan`,
//! `bitmapscan`, `pgcount`, `remote`):
//!
//! - [`args`]: a small command-line parser (flags, sizes, numbers) whose
//!   errors print a clear message and exit with code 2;
//! - [`data`]: stamped data files, created once under the workspace's
//!   `target/pagestream-data/`;
//! - [`cache`]: OS page-cache control: evict, measure residency (`mincore`),
//!   warm;
//! - [`checksum`]: the per-page checksum every scan computes, so runs over
//!   the same blocks can be compared;
//! - [`report`]: timing rows, medians, and JSON output;
//! - [`heap`]: PostgreSQL heap pages, parsed and checked, for `pgcount`.

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod args;
pub mod cache;
pub mod checksum;
pub mod data;
pub mod heap;
pub mod report;
