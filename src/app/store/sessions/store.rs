//! The store of session records. Memory (`--records-db memory`): every record stays here,
//! bounded by count and age. With a database: only live records stay (running ones, and
//! finished ones until the writer committed them); the rest are read back from the
//! database when asked for.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::AbortHandle;

use super::cursor::Cursor;
use super::held::Live;
use super::live::{Dirty, MAX_EVENTS, SessionInfo, SessionRecord};
use super::read::StoredSession;
use super::writer::{self, SessionRows};
use crate::app::Caller;
use crate::app::store::batch::BatchWriter;
use crate::app::store::db::upkeep::Upkeep;
use crate::app::store::db::{RecordDb, safe_error};

pub struct RecordStore {
    live: Arc<Live>,
    pub dir: Option<PathBuf>,
    db: Option<DbSide>,
}

struct DbSide {
    db: Arc<RecordDb>,
    /// Stops its task when dropped with the store.
    writer: BatchWriter<SessionRows>,
    /// The upkeep and listener tasks, stopped with the store.
    tasks: Vec<AbortHandle>,
}

/// The database could not be read: the request fails (503), the sessions go on.
#[derive(Debug)]
pub struct ReadError;

/// A session's events to follow.
pub struct Following {
    pub cursor: Cursor,
    pub id: Arc<str>,
    /// The session had ended when it was looked up.
    pub finished: bool,
    /// It ended without its last event: the replica running it went away (the stream
    /// ends after the events it stored).
    pub interrupted: bool,
}

/// Finished records kept in memory while the database fails (~25 KB each): the database's
/// retention count (100,000 by default) would let a long outage hold gigabytes.
const MAX_UNSAVED: usize = 1000;

impl RecordStore {
    /// The store `settings` name, in memory (`--records-db memory`).
    pub fn memory(settings: &crate::config::ProductionSettings) -> Self {
        Self::new(
            settings.records_max_sessions,
            settings.records_max_age,
            settings.records_dir.clone(),
        )
    }

    /// The store `settings` name: memory, or the database (connected and migrated; the
    /// error says what failed, never a password). Call inside the runtime: with a database
    /// it starts the writer and the upkeep timer. Without `retain` old records are never
    /// deleted: for a process that only adds to a database a server owns (`massgen eval`),
    /// whose retention is the server's to apply.
    pub async fn open(
        settings: &crate::config::ProductionSettings,
        retain: bool,
    ) -> Result<Self, String> {
        if settings.records_db == crate::config::RecordsDb::Memory {
            return Ok(Self::memory(settings));
        }
        let db = Arc::new(RecordDb::open(&settings.records_db).await?);
        tracing::info!(store = %db.describe(), replica = %db.replica(), "session records in a database");
        let upkeep = Upkeep {
            heartbeat: settings.records_heartbeat,
            interrupted_after: settings.records_interrupted_after,
            max_age: settings.records_max_age,
            max_sessions: settings.records_max_sessions,
            retain,
        };
        Ok(Self::with_db(
            db,
            upkeep,
            settings.records_max_sessions.min(MAX_UNSAVED),
            settings.records_dir.clone(),
        ))
    }

    /// Records in memory only (`--records-db memory`).
    pub fn new(max_sessions: usize, max_age: Duration, dir: Option<PathBuf>) -> Self {
        Self {
            live: Arc::new(Live::new(max_sessions, max_age, None)),
            dir,
            db: None,
        }
    }

