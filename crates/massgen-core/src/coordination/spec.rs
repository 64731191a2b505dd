//! What a session runs on: its agents, its options and the client's input, plus the clock
//! and answer-check seams. The session loop itself is `engine.rs`; how a structured answer
//! is asked for and checked is `structured.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;

use super::agent_tools::AgentTools;
use super::client_tools::ClientTools;
use super::options::OrchestratorOptions;
use crate::provider::{Image, Message, OutputFormat, Price, Provider, Sampling};

/// Wall-clock seam (timestamps and the date in the prompt).
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// One participant of a session, in config order.
#[derive(Debug, Clone)]
pub struct SessionAgent {
    pub id: String,
    pub system_message: Option<String>,
    pub provider: Arc<dyn Provider>,
    /// The agent's own tools (MCP), used inside its turns; `None` for none.
    pub tools: Option<Arc<dyn AgentTools>>,
    /// What its model costs; `None` when unknown (its cost is then reported as unknown).
    pub price: Option<Price>,
    /// Its model can see images: it gets the client's images, the others a note instead.
    pub vision: bool,
}

/// What the client asked, split the way the prompt needs it.
#[derive(Debug, Clone, Default)]
pub struct SessionInput {
    /// The request's messages before the last user message (no system messages).
    pub history: Vec<Message>,
    /// The last user message.
    pub question: String,
    /// The images attached to the last user message (those of earlier messages stay in
    /// `history`).
    pub question_images: Vec<Image>,
    /// The request's system messages, joined; given to every agent as extra system text.
    pub extra_system: Option<String>,
    /// Messages after the last user message: the assistant's earlier tool calls and the
    /// client's `role: "tool"` results for them (a follow-up after a tool-call answer).
    pub followup: Vec<Message>,
    /// The client's function tools (empty when the request had none).
    pub tools: ClientTools,
    /// The JSON the final answer must be (structured output), and how it is checked.
    pub output: Option<StructuredOutput>,
    /// Bounds on the presentation call: `max_output_tokens` and `stop` of its request.
    pub answer_bounds: AnswerBounds,
    /// Sampling settings for every call (empty unless the operator lets requests set them).
    pub sampling: Sampling,
    /// The client reads the answer as it streams. A plain call (a panel of one) asks its
    /// upstream for a stream only then, as the client would have; a coordination always
    /// streams (the deliberation is shown as it happens).
    pub streamed: bool,
    /// How many of `history`'s last messages came after the question (turns that are not
    /// tool calls or results, such as a prefilled assistant turn): a plain call puts them
    /// back after it.
    pub after_question: usize,
}

/// What the client's request bounds the final answer by, passed to the presentation call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerBounds {
    pub max_output_tokens: Option<u64>,
    pub stop: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub session_id: Arc<str>,
    pub agents: Vec<SessionAgent>,
    pub options: OrchestratorOptions,
    pub input: SessionInput,
    /// Emit `agent_delta` events with the agents' streamed text.
    pub stream_agent_text: bool,
}

/// Checks a final answer against what the client asked for. Asynchronous so that a
/// costly check (a large schema) can run off the engine's threads, under the caller's
/// time budget.
pub trait AnswerCheck: Send + Sync + fmt::Debug {
    fn check<'a>(&'a self, answer: &'a str) -> BoxFuture<'a, Result<(), Rejection>>;
}

/// Why a final answer was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The answer does not fit, in words a model can act on: worth one corrective call.
    Mismatch(String),
    /// The answer could not be checked (the check ran out of its budget): the session
    /// fails at once, as another answer would cost the same.
    Unchecked(String),
}

/// The JSON the final answer must be.
#[derive(Debug, Clone)]
pub struct StructuredOutput {
    pub format: OutputFormat,
    pub check: Arc<dyn AnswerCheck>,
    /// The client reads the answer as it streams: the presentation's text goes out as it
    /// arrives, so an invalid one cannot be taken back or retried (the session fails after
    /// it). Otherwise the text is held until it passed the check.
    pub streamed: bool,
}
