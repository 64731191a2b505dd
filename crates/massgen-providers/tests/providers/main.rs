//! The provider tests in one binary: one module per wire format (recorded streams decoded
//! cut at several sizes, request snapshots, errors and retries against a scripted loopback
//! upstream), the replays of the shared recorded traffic ([`conformance`],
//! [`native_conformance`]), whole (non-streamed) responses in every format ([`whole`]); the
//! helpers they share in [`support`]. The provider tests that need the application's config
//! stay in the root crate (`tests/it/provider_config.rs`).
//!
//! Run one area with `cargo test -p massgen-providers --test providers anthropic::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is the test failure

mod support;

mod anthropic;
mod azure;
mod chat_completions;
mod conformance;
mod gemini;
mod native_conformance;
mod responses;
mod whole;
