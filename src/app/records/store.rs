use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};
use massgen_core::provider::Usage;
use tokio::sync::broadcast;

use crate::app::Caller;

/// Events kept per session; the rest (token deltas of a very long answer) are counted only.
const MAX_EVENTS: usize = 20_000;
/// Live subscribers that fall this far behind catch up from the stored events.
const LIVE_BUFFER: usize = 1024;

pub struct RecordStore {
    inner: Mutex<Inner>,
    max_sessions: usize,
    max_age: Duration,
    pub dir: Option<PathBuf>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Arc<str>, Arc<SessionRecord>>,
    order: VecDeque<Arc<str>>,
}

pub struct SessionRecord {
    pub id: Arc<str>,
    pub owner: Caller,
    pub info: SessionInfo,
    log: Mutex<Log>,
    live: broadcast::Sender<SessionEvent>,
}

/// What the request said about a session, for the session list and the record.
#[derive(Debug, Clone, Default)]
pub struct SessionInfo {
    /// The `model` the client asked for (`massgen`, `massgen/<name>`).
    pub model: String,
    /// The API the request came through (`chat_completions`, `responses`, `messages`).
    pub door: &'static str,
    /// The panel that ran it.
    pub panel: String,
    /// The last user message.
    pub question: String,
    /// What the request said about itself (Responses `metadata`, Anthropic
    /// `metadata.user_id`), bounded by the doors.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Unix time in milliseconds when the request arrived.
    pub created_ms: u64,
}

/// Kept up to date on every event so listing many sessions never rescans their events.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// `running`, `completed` or `failed`.
    pub status: &'static str,
    pub agents: Vec<AgentRef>,
    pub winner: Option<AgentRef>,
    pub usage: Usage,
    pub answers: u32,
    pub votes: u32,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
}

impl Summary {
    fn update(&mut self, event: &SessionEvent) {
        self.started_ms.get_or_insert(event.at_ms);
        match &event.kind {
            EventKind::SessionStarted { agents } => self.agents.clone_from(agents),
            EventKind::Answer { .. } => self.answers += 1,
            EventKind::Vote { .. } => self.votes += 1,
            EventKind::Consensus { winner, .. } => self.winner = Some(winner.clone()),
            EventKind::Usage { usage, .. } => self.usage.add(usage),
            EventKind::SessionCompleted { summary } => {
                self.status = "completed";
                self.winner = Some(summary.winner.clone());
                self.ended_ms = Some(event.at_ms);
            }
            EventKind::SessionFailed { .. } => {
                self.status = "failed";
                self.ended_ms = Some(event.at_ms);
            }
            _ => {}
        }
    }
}

struct Log {
    events: Vec<SessionEvent>,
    dropped: u64,
    finished: Option<Instant>,
    summary: Summary,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            dropped: 0,
            finished: None,
            summary: Summary {
                status: "running",
                ..Summary::default()
            },
        }
    }
}

