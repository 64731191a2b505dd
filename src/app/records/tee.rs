//! Sits between the engine and the HTTP response: every event goes into the session's
//! record (and its live feed) and the session metrics, then on to the client. When the
//! client is gone the tee keeps draining, so the record still gets the session's end.

use std::path::PathBuf;
use std::sync::Arc;

use massgen_core::coordination::{
    AgentErrorKind, ConsensusReason, EventKind, SessionErrorKind, SessionEvent,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::SessionRecord;
use crate::telemetry::{SessionTracker, metrics};

pub struct SessionStart {
    pub record: Arc<SessionRecord>,
    pub tracker: Arc<SessionTracker>,
    pub files_dir: Option<PathBuf>,
    /// Cancelled when the shutdown's grace period is over.
    pub shutdown: CancellationToken,
    /// Each call's cost goes to its owner's spend of the day.
    pub spend: Arc<crate::app::spend::SpendLedger>,
}

pub fn tee(
    tasks: &TaskTracker,
    start: SessionStart,
    mut from_engine: mpsc::Receiver<Box<SessionEvent>>,
    buffer: usize,
) -> mpsc::Receiver<Box<SessionEvent>> {
    let (to_client, rx) = mpsc::channel(buffer);
    tasks.spawn(async move {
        let _active = Active::new();
        let SessionStart {
            record,
            tracker,
            files_dir,
            shutdown,
            spend,
        } = start;
        let mut client = Some(to_client);
        let mut votes = 0u32;
        let mut restarts = 0u32;
        while let Some(mut event) = from_engine.recv().await {
            // The record and the client both say who ended the session.
            if let EventKind::SessionFailed { error } = &mut event.kind
                && error.kind == SessionErrorKind::Cancelled
                && shutdown.is_cancelled()
            {
                crate::app::SHUTDOWN_CANCELLED.clone_into(&mut error.message);
            }
            match &event.kind {
                EventKind::Vote { .. } => votes += 1,
                EventKind::TurnStarted { turn, .. } if *turn > 1 => restarts += 1,
                EventKind::AgentFailed { error } => count_failed(error.kind),
                EventKind::TurnRestarted { .. } => count_cancelled("restart", 1),
                EventKind::Consensus { reason, cut, .. } if !cut.is_empty() => {
                    count_cancelled(cut_reason(*reason), cut.len());
                }
                EventKind::ToolCalled {
                    tool,
                    duration_ms,
                    error,
                    ..
                } => count_tool_call(tool, *duration_ms, error.is_some()),
                EventKind::SessionCompleted { .. } => {
                    finish(&tracker, "completed", votes, restarts)
                }
                EventKind::SessionFailed { error } => {
                    finish(&tracker, outcome(error.kind), votes, restarts);
                }
                EventKind::Usage {
                    usage, cost_usd, ..
                } => spend.add(
                    record.owner.owner(),
                    event.at_ms,
                    cost_usd.unwrap_or_default(),
                    usage.total_tokens,
                ),
                _ => {}
            }
            record.push(SessionEvent::clone(&event));
            if let Some(tx) = &client
                && tx.send(event).await.is_err()
            {
                client = None;
            }
        }
        if let Some(dir) = files_dir {
            write_files(dir, record).await;
        }
    });
    rx
}

fn finish(tracker: &SessionTracker, outcome: &str, votes: u32, restarts: u32) {
    let Some(m) = metrics() else { return };
    m.session_duration
        .with_label_values(&[outcome])
        .observe(tracker.wall_time().as_secs_f64());
    m.server_overhead.observe(tracker.overhead().as_secs_f64());
    m.votes_per_session.observe(f64::from(votes));
    m.restarts_per_session.observe(f64::from(restarts));
}

fn outcome(kind: SessionErrorKind) -> &'static str {
    match kind {
        SessionErrorKind::UpstreamFailed => "upstream_failed",
        SessionErrorKind::NoUsableAgent => "no_usable_agent",
        SessionErrorKind::Timeout => "timeout",
        SessionErrorKind::Cancelled => "cancelled",
        SessionErrorKind::BudgetExhausted => "budget_exhausted",
        SessionErrorKind::InvalidOutput => "invalid_output",
    }
}

fn count_failed(kind: AgentErrorKind) {
    let label = match kind {
        AgentErrorKind::Upstream => "upstream",
        AgentErrorKind::InvalidTurns => "invalid_turns",
        AgentErrorKind::TurnTimeout => "turn_timeout",
    };
    if let Some(m) = metrics() {
        m.agents_failed.with_label_values(&[label]).inc();
    }
}

fn count_cancelled(reason: &str, calls: usize) {
    if let Some(m) = metrics() {
        m.calls_cancelled
            .with_label_values(&[reason])
            .inc_by(u64::try_from(calls).unwrap_or(u64::MAX));
    }
}

/// Why running turns were cut when the deliberation ended.
fn cut_reason(reason: ConsensusReason) -> &'static str {
    match reason {
        ConsensusReason::Timeout => "timeout",
        ConsensusReason::Quorum => "quorum",
        ConsensusReason::Budget => "budget",
        ConsensusReason::Converged
        | ConsensusReason::SingleAgent
        | ConsensusReason::AllAnswered => "converged",
    }
}

fn count_tool_call(tool: &str, duration_ms: u64, failed: bool) {
    if let Some(m) = metrics() {
        let outcome = if failed { "error" } else { "ok" };
        m.tool_calls.with_label_values(&[tool, outcome]).inc();
        m.tool_call_duration
            .with_label_values(&[tool])
            .observe(duration_ms as f64 / 1000.0);
    }
}

async fn write_files(dir: PathBuf, record: Arc<SessionRecord>) {
    let written = tokio::task::spawn_blocking(move || {
        let json = super::record_json(&record);
        super::files::write(&dir, &record.id, &record.events(), &json)
    })
    .await;
    match written {
        Ok(Ok(path)) => tracing::debug!(path = %path.display(), "session record written"),
        Ok(Err(e)) => tracing::warn!("cannot write the session record files: {e}"),
        Err(e) => tracing::warn!("writing the session record files failed: {e}"),
    }
}

/// The active-sessions gauge, decremented however the session ends.
struct Active;

impl Active {
    fn new() -> Self {
        if let Some(m) = metrics() {
            m.active_sessions.inc();
        }
        Self
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(m) = metrics() {
            m.active_sessions.dec();
        }
    }
}
