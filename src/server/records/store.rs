use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::coordination::{EventKind, SessionEvent};
use crate::server::auth::Caller;

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
    log: Mutex<Log>,
    live: broadcast::Sender<SessionEvent>,
}

#[derive(Default)]
struct Log {
    events: Vec<SessionEvent>,
    dropped: u64,
    finished: Option<Instant>,
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
        let record = Arc::new(SessionRecord {
            id: id.clone(),
            owner,
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
    use crate::coordination::{SessionError, SessionErrorKind};
    use crate::providers::Usage;

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
        let keys = crate::server::auth::ApiKeys::new(&[crate::secret::Secret::new("k")]);
        let owner = Caller {
            key: keys.verify("k"),
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
