//! massgen: several LLMs answer one question together, behind the OpenAI Chat Completions
//! API.
//!
//! A request flows one way: [`server`] (HTTP edge) → the coordination engine
//! (`massgen_core::coordination`) → the upstream wire formats (`massgen_providers`).
//! [`config`] loads panels; [`app`] assembles what a session runs on; [`mock_upstream`] is
//! the simulated model server used by `--demo`, tests and benchmarks; [`cli`] wires it
//! together.

pub mod app;
pub mod cli;
pub mod config;
pub mod mock_upstream;
pub mod server;
pub mod telemetry;