impl RecordStore {
    pub fn new(max_sessions: usize, max_age: Duration, dir: Option<PathBuf>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_sessions: max_sessions.max(1),
            max_age,
            dir,
        }
    }

    pub fn insert(&self, id: Arc<str>, owner: Caller) -> Arc<SessionRecord> {
        self.insert_with(id, owner, SessionInfo::default())
    }

    pub fn insert_with(
        &self,
        id: Arc<str>,
        owner: Caller,
        info: SessionInfo,
    ) -> Arc<SessionRecord> {
        let record = Arc::new(SessionRecord {
            id: id.clone(),
            owner,
            info,
            log: Mutex::new(Log::default()),
            live: broadcast::channel(LIVE_BUFFER).0,
        });
        let mut inner = lock(&self.inner);
        inner.by_id.insert(id.clone(), record.clone());
        inner.order.push_back(id);
        while inner.order.len() > self.max_sessions {
            if let Some(old) = inner.order.pop_front() {
                inner.by_id.remove(&old);
            }
        }
        drop(inner);
        self.expire();
        record
    }

    /// The record of `id` if `caller` may read it (the creating key, or anyone on a server
    /// without keys). Someone else's record looks like a missing one.
    pub fn get(&self, id: &str, caller: &Caller) -> Option<Arc<SessionRecord>> {
        let record = lock(&self.inner).by_id.get(id).cloned()?;
        (record.owner == *caller).then_some(record)
    }

    /// The newest `limit` records `caller` may read, newest first.
    pub fn list(&self, caller: &Caller, limit: usize) -> Vec<Arc<SessionRecord>> {
        let inner = lock(&self.inner);
        inner
            .order
            .iter()
            .rev()
            .filter_map(|id| inner.by_id.get(id))
            .filter(|r| r.owner == *caller)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Drops finished records older than the maximum age.
    pub fn expire(&self) {
        let now = Instant::now();
        let mut inner = lock(&self.inner);
        let Inner { by_id, order } = &mut *inner;
        order.retain(|id| {
            let keep = by_id.get(id).is_some_and(|r| {
                lock(&r.log)
                    .finished
                    .is_none_or(|at| now.saturating_duration_since(at) < self.max_age)
            });
            if !keep {
                by_id.remove(id);
            }
            keep
        });
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SessionRecord {
    pub fn push(&self, event: SessionEvent) {
        let mut log = lock(&self.log);
        if matches!(
            event.kind,
            EventKind::SessionCompleted { .. } | EventKind::SessionFailed { .. }
        ) {
            log.finished = Some(Instant::now());
        }
        log.summary.update(&event);
        // Under the lock, so a subscriber's snapshot and its live feed never overlap or gap.
        let _ = self.live.send(event.clone());
        if log.events.len() < MAX_EVENTS || log.finished.is_some() {
            log.events.push(event);
        } else {
            log.dropped += 1;
        }
    }

    pub fn events(&self) -> Vec<SessionEvent> {
        lock(&self.log).events.clone()
    }

    pub fn summary(&self) -> Summary {
        lock(&self.log).summary.clone()
    }

    pub fn dropped(&self) -> u64 {
        lock(&self.log).dropped
    }

    pub fn is_finished(&self) -> bool {
        lock(&self.log).finished.is_some()
    }

    /// The events so far and, while the session runs, a feed of the ones that follow.
    pub fn subscribe(&self) -> (Vec<SessionEvent>, Option<broadcast::Receiver<SessionEvent>>) {
        let log = lock(&self.log);
        let live = log.finished.is_none().then(|| self.live.subscribe());
        (log.events.clone(), live)
    }

    /// Stored events after `seq` (a lagging subscriber catching up).
    pub fn events_after(&self, seq: Option<u64>) -> Vec<SessionEvent> {
        lock(&self.log)
            .events
            .iter()
            .filter(|e| seq.is_none_or(|s| e.seq > s))
            .cloned()
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::coordination::{SessionError, SessionErrorKind};
    use massgen_core::provider::Usage;

    fn event(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            seq,
            at_ms: 0,
            session_id: "s".into(),
            kind,
        }
    }

    fn failed() -> EventKind {
        EventKind::SessionFailed {
            error: SessionError {
                kind: SessionErrorKind::Cancelled,
                message: "gone".into(),
                agent_errors: vec![],
                usage: Usage::default(),
                cost_usd: None,
            },
        }
    }

    #[test]
    fn bounded_by_count_and_owned_by_the_creating_key() {
        let store = RecordStore::new(2, Duration::from_secs(60), None);
        store.insert("a".into(), Caller::default());
        store.insert("b".into(), Caller::default());
        store.insert("c".into(), Caller::default());
        assert_eq!(store.len(), 2);
        assert!(store.get("a", &Caller::default()).is_none());
        assert!(store.get("c", &Caller::default()).is_some());
        let owner = Caller {
            key: Some(crate::app::KeyId::from_index(0)),
        };
        store.insert("d".into(), owner);
        assert!(store.get("d", &owner).is_some());
        assert!(store.get("d", &Caller::default()).is_none());
    }

    #[test]
    fn finished_records_expire_running_ones_stay() {
        let store = RecordStore::new(10, Duration::ZERO, None);
        let done = store.insert("done".into(), Caller::default());
        store.insert("running".into(), Caller::default());
        done.push(event(0, failed()));
        store.expire();
        assert!(store.get("done", &Caller::default()).is_none());
        assert!(store.get("running", &Caller::default()).is_some());
    }

    #[test]
    fn list_is_newest_first_bounded_and_only_the_callers() {
        let store = RecordStore::new(10, Duration::from_secs(60), None);
        let owner = Caller {
            key: Some(crate::app::KeyId::from_index(0)),
        };
        for id in ["a", "b", "c"] {
            store.insert(id.into(), Caller::default());
        }
        store.insert("mine".into(), owner);
        let ids = |list: Vec<Arc<SessionRecord>>| {
            list.iter().map(|r| r.id.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(ids(store.list(&Caller::default(), 2)), ["c", "b"]);
        assert_eq!(ids(store.list(&owner, 10)), ["mine"]);
    }

    #[test]
    fn summary_follows_the_events() {
        let store = RecordStore::new(10, Duration::from_secs(60), None);
        let r = store.insert("s".into(), Caller::default());
        assert_eq!(r.summary().status, "running");
        let agent = AgentRef {
            agent_id: "a".into(),
            label: "agent1".into(),
        };
        r.push(event(
            0,
            EventKind::SessionStarted {
                agents: vec![agent.clone()],
            },
        ));
        let usage = Usage {
            total_tokens: 7,
            ..Usage::default()
        };
        r.push(event(
            1,
            EventKind::Usage {
                agent,
                phase: massgen_core::coordination::CallPhase::Coordination,
                usage,
                cost_usd: None,
            },
        ));
        r.push(event(2, failed()));
        let s = r.summary();
        assert_eq!(
            (s.status, s.agents.len(), s.usage.total_tokens),
            ("failed", 1, 7)
        );
        assert_eq!(s.ended_ms, Some(0));
    }

    #[tokio::test]
    async fn subscribers_get_the_past_then_the_live_events() {
        let store = RecordStore::new(10, Duration::from_secs(60), None);
        let r = store.insert("s".into(), Caller::default());
        r.push(event(0, EventKind::FinalDelta { text: "a".into() }));
        let (past, live) = r.subscribe();
        assert_eq!(past.len(), 1);
        r.push(event(1, failed()));
        let mut live = live.unwrap();
        assert_eq!(live.recv().await.unwrap().seq, 1);
        assert!(r.subscribe().1.is_none(), "finished: replay only");
        assert_eq!(r.events_after(Some(0)).len(), 1);
    }
}
