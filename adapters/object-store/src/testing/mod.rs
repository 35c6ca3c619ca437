//! Test support (feature `testing`; not a stable API): servers to test
//! against, and a store wrapper that stalls GETs.
//!
//! - [`Nginx`] serves a directory over HTTP with range requests, on a free
//!   loopback port; it can be killed, restarted, made to answer 503 and
//!   made to send slowly.
//! - [`Moto`] is an S3-API server (moto's `moto_server`) on a free loopback
//!   port, with the `AWS_*` settings that reach it; it can be made to check
//!   credentials.
//! - [`Stalling`] delays one GET in `every` by `stall` before it answers,
//!   as a straggling object-store request does.
//!
//! A server that is not installed is an `Err` naming the program and the
//! package that provides it; tests pass it to
//! [`pagestream::testing::require`], which skips (or, under `CI=true`,
//! fails).

mod servers;
mod stall;

pub use servers::{Moto, Nginx, SLOW_RATE};
pub use stall::Stalling;
