//! The writer: one task per process that commits the new events of live records. The tee
//! only queues a record (see `SessionRecord::mark_dirty`); the writer waits a moment to
//! gather a batch, commits it in one transaction, and lets finished records leave memory
//! once all of them is committed. When the database fails it keeps the records queued
//! and retries with a growing pause (a failed batch is rolled back, a connection left in
//! a transaction is closed, and failures in a row reopen the idle ones), so it recovers
//! once the database does; nothing a session does waits for it.

use std::sync::Arc;
use std::time::Duration;

use super::held::Live;
use super::live::Dirty;
use super::rows::{Batch, SessionWrite};
use crate::app::store::db::RecordDb;

/// How long the writer gathers after the first new event: at most this much is lost in a
/// crash, and a busy server writes a few batches a second, not one per event.
const GATHER: Duration = Duration::from_millis(100);
/// Events in one transaction (a record with more is written over several).
const MAX_BATCH_EVENTS: usize = 2_000;
/// A batch not committed by then counts as failed (a cut network link otherwise holds the
/// writer, and the shutdown, for as long as TCP takes to notice).
const BATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Pauses between failed attempts: doubling from the first to the last.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// Failed batches in a row after which the pool's idle connections are closed.
const RECYCLE_AFTER: u32 = 3;

pub struct Writer {
    pub db: Arc<RecordDb>,
    pub live: Arc<Live>,
    pub dirty: Arc<Dirty>,
    /// Held while a batch is written. The loop and the shutdown's drain are two writers
    /// of one queue: a batch in flight has left the queue, so "nothing queued" only means
    /// "all written" while this is held.
    pub busy: Arc<tokio::sync::Mutex<()>>,
}

impl Writer {
    /// Runs until the process ends.
    pub async fn run(self) {
        let mut pause = RETRY_FIRST;
        let mut failures = 0u32;
        loop {
            if self.dirty.len() == 0 {
                self.dirty.wake.notified().await;
                tokio::time::sleep(GATHER).await;
            }
            match self.write_once().await {
                Ok(()) => {
                    pause = RETRY_FIRST;
                    failures = 0;
                }
                Err(()) => {
                    failures += 1;
                    if failures.is_multiple_of(RECYCLE_AFTER) {
                        // Failures that persist ("database is locked" after the disk
                        // came back): reopen rather than trust the connections.
                        self.db.recycle_idle().await;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Writes what is queued now, in batches; `Err` after a failed batch (its records
    /// are queued again).
    pub async fn write_once(&self) -> Result<(), ()> {
        let _one = self.busy.lock().await;
        let ids = self.dirty.take();
        let records: Vec<_> = ids.iter().filter_map(|id| self.live.get(id)).collect();
        // Off the queue before anything is read: an event stored from here on queues its
        // record again, and a failure below can queue every one of them again (a record
        // still marked queued but out of the queue would never be written).
        for record in &records {
            record.unqueue();
        }
        let mut at = 0;
        while at < records.len() {
            let mut batch = Batch::default();
            let mut parts = Vec::new();
            let mut room = MAX_BATCH_EVENTS;
            while at < records.len() && (room > 0 || batch.sessions.is_empty()) {
                let record = &records[at];
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
                at += 1;
            }
            let result = tokio::time::timeout(BATCH_TIMEOUT, self.db.flush(&batch))
                .await
                .unwrap_or_else(|_| {
                    Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("the batch was not committed within {BATCH_TIMEOUT:?}"),
                    )))
                });
            self.db.note_write(&result);
            if result.is_err() {
                // This batch and the rest go back on the queue, for the next attempt.
                for record in &records[at - parts.len()..] {
                    record.mark_dirty();
                }
                return Err(());
            }
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
        }
        Ok(())
    }

    /// Writes everything queued, retrying until `within` is over (shutdown).
    pub async fn drain(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Waits out the loop's batch in flight (a failed one is queued again).
            let Ok(idle) = tokio::time::timeout_at(deadline, self.busy.lock()).await else {
                break;
            };
            let done = self.dirty.len() == 0;
            drop(idle);
            if done {
                return;
            }
            match tokio::time::timeout_at(deadline, self.write_once()).await {
                Ok(Ok(())) => {}
                Ok(Err(())) => tokio::time::sleep(RETRY_FIRST).await,
                Err(_) => break,
            }
        }
        tracing::warn!(
            queued = self.dirty.len(),
            "exiting with session records the database has not taken: their last events are lost"
        );
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
        let in_flight = writer.busy.lock().await;
        let info = SessionInfo {
            created_ms: now_ms(),
            ..SessionInfo::default()
        };
        let r = store.insert_with("s1".into(), Caller::default(), info);
        r.push(SessionEvent {
            session_id: "s1".into(),
            ..event(0, failed())
        });
        let taken = writer.dirty.take();
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
