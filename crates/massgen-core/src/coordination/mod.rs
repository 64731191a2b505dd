//! The coordination engine: one session of several agents that answer, read each other's
//! answers, vote, and let the winner present; `docs/protocol.md` describes the behaviour it
//! implements. Plain Rust over the [`Provider`](crate::provider::Provider) trait: no HTTP
//! types in here, so it is tested with scripted providers and paused time.
//!
//! `state.rs` holds the protocol's rules over plain data (answers, votes, versions, tally);
//! `engine.rs` is the session loop that runs turns (`call.rs`, prompts from `prompt.rs`,
//! checks from `validate.rs`) and hands their outcome to the state; `present.rs` is the
//! final presentation; `emit.rs` numbers the events.
//!
//! Choices where the protocol is silent:
//! - Votes are checked against the labels offered in the turn (what the agent saw);
//!   `new_answer` duplicates and near-duplicates against the latest answers *now*, the
//!   agent's own included (an exact duplicate is a vote for its author, a near one is
//!   refused). A vote without `reason` is accepted with an empty reason.
//! - `new_answer` with blank `content` uses the text streamed in that attempt.
//! - An invalid attempt of a stale turn that could vote is not asked again: the agent
//!   restarts with the current answers (a first-answer turn is asked again as usual).
//! - `skip_coordination_rounds`: only the first agent takes part (the others are not in
//!   the record), and `min_live_agents` is taken as 1.
//! - A winner that has failed still gets the presentation call; an empty presentation
//!   counts as failed. On failure the stored answer follows whatever was already streamed.
//! - At the session timeout the running turns are cancelled (named in `consensus.cut`); the
//!   presentation then runs under `presentation_timeout` only.
//! - `max_new_answers_per_agent: 0` with no answer to vote for fails that agent.

pub mod agent_tools;
mod call;
pub mod client_tools;
mod emit;
mod engine;
mod evaluate;
pub mod events;
pub mod options;
pub mod own_names;
mod plain;
mod present;
pub mod prompt;
mod spec;
mod state;
pub mod structured;
mod validate;
mod watch;

pub use agent_tools::{AgentTools, OwnTool, SplitTools, ToolCallRecord, ToolLimits};
pub use client_tools::ClientTools;
pub use engine::run_session;
pub use events::{
    AgentError, AgentErrorKind, AgentRef, AgentSummary, Answer, AnswerContent, CallPhase,
    ConsensusReason, EventKind, PresentationMode, SessionError, SessionErrorKind, SessionEvent,
    SessionSummary, TallyEntry, VoteRecord,
};
pub use options::{FinalAnswerStrategy, OrchestratorOptions, Quorum, Strictness};
pub use plain::is_plain;
pub use spec::{
    AnswerBounds, AnswerCheck, Clock, Rejection, SessionAgent, SessionInput, SessionSpec,
    StructuredOutput, SystemClock,
};
