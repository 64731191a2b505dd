//! Numbers and timestamps events and hands them to the client's channel.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::events::{CallPhase, EventKind, SessionError, SessionEvent};
use super::spec::Clock;
use super::state::SessionState;
use crate::provider::Usage;

/// The receiver is gone (the client left) or the session was cancelled while waiting for
/// room in the channel: either way the session stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientGone;

pub struct Emitter {
    // Boxed: tokio's mpsc allocates 32 slots at once, and each session has several channels;
    // with 176-byte events that first block cost ~18 MB over 1,000 concurrent sessions
    // (benches/results/external.md).
    tx: mpsc::Sender<Box<SessionEvent>>,
    session_id: Arc<str>,
    clock: Arc<dyn Clock>,
    cancel: CancellationToken,
    seq: u64,
}

impl Emitter {
    pub fn new(
        tx: mpsc::Sender<Box<SessionEvent>>,
        session_id: Arc<str>,
        clock: Arc<dyn Clock>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            tx,
            session_id,
            clock,
            cancel,
            seq: 0,
        }
    }

    /// Waits for room in the channel, but not past a cancellation: a client that stopped
    /// reading must not keep the session (and its upstream calls) alive.
    pub async fn emit(&mut self, kind: EventKind) -> Result<(), ClientGone> {
        let event = Box::new(self.stamp(kind));
        if self.cancel.is_cancelled() {
            return Err(ClientGone);
        }
        // Room in the channel, nearly always: no waiter registered on the token (a
        // registration and its removal per token otherwise).
        let event = match self.tx.try_send(event) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(ClientGone),
            Err(mpsc::error::TrySendError::Full(event)) => event,
        };
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(ClientGone),
            sent = self.tx.send(event) => sent.map_err(|_| ClientGone),
        }
    }

    /// [`emit`](Self::emit) for the session: a client that is gone ends it as cancelled.
    pub(super) async fn send(
        &mut self,
        state: &SessionState,
        kind: EventKind,
    ) -> Result<(), SessionError> {
        self.emit(kind)
            .await
            .map_err(|ClientGone| state.cancelled())
    }

    /// Adds one call's usage to agent `i` and the session, and reports it.
    pub(super) async fn usage(
        &mut self,
        state: &mut SessionState,
        i: usize,
        phase: CallPhase,
        usage: Usage,
    ) -> Result<(), SessionError> {
        let cost_usd = state.add_usage(i, &usage);
        let agent = state.who(i).clone();
        let event = EventKind::Usage {
            agent,
            phase,
            usage,
            cost_usd,
        };
        self.send(state, event).await
    }

    /// Best effort, without waiting for room in the channel (used once the session is
    /// cancelled, when nobody may be reading any more).
    pub fn emit_now(&mut self, kind: EventKind) {
        let event = self.stamp(kind);
        let _ = self.tx.try_send(Box::new(event));
    }

    /// Resolves when the receiver is dropped.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// [`closed`](Self::closed) that borrows nothing, to be made once and polled across a
    /// loop that emits (it holds a sender, so the receiver sees the channel end only once
    /// this is dropped too).
    pub(super) fn closed_owned(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }

    fn stamp(&mut self, kind: EventKind) -> SessionEvent {
        let at_ms = self
            .clock
            .now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let event = SessionEvent {
            seq: self.seq,
            at_ms,
            session_id: self.session_id.clone(),
            kind,
        };
        self.seq += 1;
        event
    }
}
