//! Test support (feature `test-support`): a scripted [`Provider`](crate::provider::Provider)
//! and what the engine tests are written with. Each call's behaviour is a closure of the
//! request, so a script can react to the tools offered and the answers shown; every request
//! is recorded, and a drop guard counts the streams still alive. Sessions run under tokio's
//! paused time with a fixed wall clock, so they are deterministic and take no real time.
//!
//! `scripted.rs` is the provider, `scripts.rs` the steps of the usual calls (answer, vote,
//! present) and the usual panel member, `inspect.rs` reads a recorded request, `session.rs`
//! builds a session over scripted agents and runs it to its events. Used by this crate's
//! `tests/engine` and by the root crate's in-process tests of the doors.

mod inspect;
mod scripted;
mod scripts;
mod session;

pub use inspect::{is_presentation, shows, system_text, tool_names, user_text, vote_enum};
pub use scripted::{Scripted, Step};
pub use scripts::{
    CALL_USAGE, after, answer, begins, member, present, text_then, tool_call, upstream_error, vote,
};
pub use session::{FIXED_MS, FixedClock, Run, run, run_with, spec};
