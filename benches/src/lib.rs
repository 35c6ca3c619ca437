//! `pagestream-bench`: pagestream on every runtime against what a user would
//! use instead, and against fio, in one tool. The binary's documentation
//! (`src/main.rs`) explains the method; this library holds its parts so the
//! tests can reach them.
//!
//! - [`pattern`]: forward, backward, random, bitmap block lists;
//! - [`scan`]: one measured configuration (cache preparation, pagestream
//!   engines through `pagestream-runtimes`), [`scan::RunResult`] and its JSON;
//! - [`baselines`]: pread loop, fadvise prefetch, tokio::fs, glommio's readers;
//! - [`fio`]: running fio and parsing its JSON;
//! - [`cli`]: the command line;
//! - [`report`]: the standard matrix, its tables, JSON and charts;
//! - [`doc`]: the report as `docs/benchmarks.md` and the README's headline.

#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![allow(async_fn_in_trait, clippy::future_not_send)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod baselines;
pub mod chart;
pub mod cli;
pub mod doc;
pub mod fio;
pub mod pattern;
pub mod report;
pub mod scan;