    /// Records in `db`: starts the writer and the upkeep timer (inside a Tokio runtime).
    /// `max_unsaved` bounds the finished records waiting for a failing database.
    pub fn with_db(
        db: Arc<RecordDb>,
        upkeep: Upkeep,
        max_unsaved: usize,
        dir: Option<PathBuf>,
    ) -> Self {
        let dirty = Arc::new(Dirty::new(writer::LIMITS));
        let live = Arc::new(Live::new(
            max_unsaved,
            Duration::MAX,
            Some(Arc::clone(&dirty)),
        ));
        let writer = writer::start(Arc::clone(&db), Arc::clone(&live), dirty);
        let mut tasks = vec![
            tokio::spawn({
                let db = Arc::clone(&db);
                async move { db.run_upkeep(upkeep).await }
            })
            .abort_handle(),
        ];
        if let Some(listener) = db.listener() {
            tasks.push(tokio::spawn(listener).abort_handle());
        }
        Self {
            live,
            dir,
            db: Some(DbSide { db, writer, tasks }),
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
        let record = Arc::new(SessionRecord::new(
            id,
            owner,
            info,
            self.live.dirty().cloned(),
        ));
        self.live.insert(Arc::clone(&record));
        self.expire();
        record
    }

    /// The database, when records are kept in one (the quota reads the day's spend there).
    pub fn db(&self) -> Option<&Arc<RecordDb>> {
        self.db.as_ref().map(|side| &side.db)
    }

    /// The live record of `id` if `caller` may read it (the creating key, or anyone on a
    /// server without keys). Someone else's record looks like a missing one.
    pub fn get(&self, id: &str, caller: &Caller) -> Option<Arc<SessionRecord>> {
        let record = self.live.get(id)?;
        (record.owner == *caller).then_some(record)
    }

    /// The record of `id`: the live one, else the database's (its first [`MAX_EVENTS`]
    /// and last events, as a finished record would hold them).
    pub async fn find(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<Arc<SessionRecord>>, ReadError> {
        if let Some(record) = self.get(id, caller) {
            return Ok(Some(record));
        }
        let Some((db, row)) = self.stored(id, caller).await? else {
            return Ok(None);
        };
        let events = db
            .events(id, 0, MAX_EVENTS + 1)
            .await
            .map_err(read_failed)?;
        Ok(Some(Arc::new(stored_record(row, *caller, events))))
    }

    /// The database's row of `id` if `caller` owns it (none without a database).
    async fn stored(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<(&Arc<RecordDb>, StoredSession)>, ReadError> {
        let Some(side) = &self.db else {
            return Ok(None);
        };
        let row = side
            .db
            .session(id, caller.owner())
            .await
            .map_err(read_failed)?;
        Ok(row.map(|row| (&side.db, row)))
    }

    /// Where to follow session `id`'s events: the live record, else the database.
    pub async fn follow(&self, id: &str, caller: &Caller) -> Result<Option<Following>, ReadError> {
        if let Some(record) = self.get(id, caller) {
            let finished = record.is_finished();
            return Ok(Some(Following {
                id: Arc::clone(&record.id),
                cursor: Cursor::new(record),
                finished,
                interrupted: false,
            }));
        }
        let Some((db, row)) = self.stored(id, caller).await? else {
            return Ok(None);
        };
        Ok(Some(Following {
            finished: row.status != "running",
            interrupted: row.status == "interrupted",
            cursor: Cursor::stored(Arc::clone(db), Arc::clone(&row.id)),
            id: row.id,
        }))
    }

    /// The newest `limit` records `caller` may read, newest first, of the doors named
    /// (every door with `None`): the live ones (their summaries are the freshest) merged
    /// with the database's. Each door is read by its own index, so the database reads at
    /// most `limit` rows a door however many sessions the other doors hold.
    pub async fn list_all(
        &self,
        caller: &Caller,
        limit: usize,
        doors: Option<&[&str]>,
    ) -> Result<Vec<Arc<SessionRecord>>, ReadError> {
        let live = self.list(caller, limit, doors);
        let Some(side) = &self.db else {
            return Ok(live);
        };
        let owner = caller.owner();
        let rows = match doors {
            None => side
                .db
                .list(owner, None, limit)
                .await
                .map_err(read_failed)?,
            Some(doors) => {
                let mut rows = Vec::new();
                for door in doors {
                    let more = side.db.list(owner, Some(door), limit).await;
                    rows.extend(more.map_err(read_failed)?);
                }
                rows
            }
        };
        // Live records first; a stored row of the same session (and the same row read for
        // two doors) is left out, in one pass rather than a search per row.
        let mut seen: std::collections::HashSet<Arc<str>> =
            live.iter().map(|r| r.id.clone()).collect();
        let mut all = live;
        for row in rows {
            if seen.insert(row.id.clone()) {
                all.push(Arc::new(stored_record(row, *caller, Vec::new())));
            }
        }
        all.sort_by_key(|r| std::cmp::Reverse(r.info.created_ms));
        all.truncate(limit);
        Ok(all)
    }

    /// The newest `limit` live records `caller` may read, newest first, of the doors
    /// named (every door with `None`).
    pub fn list(
        &self,
        caller: &Caller,
        limit: usize,
        doors: Option<&[&str]>,
    ) -> Vec<Arc<SessionRecord>> {
        self.live.newest(caller, limit, doors)
    }

    /// Memory: drops finished records older than the maximum age. (With a database the
    /// writer lets them go, and retention runs in the database.)
    pub fn expire(&self) {
        if self.db.is_some() {
            return;
        }
        self.live.expire(Instant::now());
    }

    #[cfg(test)]
    pub(super) fn writer(&self) -> Option<&BatchWriter<SessionRows>> {
        self.db.as_ref().map(|side| &side.writer)
    }

    /// Commits what is still unwritten, for at most `within` (shutdown).
    pub async fn close(&self, within: Duration) {
        if let Some(side) = &self.db {
            let left = side.writer.close(within).await;
            if left > 0 {
                tracing::warn!(
                    queued = left,
                    "exiting with session records the database has not taken: their last events are lost"
                );
            }
        }
    }

    /// `/health`'s `records` object.
    pub fn health(&self) -> serde_json::Value {
        match &self.db {
            None => serde_json::json!({"store": "memory", "state": "ok", "in_memory": self.len()}),
            Some(side) => serde_json::json!({
                "store": side.db.engine().name(),
                "state": if side.db.is_up() { "ok" } else { "failing" },
                "in_memory": self.len(),
            }),
        }
    }

    /// Records queued for the writer.
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.live.dirty().map_or(0, |d| d.len())
    }

    /// Records held in memory.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for RecordStore {
    fn drop(&mut self) {
        if let Some(side) = &self.db {
            for task in &side.tasks {
                task.abort();
            }
        }
    }
}

fn read_failed(e: sqlx::Error) -> ReadError {
    tracing::warn!("cannot read session records: {}", safe_error(&e));
    ReadError
}

fn stored_record(
    row: StoredSession,
    owner: Caller,
    events: Vec<massgen_core::coordination::SessionEvent>,
) -> SessionRecord {
    SessionRecord::stored(row.id, owner, row.info, row.summary, row.dropped, events)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::app::store::sessions::QUESTION_KEPT_BYTES;
    use massgen_core::coordination::{
        AgentRef, EventKind, SessionError, SessionErrorKind, SessionEvent,
    };
    use massgen_core::provider::Usage;
    use sha2::{Digest, Sha256};

    pub(in crate::app::store) fn event(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            seq,
            at_ms: 0,
            session_id: "s".into(),
            kind,
        }
    }

    pub(in crate::app::store) fn failed() -> EventKind {
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

    /// The writer takes every queued record off the queue; when a batch fails, all it took
    /// (this batch's and those after it) must be queued again, or they would never be
    /// written.
    #[tokio::test]
    async fn a_failed_batch_queues_every_taken_record_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = crate::config::RecordsDb::Sqlite(dir.path().join("records.db"));
        let db = Arc::new(RecordDb::open(&file).await.unwrap());
        let upkeep = Upkeep {
            heartbeat: Duration::from_secs(3600),
            interrupted_after: Duration::from_secs(60),
            max_age: Duration::from_secs(3600),
            max_sessions: 100,
            retain: true,
        };
        let store = RecordStore::with_db(Arc::clone(&db), upkeep, 10, None);
        let side = store.db.as_ref().unwrap();
        // The background tasks never run: this test drives the writer itself.
        for task in &side.tasks {
            task.abort();
        }
        side.writer.stop();
        db.close().await;
        // More events than one batch takes: the failing batch holds only the first record.
        for id in ["big1", "big2"] {
            let r = store.insert(id.into(), Caller::default());
            for seq in 0..2_500 {
                r.push(event(seq, EventKind::FinalDelta { text: "x".into() }));
            }
        }
        assert_eq!(store.queued(), 2);
        assert!(side.writer.write_once().await.is_err());
        assert_eq!(store.queued(), 2, "both queued again");
        assert_eq!(store.len(), 2);
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
        assert_eq!(ids(store.list(&Caller::default(), 2, None)), ["c", "b"]);
        assert_eq!(ids(store.list(&owner, 10, None)), ["mine"]);
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
