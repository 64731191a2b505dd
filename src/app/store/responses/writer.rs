//! Stored responses' kind of row for the store's [`BatchWriter`]: storing a response
//! never makes a request wait. What each owner's rows waiting for the database weigh is
//! counted here, so the stored-bytes quota counts them before the database does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::ResponseRow;
use crate::app::store::batch::{BatchWriter, Limits, Queue, RowKind};
use crate::app::store::db::RecordDb;
use crate::app::store::lock;

/// Responses waiting for the database at most, in count and in bytes: a database that is
/// down for long must not let the queue grow without bound (what is past it stays in the
/// door's memory only).
const MAX_PENDING: usize = 4_096;
const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;

const LIMITS: Limits = Limits {
    // A response is written as soon as the writer is free (what came meanwhile joins it).
    gather: Duration::ZERO,
    // Rows committed in one transaction at most.
    batch: 64,
    max_rows: MAX_PENDING,
    max_bytes: MAX_PENDING_BYTES,
};

struct ResponseRows {
    db: Arc<RecordDb>,
    /// The bytes of each owner's rows waiting for the database.
    owners: Mutex<HashMap<String, usize>>,
}

impl ResponseRows {
    fn uncount(&self, row: &ResponseRow) {
        let mut owners = lock(&self.owners);
        if let Some(held) = owners.get_mut(&row.owner) {
            *held = held.saturating_sub(row.bytes());
            if *held == 0 {
                owners.remove(&row.owner);
            }
        }
    }
}

impl RowKind for ResponseRows {
    type Row = Arc<ResponseRow>;

    async fn write(&self, batch: &[Arc<ResponseRow>]) -> Result<(), sqlx::Error> {
        self.db.put_responses(batch).await
    }

    fn note(&self, result: &Result<(), sqlx::Error>) {
        self.db.note_write(result);
    }

    async fn reconnect(&self) {
        self.db.recycle_idle().await;
    }

    fn bytes(&self, row: &Arc<ResponseRow>) -> usize {
        row.bytes()
    }

    fn written(&self, batch: &[Arc<ResponseRow>]) {
        for row in batch {
            self.uncount(row);
        }
    }

    fn dropped(&self, row: &Arc<ResponseRow>) {
        self.uncount(row);
    }
}

/// The queue of stored responses for the database, and the task that commits it.
pub struct ResponseWriter {
    writer: BatchWriter<ResponseRows>,
}

impl ResponseWriter {
    /// Starts the writer task (inside a Tokio runtime).
    pub fn start(db: Arc<RecordDb>) -> Self {
        let rows = ResponseRows {
            db,
            owners: Mutex::default(),
        };
        Self {
            writer: BatchWriter::start(rows, Arc::new(Queue::new(LIMITS))),
        }
    }

    /// Queues `row` for the database; `false` when the queue is full (the database has
    /// been failing) and the row was dropped.
    pub fn queue(&self, row: ResponseRow) -> bool {
        let row = Arc::new(row);
        // Counted before the writer can see it (and uncount it once written); a refused
        // row is uncounted as dropped.
        *lock(&self.writer.kind().owners)
            .entry(row.owner.clone())
            .or_default() += row.bytes();
        self.writer.push(row)
    }

    /// Responses not written yet.
    pub fn pending(&self) -> usize {
        self.writer.queue().waiting()
    }

    /// The bytes of `owner`'s responses not written yet.
    pub fn pending_bytes(&self, owner: &str) -> usize {
        lock(&self.writer.kind().owners)
            .get(owner)
            .copied()
            .unwrap_or(0)
    }

    /// Writes what is queued, for at most `within` (shutdown).
    pub async fn drain(&self, within: Duration) {
        let left = self.writer.close(within).await;
        if left > 0 {
            tracing::warn!(
                queued = left,
                "exiting with stored responses the database has not taken: they are lost"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::store::db::now_ms;
    use crate::app::store::responses::tests::{row, sqlite};

    #[tokio::test]
    async fn the_writer_commits_in_the_background_and_drains() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(sqlite(&dir).await);
        let writer = ResponseWriter::start(Arc::clone(&db));
        for n in 0..100 {
            assert!(writer.queue(row(&format!("resp_{n}"), "", now_ms(), &[])));
        }
        writer.drain(Duration::from_secs(10)).await;
        assert_eq!(writer.pending(), 0);
        assert_eq!(writer.pending_bytes(""), 0);
        assert!(db.response_body("resp_99", "", 0).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_failing_database_bounds_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(sqlite(&dir).await);
        db.close().await;
        let writer = ResponseWriter::start(Arc::clone(&db));
        let mut big = row("resp_big", "", 0, &[]);
        big.body = "x".repeat(MAX_PENDING_BYTES / 2 + 1);
        let big_bytes = big.bytes();
        assert!(writer.queue(big.clone()));
        assert!(!writer.queue(big), "over the byte bound");
        let small = row("resp_small", "", 0, &[]);
        let small_bytes = small.bytes();
        assert!(writer.queue(small));
        writer.drain(Duration::from_millis(100)).await;
        assert_eq!(writer.pending(), 2, "still waiting for the database");
        assert_eq!(writer.pending_bytes(""), big_bytes + small_bytes);
    }
}
