use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};
use massgen_core::provider::Usage;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::app::Caller;

/// Events kept per session; the rest (token deltas of a very long answer) are counted only.
const MAX_EVENTS: usize = 20_000;
/// Bytes of the question a record keeps (a 9 MB question is not kept whole: its size and
/// SHA-256 are).
pub const QUESTION_KEPT_BYTES: usize = 16 * 1024;

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
    /// Ticks on every stored event: subscribers wait on it, then read the log. (A
    /// per-session broadcast buffer of 1,024 events used to cost ~200 KB per record, kept
    /// for as long as the record.)
    grew: watch::Sender<()>,
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
    /// The last user message, cut to [`QUESTION_KEPT_BYTES`] once recorded.
    pub question: String,
    /// The whole question's size in bytes and SHA-256 (hex), set when recorded.
    pub question_bytes: usize,
    pub question_sha256: String,
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
    /// Shared with subscribers page by page, never copied whole.
    events: Vec<Arc<SessionEvent>>,
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
        mut info: SessionInfo,
    ) -> Arc<SessionRecord> {
        keep_question(&mut info);
        let record = Arc::new(SessionRecord {
            id: id.clone(),
            owner,
            info,
            log: Mutex::new(Log::default()),
            grew: watch::Sender::new(()),
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
        let last = matches!(
            event.kind,
            EventKind::SessionCompleted { .. } | EventKind::SessionFailed { .. }
        );
        if last {
            log.finished = Some(Instant::now());
        }
        log.summary.update(&event);
        if log.events.len() < MAX_EVENTS || last {
            log.events.push(Arc::new(event));
        } else {
            log.dropped += 1;
        }
        if last {
            // A finished record only shrinks from here: give back the growth headroom.
            log.events.shrink_to_fit();
        }
        drop(log);
        self.grew.send_replace(());
    }

    /// Every stored event (shared, not copied).
    pub fn events(&self) -> Vec<Arc<SessionEvent>> {
        lock(&self.log).events.clone()
    }

    /// At most `max` stored events from position `from` on, and whether the session had
    /// ended when they were read (then nothing follows the last of them).
    pub fn read(&self, from: usize, max: usize) -> Page {
        let log = lock(&self.log);
        let events = log.events.get(from..).unwrap_or_default();
        Page {
            events: events.iter().take(max).cloned().collect(),
            finished: log.finished.is_some(),
        }
    }

    /// Woken on every stored event ([`Cursor`](super::Cursor) waits on it).
    pub(super) fn changes(&self) -> watch::Receiver<()> {
        self.grew.subscribe()
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
}

/// A run of stored events.
pub struct Page {
    pub events: Vec<Arc<SessionEvent>>,
    /// The session had ended when the page was read.
    pub finished: bool,
}

/// Cuts a huge question to its first [`QUESTION_KEPT_BYTES`] (on a character boundary),
/// noting the whole one's size and hash.
fn keep_question(info: &mut SessionInfo) {
    let question = &mut info.question;
    info.question_bytes = question.len();
    info.question_sha256 = format!("{:x}", Sha256::digest(question.as_bytes()));
    if question.len() > QUESTION_KEPT_BYTES {
        let cut = (0..=QUESTION_KEPT_BYTES)
            .rev()
            .find(|&i| question.is_char_boundary(i))
            .unwrap_or(0);
        question.truncate(cut);
        question.shrink_to_fit();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use massgen_core::coordination::{SessionError, SessionErrorKind};
    use massgen_core::provider::Usage;

    pub(in crate::app::records) fn event(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            seq,
            at_ms: 0,
            session_id: "s".into(),
            kind,
        }
    }

    pub(in crate::app::records) fn failed() -> EventKind {
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

    #[test]
    fn pages_share_the_stored_events_and_say_when_the_session_ended() {
        let store = RecordStore::new(10, Duration::from_secs(60), None);
        let r = store.insert("s".into(), Caller::default());
        for seq in 0..5 {
            r.push(event(seq, EventKind::FinalDelta { text: "a".into() }));
        }
        let page = r.read(1, 3);
        assert_eq!(
            page.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(!page.finished);
        assert!(Arc::ptr_eq(&page.events[0], &r.events()[1]), "copied");
        r.push(event(5, failed()));
        let page = r.read(5, 10);
        assert_eq!((page.events.len(), page.finished), (1, true));
        assert!(r.read(6, 10).events.is_empty());
    }

    #[test]
    fn a_huge_question_is_kept_as_a_prefix_its_size_and_hash() {
        let store = RecordStore::new(10, Duration::from_secs(60), None);
        // Multi-byte characters, so the cut must find a character boundary.
        let question = "é".repeat(QUESTION_KEPT_BYTES);
        let info = SessionInfo {
            question: question.clone(),
            ..SessionInfo::default()
        };
        let r = store.insert_with("s".into(), Caller::default(), info);
        assert!(r.info.question.len() <= QUESTION_KEPT_BYTES);
        assert!(question.starts_with(&r.info.question));
        assert!(r.info.question.len() > QUESTION_KEPT_BYTES - 4);
        assert_eq!(r.info.question_bytes, question.len());
        assert_eq!(
            r.info.question_sha256,
            format!("{:x}", Sha256::digest(question.as_bytes()))
        );
    }
}
