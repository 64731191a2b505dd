//! What every event of a session does before it reaches the client: it goes into the
//! session's record (and its live feed), the session metrics and the owner's spend. The
//! forwarder keeps feeding it after the client is gone, so the record gets the end.

use std::path::PathBuf;
use std::sync::Arc;

use massgen_core::coordination::{
    AgentErrorKind, ConsensusReason, EventKind, SessionErrorKind, SessionEvent,
};
use tokio_util::sync::CancellationToken;

use super::forward::Observe;
use super::store::{self, SessionRecord};
use crate::telemetry::{SessionTracker, metrics};

pub struct SessionStart {
    pub record: Arc<SessionRecord>,
    pub tracker: Arc<SessionTracker>,
    pub files_dir: Option<PathBuf>,
    /// Cancelled when the shutdown's grace period is over.
    pub shutdown: CancellationToken,
    /// Each call's cost goes to its owner's spend of the day.
    pub spend: Arc<super::spend::SpendLedger>,
}

/// A session's record, metrics and spend, fed one event at a time by the forwarder
/// ([`crate::app::forward`]).
pub struct SessionObserver {
    record: Arc<SessionRecord>,
    tracker: Arc<SessionTracker>,
    files_dir: Option<PathBuf>,
    shutdown: CancellationToken,
    spend: Arc<super::spend::SpendLedger>,
    votes: u32,
    restarts: u32,
    _active: Active,
}

impl SessionObserver {
    pub fn new(start: SessionStart) -> Self {
        let SessionStart {
            record,
            tracker,
            files_dir,
            shutdown,
            spend,
        } = start;
        Self {
            record,
            tracker,
            files_dir,
            shutdown,
            spend,
            votes: 0,
            restarts: 0,
            _active: Active::new(),
        }
    }
}

impl Observe<Box<SessionEvent>> for SessionObserver {
    fn see(&mut self, event: &mut Box<SessionEvent>) {
        // The record and the client both say who ended the session.
        if let EventKind::SessionFailed { error } = &mut event.kind
            && error.kind == SessionErrorKind::Cancelled
            && self.shutdown.is_cancelled()
        {
            crate::app::SHUTDOWN_CANCELLED.clone_into(&mut error.message);
        }
        match &event.kind {
            EventKind::Vote { .. } => self.votes += 1,
            EventKind::TurnStarted { turn, .. } if *turn > 1 => self.restarts += 1,
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
                finish(&self.tracker, "completed", self.votes, self.restarts);
            }
            EventKind::SessionFailed { error } => {
                finish(
                    &self.tracker,
                    outcome(error.kind),
                    self.votes,
                    self.restarts,
                );
            }
            EventKind::Usage {
                usage, cost_usd, ..
            } => self.spend.add(
                self.record.owner.owner(),
                event.at_ms,
                cost_usd.unwrap_or_default(),
                usage.total_tokens,
            ),
            _ => {}
        }
        self.record.push(SessionEvent::clone(event));
    }

    async fn end(self) {
        if let Some(dir) = self.files_dir {
            store::write_files(dir, self.record).await;
        }
    }
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
