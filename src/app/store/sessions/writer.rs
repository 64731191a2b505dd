//! The session records' kind of row for the store's [`BatchWriter`]: a record with events
//! not written yet, queued by its id (by itself, once per batch: see
//! `SessionRecord::mark_dirty`). A batch reads the queued records' new events, commits
//! them in one transaction with the sessions' rows, and lets finished records leave
//! memory once all of them is committed. A failed batch is rolled back and its records
//! queued again, with whatever events came meanwhile.

use std::sync::Arc;
use std::time::Duration;

use super::held::Live;
use super::live::Dirty;
use super::rows::{Batch, SessionWrite};
use crate::app::store::batch::{BatchWriter, Limits, RowKind};
use crate::app::store::db::RecordDb;

/// Events in one transaction (a record with more is written over several).
const MAX_BATCH_EVENTS: usize = 2_000;

/// A record is queued at most once (its flag), so the queue holds at most the records
/// held in memory: the running ones (bounded by the session permits) and at most
/// `max_unsaved` finished ones, the oldest of which are dropped past it (and counted in
/// `massgen_records_unsaved_dropped_total`, see `Live::insert`). It has no bound of its
/// own to refuse rows by.
pub const LIMITS: Limits = Limits {
    // At most this much is lost in a crash; a busy server writes a few batches a second.
    gather: Duration::from_millis(100),
    batch: MAX_BATCH_EVENTS,
    max_rows: usize::MAX,
    max_bytes: usize::MAX,
};

pub struct SessionRows {
    pub db: Arc<RecordDb>,
    pub live: Arc<Live>,
}

/// The writer of the records `live` holds, queued on `dirty` (inside a Tokio runtime).
pub fn start(db: Arc<RecordDb>, live: Arc<Live>, dirty: Arc<Dirty>) -> BatchWriter<SessionRows> {
    BatchWriter::start(SessionRows { db, live }, dirty)
}

impl RowKind for SessionRows {
    type Row = Arc<str>;

    /// Finished records wait in memory up to a bound, past which the oldest are dropped
    /// unsaved: near it, the writer does not wait for its window.
    fn pressed(&self) -> bool {
        self.live.filling()
    }

    async fn write(&self, ids: &[Arc<str>]) -> Result<(), sqlx::Error> {
        let records: Vec<_> = ids.iter().filter_map(|id| self.live.get(id)).collect();
        // Off the queue before anything is read: an event stored from here on queues its
        // record again.
        for record in &records {
            record.unqueue();
        }
        let mut batch = Batch::default();
        let mut parts = Vec::with_capacity(records.len());
        let mut room = MAX_BATCH_EVENTS;
        for record in &records {
            let unwritten = record.unwritten(room.max(1));
            room = room.saturating_sub(unwritten.events.len());
            parts.push((Arc::clone(record), unwritten.upto));
            batch.sessions.push(SessionWrite::new(
                Arc::clone(&record.id),
                record.owner.owner(),
                &record.info,
                unwritten.first,
                unwritten.summary,
                unwritten.dropped,
                unwritten.events,
            ));
        }
        if batch.sessions.is_empty() {
            return Ok(());
        }
        self.db.flush(&batch).await?;
        for (record, upto) in &parts {
            record.committed(*upto);
            if record.is_saved() {
                self.live.remove(&record.id);
            } else if record.has_unwritten() {
                // Cut by the batch size (when it grew meanwhile it is queued already
                // and this is a no-op).
                record.mark_dirty();
            }
        }
        Ok(())
    }

    fn note(&self, result: &Result<(), sqlx::Error>) {
        self.db.note_write(result);
    }

    async fn reconnect(&self) {
        self.db.recycle_idle().await;
    }

    /// The events a record has not written yet; none when it left memory (dropped unsaved
    /// while the database failed).
    fn size(&self, id: &Arc<str>) -> Option<usize> {
        Some(self.live.get(id)?.unwritten_count())
    }

    /// Every record of the batch is queued again, each once (one that has a new event
    /// is queued already).
    fn retry(&self, ids: Vec<Arc<str>>) -> Vec<Arc<str>> {
        for id in &ids {
            if let Some(record) = self.live.get(id) {
                record.mark_dirty();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use massgen_core::coordination::SessionEvent;

    use super::*;
    use crate::app::Caller;
    use crate::app::store::db::now_ms;
    use crate::app::store::db::upkeep::Upkeep;
    use crate::app::store::sessions::{RecordStore, SessionInfo, event, failed};
    use crate::config::RecordsDb;

    fn upkeep() -> Upkeep {
        Upkeep {
            heartbeat: Duration::from_secs(3600),
            interrupted_after: Duration::from_secs(60),
            max_age: Duration::from_secs(3600),
            max_sessions: 100,
            retain: true,
        }
    }

    #[tokio::test]
    async fn the_shutdown_waits_for_the_batch_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            RecordDb::open(&RecordsDb::Sqlite(dir.path().join("records.db")))
                .await
                .unwrap(),
        );
        let store = Arc::new(RecordStore::with_db(Arc::clone(&db), upkeep(), 10, None));
        let writer = store.writer().unwrap();
        // A batch in flight: the writer holds the lock and took the ids off the queue.
        let in_flight = writer.busy().lock().await;
        let info = SessionInfo {
            created_ms: now_ms(),
            ..SessionInfo::default()
        };
        let r = store.insert_with("s1".into(), Caller::default(), info);
        r.push(SessionEvent {
            session_id: "s1".into(),
            ..event(0, failed())
        });
        let taken: Vec<_> = std::iter::from_fn(|| writer.queue().pop()).collect();
        assert_eq!(taken.len(), 1);
        let closing = tokio::spawn({
            let store = Arc::clone(&store);
            async move { store.close(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !closing.is_finished(),
            "the shutdown returned while a batch was being written"
        );
        // That batch failed: its record is queued again, and the shutdown writes it.
        r.unqueue();
        r.mark_dirty();
        drop(in_flight);
        drop(r);
        tokio::time::timeout(Duration::from_secs(10), closing)
            .await
            .unwrap()
            .unwrap();
        assert!(store.is_empty(), "written and let go");
        let back = store.find("s1", &Caller::default()).await.unwrap().unwrap();
        assert_eq!(back.summary().status, "failed");
    }
}
