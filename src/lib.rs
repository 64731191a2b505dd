//! massgen: several LLMs answer one question together, behind the OpenAI Chat Completions
//! API.
//!
//! A request flows one way: [`server`] (HTTP edge) → the coordination engine
//! (`massgen_core::coordination`) → [`providers`] (upstream wire formats). [`config`] loads
//! panels; [`mock_upstream`] is the simulated model server used by `--demo`, tests and
//! benchmarks; [`cli`] wires it together.

pub mod cli;
pub mod config;
pub mod mock_upstream;
pub mod providers;
pub mod server;
pub mod telemetry;
pub mod tools;
