//! What a session runs on: its agents, its options and the client's input, plus the clock
//! seam. The session loop itself is `engine.rs`.

use std::sync::Arc;
use std::time::SystemTime;

use super::agent_tools::AgentTools;
use super::client_tools::ClientTools;
use super::options::OrchestratorOptions;
pub use super::structured::StructuredOutput;
use crate::provider::{Image, Message, Price, Provider, Sampling};

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
