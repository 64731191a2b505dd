//! Stored Responses API responses in the records database (`responses` and
//! `response_items`, migration 4): written by one queue per process that never makes a
//! request wait ([`ResponseWriter`]), read by id and owner, deleted by the records'
//! retention. Rows hold JSON text the Responses door writes and reads; nothing here knows
//! its shape.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::{Any, Row, Transaction};
use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use super::rows::to_db;
use super::{RecordDb, now_ms, safe_error};

/// Rows committed in one transaction at most.
const MAX_BATCH: usize = 64;
/// Item rows per INSERT statement (4 parameters each).
const ITEMS_PER_INSERT: usize = 200;
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
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(5);

/// One stored response as its rows hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    pub id: String,
    /// `Caller::owner()`.
    pub owner: String,
    pub created_ms: u64,
    /// JSON.
    pub conversation: String,
    /// The response object, JSON.
    pub body: String,
    /// The items that can be named by id: (id, item JSON).
    pub items: Vec<(String, String)>,
}

impl ResponseRow {
    fn bytes(&self) -> usize {
        self.conversation.len()
            + self.body.len()
            + self
                .items
                .iter()
                .map(|(id, body)| id.len() + body.len())
                .sum::<usize>()
    }
}

/// A value for a plain TEXT column (ids come from clients): PostgreSQL refuses NUL in
/// text. Applied to what is written and to what is looked up alike.
fn text_column(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains('\0') {
        value.replace('\0', "\u{FFFD}").into()
    } else {
        value.into()
    }
}

impl RecordDb {
    /// Writes `rows` in one transaction (again: the newer row wins, so a retry after a
    /// commit whose answer was lost is harmless).
    pub async fn put_responses(&self, rows: &[Arc<ResponseRow>]) -> Result<(), sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        let mut result = Ok(());
        for row in rows {
            result = put_one(&mut tx, row).await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(()) => tx.commit().await,
            Err(e) => {
                // Rolled back before the retry, which must not find this transaction
                // still holding SQLite's write lock (see `flush`).
                if let Ok(Err(r)) = tokio::time::timeout(ROLLBACK_TIMEOUT, tx.rollback()).await {
                    tracing::debug!("rollback of stored responses failed: {}", safe_error(&r));
                }
                Err(e)
            }
        }
    }

    /// The conversation and the object of response `id` if `owner` stored it at or after
    /// `since_ms`.
    pub async fn response(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
    ) -> Result<Option<(String, String)>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT conversation, body FROM responses WHERE id = $1 AND owner = $2 AND created_ms >= $3",
        )
        .bind(&*text_column(id))
        .bind(owner)
        .bind(to_db(since_ms))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    /// The JSON of item `id` of `owner`'s responses stored at or after `since_ms`.
    pub async fn response_item(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
    ) -> Result<Option<String>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT i.body FROM response_items i JOIN responses r ON r.id = i.response_id \
             WHERE i.owner = $1 AND i.id = $2 AND r.created_ms >= $3",
        )
        .bind(owner)
        .bind(&*text_column(id))
        .bind(to_db(since_ms))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| r.try_get(0)).transpose()
    }

    /// Deletes responses older than `max_age`, then the oldest beyond the newest
    /// `max_count` (the session records' retention), with their items.
    pub async fn retain_responses(
        &self,
        max_age: Duration,
        max_count: usize,
    ) -> Result<(), sqlx::Error> {
        let cutoff =
            to_db(now_ms().saturating_sub(u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX)));
        let oldest_kept =
            "(SELECT created_ms FROM responses ORDER BY created_ms DESC LIMIT 1 OFFSET $1)";
        let mut tx = self.pool().begin().await?;
        for sql in [
            "DELETE FROM response_items WHERE response_id IN (SELECT id FROM responses WHERE created_ms < $1)",
            "DELETE FROM responses WHERE created_ms < $1",
        ] {
            sqlx::query(sql).bind(cutoff).execute(&mut *tx).await?;
        }
        for sql in [
            format!(
                "DELETE FROM response_items WHERE response_id IN (SELECT id FROM responses WHERE created_ms <= {oldest_kept})"
            ),
            format!("DELETE FROM responses WHERE created_ms <= {oldest_kept}"),
        ] {
            sqlx::query(&sql)
                .bind(to_db(max_count as u64))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }
}

