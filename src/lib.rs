//! massgen: several LLMs answer one question together, behind the OpenAI Chat Completions
//! and Responses APIs and Anthropic's Messages API (the doors of [`server`]).
//!
//! A request flows one way: [`server`] (HTTP edge) → the coordination engine
//! (`massgen_core::coordination`) → the upstream wire formats (`massgen_providers`).
//! [`config`] loads panels; [`app`] assembles what a session runs on; [`cli`] wires it
//! together, with the simulated model server (`massgen_simulator`) behind `--demo` and
//! `massgen mock-upstream`.

pub mod app;
pub mod cli;
pub mod config;
pub mod eval;
pub mod server;
pub mod telemetry;
