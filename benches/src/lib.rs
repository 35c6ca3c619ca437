//! `pagestream-bench`: pagestream on every runtime against what a user would
//! use instead, and against fio, in one tool. The binary's documentation
//! (`src/main.rs`) explains the method; this library holds its parts so the
//! tests can reach them.
//!
//! - [`pattern`]: forward, backward, random, bitmap block lists;
//! - [`scan`]: one measured configuration (cache preparation, pagestream
//!   engines through `pagestream-runtimes`), [`scan::RunResult`] and its JSON;
//! - [`baselines`]: pread loop, fadvise prefetch, tokio::fs, glommio's readers,
//!   tokio-uring used directly;
//! - [`fio`]: running fio and parsing its JSON;
//! - [`tokio_io_uring`]: tokio's own io_uring fs, a program built apart
//!   (`--cfg tokio_unstable`) and run per run;
//! - [`cli`]: the command line;
//! - [`report`]: the standard matrix, its tables, JSON and charts;
//! - [`doc`]: the report as `docs/benchmarks.md` and the README's headline;
//! - [`remote`]: the `remote` program's measurement, which the report runs
//!   in this process;
//! - [`soak`]: many streams on a small pool on every runtime for a while,
//!   with random drops, resets, timeouts and closes, every page verified.
//!
//! The scan programs (`seqscan`, `backscan`, `bitmapscan`, `prewarm`,
//! `pgcount`, `remote`, in `src/bin/`) share:
//!
//! - [`args`]: command-line value syntax (sizes, on/off, numbers) and usage
//!   errors that print one line and exit with code 2;
//! - [`data`]: stamped data files, created once under the workspace's
//!   `target/pagestream-data/`;
//! - [`cache`]: OS page-cache control: evict, measure residency (`mincore`),
//!   warm;
//! - [`object`]: object URLs (`s3://`, `http(s)://`) wherever a program
//!   takes a path: the object-store runtime, and the flags that do not
//!   apply to objects;
//! - [`checksum`]: the per-page checksum every scan computes, so runs over
//!   the same blocks can be compared;
//! - [`timing`]: timing rows, medians, and JSON output.

#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![allow(async_fn_in_trait, clippy::future_not_send)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod args;
pub mod baselines;
pub mod cache;
pub mod chart;
pub mod checksum;
pub mod cli;
pub mod data;
pub mod doc;
pub mod fio;
pub mod object;
pub mod pattern;
pub mod remote;
pub mod report;
pub mod scan;
pub mod soak;
pub mod timing;
pub mod tokio_io_uring;