async fn put_one(tx: &mut Transaction<'static, Any>, row: &ResponseRow) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO responses (id, owner, created_ms, conversation, body) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (id) DO UPDATE SET conversation = excluded.conversation, body = excluded.body",
    )
    .bind(&*text_column(&row.id))
    .bind(&row.owner)
    .bind(to_db(row.created_ms))
    .bind(&row.conversation)
    .bind(&row.body)
    .execute(&mut **tx)
    .await?;
    // One statement may not update a row twice (PostgreSQL refuses it): the last of a
    // repeated id wins, as it would over two statements.
    let mut seen = std::collections::HashSet::with_capacity(row.items.len());
    let mut items: Vec<(std::borrow::Cow<'_, str>, &str)> = row
        .items
        .iter()
        .rev()
        .map(|(id, body)| (text_column(id), body.as_str()))
        .filter(|(id, _)| seen.insert(id.clone()))
        .collect();
    items.reverse();
    for chunk in items.chunks(ITEMS_PER_INSERT) {
        let mut sql =
            String::from("INSERT INTO response_items (owner, id, response_id, body) VALUES ");
        for i in 0..chunk.len() {
            let n = i * 4;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(${}, ${}, ${}, ${})", n + 1, n + 2, n + 3, n + 4));
        }
        sql.push_str(
            " ON CONFLICT (owner, id) DO UPDATE SET response_id = excluded.response_id, body = excluded.body",
        );
        let response_id = text_column(&row.id);
        let mut query = sqlx::query(&sql);
        for (id, body) in chunk {
            query = query
                .bind(&row.owner)
                .bind(&**id)
                .bind(&*response_id)
                .bind(*body);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// What waits for the database: counted when queued, uncounted once written.
#[derive(Default)]
struct Pending {
    rows: AtomicUsize,
    bytes: AtomicUsize,
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
        if self.queue.send(Arc::new(row)).is_err() {
            self.pending.uncount(1, bytes);
            return false;
        }
        true
    }

    /// Responses not written yet.
    pub fn pending(&self) -> usize {
        self.pending.rows.load(Ordering::Acquire)
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
        pending.uncount(batch.len(), bytes);
        pending.written.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RecordsDb;

    fn row(id: &str, owner: &str, created_ms: u64, items: &[(&str, &str)]) -> ResponseRow {
        ResponseRow {
            id: id.into(),
            owner: owner.into(),
            created_ms,
            conversation: "{}".into(),
            body: format!("{{\"id\":\"{id}\"}}"),
            items: items
                .iter()
                .map(|(i, b)| (i.to_string(), b.to_string()))
                .collect(),
        }
    }

    #[tokio::test]
    async fn rows_are_read_by_owner_and_age_and_items_by_the_newest_response() {
        let dir = tempfile::tempdir().unwrap();
        let db = RecordDb::open(&RecordsDb::Sqlite(dir.path().join("r.db")))
            .await
            .unwrap();
        let now = now_ms();
        let rows = [
            Arc::new(row(
                "resp_a",
                "k1",
                now,
                &[("msg_a", "1"), ("fco_1", "2"), ("fco_1", "3")],
            )),
            Arc::new(row(
                "resp_b",
                "k1",
                now + 1,
                &[("fco_1", "4"), ("id\0nul", "5")],
            )),
        ];
        db.put_responses(&rows).await.unwrap();
        // Again (a retry after a lost commit answer): no error, nothing twice.
        db.put_responses(&rows).await.unwrap();
        let (_, body) = db.response("resp_a", "k1", 0).await.unwrap().unwrap();
        assert_eq!(body, "{\"id\":\"resp_a\"}");
        assert!(db.response("resp_a", "k2", 0).await.unwrap().is_none());
        assert!(
            db.response("resp_a", "k1", now + 10)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            db.response_item("msg_a", "k1", 0).await.unwrap().as_deref(),
            Some("1")
        );
        assert_eq!(
            db.response_item("fco_1", "k1", 0).await.unwrap().as_deref(),
            Some("4")
        );
        assert_eq!(
            db.response_item("id\0nul", "k1", 0)
                .await
                .unwrap()
                .as_deref(),
            Some("5")
        );
        assert!(db.response_item("msg_a", "k2", 0).await.unwrap().is_none());
        // Keep the newest one: resp_a goes with its own items; fco_1 is resp_b's now.
        db.retain_responses(Duration::from_secs(3600), 1)
            .await
            .unwrap();
        assert!(db.response("resp_a", "k1", 0).await.unwrap().is_none());
        assert!(db.response_item("msg_a", "k1", 0).await.unwrap().is_none());
        assert_eq!(
            db.response_item("fco_1", "k1", 0).await.unwrap().as_deref(),
            Some("4")
        );
        db.retain_responses(Duration::ZERO, 10).await.unwrap();
        assert!(db.response("resp_b", "k1", 0).await.unwrap().is_none());
        let left: i64 = sqlx::query("SELECT COUNT(*) FROM response_items")
            .fetch_one(db.pool())
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0);
    }

    #[tokio::test]
    async fn the_writer_commits_in_the_background_and_drains() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            RecordDb::open(&RecordsDb::Sqlite(dir.path().join("r.db")))
                .await
                .unwrap(),
        );
        let writer = ResponseWriter::start(Arc::clone(&db));
        for n in 0..100 {
            assert!(writer.queue(row(&format!("resp_{n}"), "", now_ms(), &[])));
        }
        writer.drain(Duration::from_secs(10)).await;
        assert_eq!(writer.pending(), 0);
        assert!(db.response("resp_99", "", 0).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_failing_database_bounds_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            RecordDb::open(&RecordsDb::Sqlite(dir.path().join("r.db")))
                .await
                .unwrap(),
        );
        db.pool().close().await;
        let writer = ResponseWriter::start(Arc::clone(&db));
        let mut big = row("resp_big", "", 0, &[]);
        big.body = "x".repeat(MAX_PENDING_BYTES / 2 + 1);
        assert!(writer.queue(big.clone()));
        assert!(!writer.queue(big), "over the byte bound");
        assert!(writer.queue(row("resp_small", "", 0, &[])));
        writer.drain(Duration::from_millis(100)).await;
        assert_eq!(writer.pending(), 2, "still waiting for the database");
    }
}
