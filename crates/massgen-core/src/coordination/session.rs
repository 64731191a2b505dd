//! The session loop (protocol: "The session loop").

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::agent_tools::AgentTools;
use super::client_tools::ClientTools;
use super::events::{SessionError, SessionEvent, SessionSummary};
use super::options::OrchestratorOptions;
use crate::provider::{Message, Provider};

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
}

/// What the client asked, split the way the prompt needs it.
#[derive(Debug, Clone, Default)]
pub struct SessionInput {
    /// The request's messages before the last user message (no system messages).
    pub history: Vec<Message>,
    /// The last user message.
    pub question: String,
    /// The request's system messages, joined; given to every agent as extra system text.
    pub extra_system: Option<String>,
    /// Messages after the last user message: the assistant's earlier tool calls and the
    /// client's `role: "tool"` results for them (a follow-up after a tool-call answer).
    pub followup: Vec<Message>,
    /// The client's function tools (empty when the request had none).
    pub tools: ClientTools,
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

/// Runs one session to its end. Every event goes to `events` (the last one is
/// `session_completed` or `session_failed`); the same outcome is returned. Cancelling
/// `cancel`, or dropping the receiver, stops every upstream call at once.
pub async fn run_session(
    spec: SessionSpec,
    events: mpsc::Sender<SessionEvent>,
    cancel: CancellationToken,
    clock: Arc<dyn Clock>,
) -> Result<SessionSummary, SessionError> {
    super::engine::run(spec, events, cancel, clock).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn the_session_future_can_be_spawned() {
        let (tx, _rx) = mpsc::channel(1);
        let spec = SessionSpec {
            session_id: "sess_x".into(),
            agents: Vec::new(),
            options: OrchestratorOptions::default(),
            input: SessionInput::default(),
            stream_agent_text: false,
        };
        let fut = run_session(spec, tx, CancellationToken::new(), Arc::new(SystemClock));
        assert_send(&fut);
    }
}
