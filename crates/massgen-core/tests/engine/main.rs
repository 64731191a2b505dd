//! The coordination engine's tests in one binary, one module per area, all against the
//! scripted providers of `massgen_core::testing` (feature `test-support`) in paused time:
//! no HTTP, no config, no processes. What needs the server (config files, the doors, the
//! real binary) is tested in the root crate's `tests/it`.
//!
//! Run one area with `cargo test -p massgen-core --test engine protocol::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is the test failure

mod efficiency;
mod identical;
mod images;
mod opaque;
mod options;
mod plain;
mod planning;
mod protocol;
mod tools;
