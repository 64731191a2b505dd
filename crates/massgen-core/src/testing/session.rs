//! A session over scripted agents: its spec (the usual question, a fixed wall clock) and a
//! run that collects its result and every event it emitted.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::scripted::Scripted;
use crate::coordination::{
    Clock, EventKind, OrchestratorOptions, SessionAgent, SessionError, SessionEvent, SessionInput,
    SessionSpec, SessionSummary, run_session,
};

/// The wall clock of every scripted session, so timestamps and the prompt's date are fixed.
pub struct FixedClock;

/// [`FixedClock`]'s time, in milliseconds since the epoch.
pub const FIXED_MS: u64 = 1_700_000_000_000;

impl Clock for FixedClock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(FIXED_MS)
    }
}

/// A session of `agents` (id, provider) asked "What is 2+2?".
pub fn spec(agents: &[(&str, &Scripted)], options: OrchestratorOptions) -> SessionSpec {
    SessionSpec {
        session_id: "sess_test".into(),
        agents: agents
            .iter()
            .map(|(id, p)| SessionAgent {
                id: id.to_string(),
                system_message: None,
                provider: Arc::new((*p).clone()),
                tools: None,
                price: None,
                vision: false,
            })
            .collect(),
        options,
        input: SessionInput {
            history: Vec::new(),
            question: "What is 2+2?".into(),
            extra_system: None,
            ..SessionInput::default()
        },
        stream_agent_text: false,
    }
}

/// A finished session: its result and every event, in order.
pub struct Run {
    pub result: Result<SessionSummary, SessionError>,
    pub events: Vec<SessionEvent>,
}

impl Run {
    pub fn kinds(&self) -> Vec<&EventKind> {
        self.events.iter().map(|e| &e.kind).collect()
    }
    /// The summary; the test fails here if the session did not complete.
    pub fn summary(&self) -> &SessionSummary {
        match &self.result {
            Ok(summary) => summary,
            Err(e) => panic!("the session failed: {e:?}"),
        }
    }
    /// The error; the test fails here if the session completed.
    pub fn error(&self) -> &SessionError {
        match &self.result {
            Err(e) => e,
            Ok(summary) => panic!("the session completed: {summary:?}"),
        }
    }
    /// The `check` of every `turn_invalid` event of `label`, in order.
    pub fn invalid_checks(&self, label: &str) -> Vec<String> {
        self.kinds()
            .into_iter()
            .filter_map(|k| match k {
                EventKind::TurnInvalid { agent, check, .. } if agent.label == label => {
                    Some(check.clone())
                }
                _ => None,
            })
            .collect()
    }
}

pub async fn run(spec: SessionSpec) -> Run {
    run_with(spec, CancellationToken::new()).await
}

/// Runs `spec` to its end (or `cancel`). The channel holds every event a test's session
/// emits (4,096), so the session never waits on a reader and the events are read after.
pub async fn run_with(spec: SessionSpec, cancel: CancellationToken) -> Run {
    let (tx, mut rx) = mpsc::channel(4096);
    let result = run_session(spec, tx, cancel, Arc::new(FixedClock)).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(*e);
    }
    Run { result, events }
}
