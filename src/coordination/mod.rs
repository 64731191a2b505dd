//! The coordination engine: one session of several agents that answer, read each other's
//! answers, vote, and let the winner present (see `docs/protocol.md` in the shared docs and
//! the README). Plain Rust over the [`Provider`](crate::providers::Provider) trait: no HTTP
//! types in here, so it is tested with scripted providers and paused time.

mod call;
mod emit;
mod engine;
pub mod events;
pub mod options;
mod present;
pub mod prompt;
pub mod session;
mod validate;

pub use events::*;
pub use options::*;
pub use session::{Clock, SessionAgent, SessionInput, SessionSpec, SystemClock, run_session};
