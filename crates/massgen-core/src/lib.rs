//! The provider-neutral core of massgen: what the engine and every upstream share
//! ([`provider`]: messages, tool calls, chunks, errors and the `Provider` trait), API keys
//! that never print ([`Secret`]), the tool names massgen reserves ([`tool_names`]), and the
//! coordination engine itself ([`coordination`]). With the `test-support` feature, `testing`
//! is the scripted provider the engine's tests (here and in the root crate) are written with.
//!
//! No HTTP in here (no axum, hyper or reqwest), no MCP SDK, no metrics or tracing exporters:
//! the engine is plain async Rust over the `Provider` trait, tested with scripted providers
//! and paused time.

pub mod coordination;
pub mod provider;
mod secret;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod tool_names;

pub use secret::Secret;
