//! The queue of stored responses for the database: one task per process commits it in
//! batches, so storing a response never makes a request wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use super::ResponseRow;
use crate::app::store::db::RecordDb;
use crate::app::store::lock;

/// Rows committed in one transaction at most.
const MAX_BATCH: usize = 64;
/// Responses waiting for the database at most, in count and in bytes: a database that is
/// down for long must not let the queue grow without bound (what is past it stays in the
/// door's memory only).
const MAX_PENDING: usize = 4_096;
const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;
/// As the session records' writer: a batch not committed by then failed; pauses between
/// attempts double from the first to the last; idle connections are reopened after
/// failures in a row.
const BATCH_TIMEOUT: Duration = Duration::from_secs(30);
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(10);
const RECYCLE_AFTER: u32 = 3;

/// What waits for the database: counted when queued, uncounted once written.
#[derive(Default)]
struct Pending {
    rows: AtomicUsize,
    bytes: AtomicUsize,
    /// The bytes of each owner's rows among them: the stored-bytes quota counts them
    /// before the database does.
    owners: Mutex<HashMap<String, usize>>,
    /// Woken after every batch (the shutdown's drain waits on it).
    written: Notify,
}

/// The queue of stored responses for the database, and the task that commits it.
pub struct ResponseWriter {
    queue: mpsc::UnboundedSender<Arc<ResponseRow>>,
    pending: Arc<Pending>,
    task: AbortHandle,
}

impl ResponseWriter {
    /// Starts the writer task (inside a Tokio runtime).
    pub fn start(db: Arc<RecordDb>) -> Self {
        let (queue, rows) = mpsc::unbounded_channel();
        let pending = Arc::new(Pending::default());
        let task = tokio::spawn(run(db, rows, Arc::clone(&pending))).abort_handle();
        Self {
            queue,
            pending,
            task,
        }
    }

    /// Queues `row` for the database; `false` when the queue is full (the database has
    /// been failing) and the row was dropped.
    pub fn queue(&self, row: ResponseRow) -> bool {
        let bytes = row.bytes();
        let rows = self.pending.rows.fetch_add(1, Ordering::AcqRel);
        let held = self.pending.bytes.fetch_add(bytes, Ordering::AcqRel);
        if rows >= MAX_PENDING || held.saturating_add(bytes) > MAX_PENDING_BYTES {
            self.pending.uncount(1, bytes);
            return false;
        }
        let owner = row.owner.clone();
        *lock(&self.pending.owners).entry(owner.clone()).or_default() += bytes;
        if self.queue.send(Arc::new(row)).is_err() {
            self.pending.uncount(1, bytes);
            self.pending.uncount_owner(&owner, bytes);
            return false;
        }
        true
    }

    /// Responses not written yet.
    pub fn pending(&self) -> usize {
        self.pending.rows.load(Ordering::Acquire)
    }

    /// The bytes of `owner`'s responses not written yet.
    pub fn pending_bytes(&self, owner: &str) -> usize {
        lock(&self.pending.owners).get(owner).copied().unwrap_or(0)
    }

    /// Waits until everything queued is written, for at most `within` (shutdown).
    pub async fn drain(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let written = self.pending.written.notified();
            if self.pending() == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, written).await.is_err() {
                tracing::warn!(
                    queued = self.pending(),
                    "exiting with stored responses the database has not taken: they are lost"
                );
                return;
            }
        }
    }
}

impl Drop for ResponseWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Pending {
    fn uncount(&self, rows: usize, bytes: usize) {
        self.rows.fetch_sub(rows, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn uncount_owner(&self, owner: &str, bytes: usize) {
        let mut owners = lock(&self.owners);
        if let Some(held) = owners.get_mut(owner) {
            *held = held.saturating_sub(bytes);
            if *held == 0 {
                owners.remove(owner);
            }
        }
    }
}

/// Commits what is queued, a batch at a time, retrying a failed batch until the database
/// takes it (as the session records' writer does).
async fn run(
    db: Arc<RecordDb>,
    mut rows: mpsc::UnboundedReceiver<Arc<ResponseRow>>,
    pending: Arc<Pending>,
) {
    while let Some(first) = rows.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rows.try_recv() {
                Ok(row) => batch.push(row),
                Err(_) => break,
            }
        }
        let mut pause = RETRY_FIRST;
        let mut failures = 0u32;
        loop {
            let result = tokio::time::timeout(BATCH_TIMEOUT, db.put_responses(&batch))
                .await
                .unwrap_or_else(|_| {
                    Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("stored responses not committed within {BATCH_TIMEOUT:?}"),
                    )))
                });
            db.note_write(&result);
            if result.is_ok() {
                break;
            }
            failures += 1;
            if failures.is_multiple_of(RECYCLE_AFTER) {
                db.recycle_idle().await;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
        let bytes = batch.iter().map(|r| r.bytes()).sum();
        for row in &batch {
            pending.uncount_owner(&row.owner, row.bytes());
        }
        pending.uncount(batch.len(), bytes);
        pending.written.notify_waiters();
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
        db.pool().close().await;
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
