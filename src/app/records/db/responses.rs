//! Stored Responses API responses in the records database (`responses`,
//! `response_items` and `response_owners`, migrations 4 and 6): written by one queue per
//! process that never makes a request wait ([`ResponseWriter`]), read by id and owner,
//! walked along a conversation by parent ids ([`RecordDb::response_chain`]), deleted by
//! the records' retention. Each owner's stored bytes are a running sum that the writes
//! and deletes keep (the stored-bytes quota reads it). Rows hold JSON text the Responses
//! door writes and reads; nothing here knows its shape.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::{Any, Row, Transaction};
use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use super::rows::{from_db, to_db};
use super::{RecordDb, now_ms, safe_error};

/// Rows committed in one transaction at most.
const MAX_BATCH: usize = 64;
/// Item rows per INSERT statement (4 parameters each).
const ITEMS_PER_INSERT: usize = 200;
/// Ids per `IN (…)` list (touched responses, turns read at once): well under both
/// engines' parameter limits, and a bounded amount of text per query when reading turns.
const IDS_PER_QUERY: usize = 64;
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
    /// The response this one continued (`previous_response_id`).
    pub parent: Option<String>,
    /// This response's own turn, JSON.
    pub conversation: String,
    /// The text the turn brings to a conversation that continues it (the door's count).
    pub text_bytes: u64,
    /// The response object, JSON.
    pub body: String,
    /// The items that can be named by id: (id, item JSON).
    pub items: Vec<(String, String)>,
    /// Earlier responses of the owner's this one used (the turns it continued, the
    /// holders of items it referenced): their `used_ms` becomes this one's creation.
    pub touch: Vec<String>,
}

impl ResponseRow {
    /// What the row and its items take: the per-owner quota counts this.
    pub fn bytes(&self) -> usize {
        self.conversation.len()
            + self.body.len()
            + self
                .items
                .iter()
                .map(|(id, body)| id.len() + body.len())
                .sum::<usize>()
    }
}

/// One response of a chain, as [`RecordDb::response_chain`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainLink {
    pub id: String,
    pub parent: Option<String>,
    pub text_bytes: u64,
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

/// `$first, $first+1, …` for `n` values.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl RecordDb {
    /// Writes `rows` in one transaction (again: the newer row wins, so a retry after a
    /// commit whose answer was lost is harmless).
    pub async fn put_responses(&self, rows: &[Arc<ResponseRow>]) -> Result<(), sqlx::Error> {
        let mut tx = self.begin_write().await?;
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

    /// The object of response `id` if `owner` stored it and it was used at or after
    /// `since_ms`.
    pub async fn response_body(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
    ) -> Result<Option<String>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT body FROM responses WHERE id = $1 AND owner = $2 AND used_ms >= $3",
        )
        .bind(&*text_column(id))
        .bind(owner)
        .bind(to_db(since_ms))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| r.try_get(0)).transpose()
    }

    /// Response `id` of `owner`'s (used at or after `since_ms`) and the responses it
    /// continues, newest first, by parent ids: one recursive query that carries ids and
    /// sizes only, and stops after the response that takes the sum of `text_bytes` past
    /// `max_bytes`, or at `max_links`. The last link's `parent` is set when the chain
    /// goes on beyond what was read (a limit, or a parent this database does not hold).
    pub async fn response_chain(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
        max_bytes: u64,
        max_links: usize,
    ) -> Result<Vec<ChainLink>, sqlx::Error> {
        let rows = sqlx::query(
            "WITH RECURSIVE chain(id, parent, text_bytes, total, depth) AS ( \
               SELECT id, parent, text_bytes, text_bytes, CAST(1 AS BIGINT) FROM responses \
                 WHERE id = $1 AND owner = $2 AND used_ms >= $3 \
               UNION ALL \
               SELECT r.id, r.parent, r.text_bytes, c.total + r.text_bytes, c.depth + 1 \
                 FROM chain c JOIN responses r ON r.id = c.parent \
                 WHERE r.owner = $2 AND c.total <= $4 AND c.depth < $5 \
             ) SELECT id, parent, text_bytes FROM chain ORDER BY depth",
        )
        .bind(&*text_column(id))
        .bind(owner)
        .bind(to_db(since_ms))
        .bind(to_db(max_bytes))
        .bind(to_db(max_links as u64))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ChainLink {
                    id: r.try_get(0)?,
                    parent: r.try_get(1)?,
                    text_bytes: from_db(r.try_get(2)?),
                })
            })
            .collect()
    }

    /// The turns (the `conversation` column) of `owner`'s responses `ids`, a bounded
    /// number of rows per query, each handed to `take` as it is read: the text of one
    /// query is all that is held at once besides what `take` keeps. Missing ids are
    /// missing from what `take` gets.
    pub async fn response_turns(
        &self,
        owner: &str,
        ids: &[String],
        mut take: impl FnMut(String, String) -> Result<(), sqlx::Error>,
    ) -> Result<(), sqlx::Error> {
        for chunk in ids.chunks(IDS_PER_QUERY) {
            let sql = format!(
                "SELECT id, conversation FROM responses WHERE owner = $1 AND id IN ({})",
                placeholders(2, chunk.len())
            );
            let mut query = sqlx::query(&sql).bind(owner);
            for id in chunk {
                query = query.bind(text_column(id).into_owned());
            }
            for row in query.fetch_all(self.pool()).await? {
                take(row.try_get(0)?, row.try_get(1)?)?;
            }
        }
        Ok(())
    }

    /// Item `id` of `owner`'s responses used at or after `since_ms`: the response that
    /// holds it, and its JSON.
    pub async fn response_item(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
    ) -> Result<Option<(String, String)>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT i.response_id, i.body FROM response_items i JOIN responses r ON r.id = i.response_id \
             WHERE i.owner = $1 AND i.id = $2 AND r.used_ms >= $3",
        )
        .bind(owner)
        .bind(&*text_column(id))
        .bind(to_db(since_ms))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    /// The bytes `owner`'s stored responses take: its running sum, one row.
    pub async fn stored_bytes(&self, owner: &str) -> Result<u64, sqlx::Error> {
        let row = sqlx::query("SELECT bytes FROM response_owners WHERE owner = $1")
            .bind(owner)
            .fetch_optional(self.pool())
            .await?;
        row.map_or(Ok(0), |r| Ok(from_db(r.try_get(0)?)))
    }

    /// Deletes responses not used for `max_age`, then the least recently used beyond the
    /// newest `max_count` (the session records' retention), with their items. A
    /// conversation's earlier turns are used whenever a later one is stored, so they go
    /// after (or with) the turns that continue them, never before.
    pub async fn retain_responses(
        &self,
        max_age: Duration,
        max_count: usize,
    ) -> Result<(), sqlx::Error> {
        let cutoff =
            to_db(now_ms().saturating_sub(u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX)));
        let oldest_kept = "(SELECT used_ms FROM responses ORDER BY used_ms DESC LIMIT 1 OFFSET $1)";
        let mut tx = self.begin_write().await?;
        // What each owner loses, from the rows this transaction deleted (RETURNING): a
        // replica that deletes the same rows at once deletes none of them.
        let mut freed: HashMap<String, i64> = HashMap::new();
        let by_age = "WHERE used_ms < $1";
        let by_count = format!("WHERE used_ms <= {oldest_kept}");
        for (filter, bound) in [
            (by_age, cutoff),
            (by_count.as_str(), to_db(max_count as u64)),
        ] {
            sqlx::query(&format!(
                "DELETE FROM response_items WHERE response_id IN (SELECT id FROM responses {filter})"
            ))
            .bind(bound)
            .execute(&mut *tx)
            .await?;
            let deleted = sqlx::query(&format!(
                "DELETE FROM responses {filter} RETURNING owner, bytes"
            ))
            .bind(bound)
            .fetch_all(&mut *tx)
            .await?;
            for row in deleted {
                let bytes: i64 = row.try_get(1)?;
                *freed.entry(row.try_get(0)?).or_default() += bytes;
            }
        }
        for (owner, bytes) in freed {
            add_owner_bytes(&mut tx, &owner, -bytes).await?;
        }
        sqlx::query("DELETE FROM response_owners WHERE bytes <= 0")
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }
}

/// Adds `delta` to `owner`'s running sum of stored bytes.
async fn add_owner_bytes(
    tx: &mut Transaction<'static, Any>,
    owner: &str,
    delta: i64,
) -> Result<(), sqlx::Error> {
    if delta == 0 {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO response_owners (owner, bytes) VALUES ($1, $2) \
         ON CONFLICT (owner) DO UPDATE SET bytes = response_owners.bytes + excluded.bytes",
    )
    .bind(owner)
    .bind(delta)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn put_one(tx: &mut Transaction<'static, Any>, row: &ResponseRow) -> Result<(), sqlx::Error> {
    // The row it replaces (a retry after a commit whose answer was lost) no longer counts.
    let replaced = sqlx::query("SELECT owner, bytes FROM responses WHERE id = $1")
        .bind(&*text_column(&row.id))
        .fetch_optional(&mut **tx)
        .await?;
    let bytes = to_db(row.bytes() as u64);
    match replaced {
        Some(old) => {
            let (owner, old_bytes): (String, i64) = (old.try_get(0)?, old.try_get(1)?);
            if owner == row.owner {
                add_owner_bytes(tx, &row.owner, bytes - old_bytes).await?;
            } else {
                add_owner_bytes(tx, &owner, -old_bytes).await?;
                add_owner_bytes(tx, &row.owner, bytes).await?;
            }
        }
        None => add_owner_bytes(tx, &row.owner, bytes).await?,
    }
    sqlx::query(
        "INSERT INTO responses (id, owner, created_ms, used_ms, parent, conversation, text_bytes, bytes, body) \
         VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, parent = excluded.parent, \
         conversation = excluded.conversation, text_bytes = excluded.text_bytes, \
         bytes = excluded.bytes, body = excluded.body",
    )
    .bind(&*text_column(&row.id))
    .bind(&row.owner)
    .bind(to_db(row.created_ms))
    .bind(row.parent.as_deref().map(|p| text_column(p).into_owned()))
    .bind(&row.conversation)
    .bind(to_db(row.text_bytes))
    .bind(bytes)
    .bind(&row.body)
    .execute(&mut **tx)
    .await?;
    // Only rows whose time moves: an update rewrites a row, and a conversation's earlier
    // turns are touched by every later one.
    for chunk in row.touch.chunks(IDS_PER_QUERY) {
        let sql = format!(
            "UPDATE responses SET used_ms = $1 WHERE owner = $2 AND used_ms < $1 AND id IN ({})",
            placeholders(3, chunk.len())
        );
        let mut query = sqlx::query(&sql)
            .bind(to_db(row.created_ms))
            .bind(&row.owner);
        for id in chunk {
            query = query.bind(text_column(id).into_owned());
        }
        query.execute(&mut **tx).await?;
    }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
    use crate::config::RecordsDb;

    fn row(id: &str, owner: &str, created_ms: u64, items: &[(&str, &str)]) -> ResponseRow {
        ResponseRow {
            id: id.into(),
            owner: owner.into(),
            created_ms,
            parent: None,
            conversation: "{}".into(),
            text_bytes: 2,
            body: format!("{{\"id\":\"{id}\"}}"),
            items: items
                .iter()
                .map(|(i, b)| (i.to_string(), b.to_string()))
                .collect(),
            touch: Vec::new(),
        }
    }

    /// A turn continuing `parent`, holding `text_bytes` of text, created at `at`.
    fn turn(id: &str, parent: Option<&str>, at: u64, text_bytes: u64) -> Arc<ResponseRow> {
        let mut row = row(id, "k1", at, &[]);
        row.parent = parent.map(str::to_string);
        row.conversation = format!("{{\"turn\":\"{id}\"}}");
        row.text_bytes = text_bytes;
        Arc::new(row)
    }

    async fn sqlite(dir: &tempfile::TempDir) -> RecordDb {
        RecordDb::open(&RecordsDb::Sqlite(dir.path().join("r.db")))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn rows_are_read_by_owner_and_age_and_items_by_the_newest_response() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
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
        let body = db.response_body("resp_a", "k1", 0).await.unwrap().unwrap();
        assert_eq!(body, "{\"id\":\"resp_a\"}");
        assert!(db.response_body("resp_a", "k2", 0).await.unwrap().is_none());
        assert!(
            db.response_body("resp_a", "k1", now + 10)
                .await
                .unwrap()
                .is_none()
        );
        let item = |id: &'static str, owner: &'static str| {
            let db = &db;
            async move { db.response_item(id, owner, 0).await.unwrap() }
        };
        assert_eq!(
            item("msg_a", "k1").await,
            Some(("resp_a".into(), "1".into()))
        );
        assert_eq!(
            item("fco_1", "k1").await,
            Some(("resp_b".into(), "4".into()))
        );
        assert_eq!(
            item("id\0nul", "k1").await,
            Some(("resp_b".into(), "5".into()))
        );
        assert!(item("msg_a", "k2").await.is_none());
        // Per owner, summed: each row's text and its items'.
        let bytes: u64 = rows.iter().map(|r| r.bytes() as u64).sum();
        assert_eq!(db.stored_bytes("k1").await.unwrap(), bytes);
        assert_eq!(db.stored_bytes("k2").await.unwrap(), 0);
        // Keep the newest one: resp_a goes with its own items; fco_1 is resp_b's now.
        db.retain_responses(Duration::from_secs(3600), 1)
            .await
            .unwrap();
        assert!(db.response_body("resp_a", "k1", 0).await.unwrap().is_none());
        assert!(item("msg_a", "k1").await.is_none());
        assert_eq!(
            item("fco_1", "k1").await,
            Some(("resp_b".into(), "4".into()))
        );
        db.retain_responses(Duration::ZERO, 10).await.unwrap();
        assert!(db.response_body("resp_b", "k1", 0).await.unwrap().is_none());
        let left: i64 = sqlx::query("SELECT COUNT(*) FROM response_items")
            .fetch_one(db.pool())
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0);
        assert_eq!(db.stored_bytes("k1").await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_chain_is_read_back_by_parents_within_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        let now = now_ms();
        db.put_responses(&[
            turn("r1", None, now, 100),
            turn("r2", Some("r1"), now + 1, 10),
            turn("r3", Some("r2"), now + 2, 1),
            // Another key's response is never part of k1's chain.
            Arc::new(ResponseRow {
                parent: Some("r3".into()),
                ..row("x1", "k2", now + 3, &[])
            }),
        ])
        .await
        .unwrap();
        let links = |id: &'static str, max_bytes: u64, max_links: usize| {
            let db = &db;
            async move {
                db.response_chain(id, "k1", 0, max_bytes, max_links)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|l| (l.id, l.parent, l.text_bytes))
                    .collect::<Vec<_>>()
            }
        };
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            links("r3", 1_000, 10).await,
            [
                ("r3".into(), some("r2"), 1),
                ("r2".into(), some("r1"), 10),
                ("r1".into(), None, 100)
            ]
        );
        // Stops after the link that passes the bytes (r1's text is never needed), or at
        // the count: the last link's parent says where.
        assert_eq!(links("r3", 5, 10).await.len(), 2);
        assert_eq!(links("r3", 1_000, 2).await[1].1, some("r1"));
        assert!(links("x1", 1_000, 10).await.is_empty());
        assert!(
            db.response_chain("r3", "k1", now + 10, 1_000, 10)
                .await
                .unwrap()
                .is_empty()
        );
        let mut turns = Vec::new();
        db.response_turns(
            "k1",
            &["r1".into(), "r3".into(), "x1".into()],
            |id, text| {
                turns.push((id, text));
                Ok(())
            },
        )
        .await
        .unwrap();
        turns.sort();
        assert_eq!(
            turns,
            [
                ("r1".into(), "{\"turn\":\"r1\"}".into()),
                ("r3".into(), "{\"turn\":\"r3\"}".into())
            ]
        );
    }

    #[tokio::test]
    async fn a_later_turn_renews_the_ones_it_used_so_retention_keeps_the_chain_whole() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        let hour_ago = now_ms() - 3_600_000;
        db.put_responses(&[
            turn("r1", None, hour_ago, 1),
            turn("r2", Some("r1"), hour_ago + 1, 1),
            turn("other", None, hour_ago + 2, 1),
        ])
        .await
        .unwrap();
        let mut r3 = (*turn("r3", Some("r2"), now_ms(), 1)).clone();
        r3.touch = vec!["r2".into(), "r1".into(), "not-there".into()];
        db.put_responses(&[Arc::new(r3)]).await.unwrap();
        // Older than 30 minutes goes: the unrelated response, not the chain's first turns.
        db.retain_responses(Duration::from_secs(1_800), 100)
            .await
            .unwrap();
        assert!(db.response_body("other", "k1", 0).await.unwrap().is_none());
        assert_eq!(
            db.response_chain("r3", "k1", 0, 1_000, 10)
                .await
                .unwrap()
                .len(),
            3
        );
        // By count: the least recently used first, and a chain goes as a whole.
        let new = turn("new", None, now_ms() + 1_000, 1);
        db.put_responses(std::slice::from_ref(&new)).await.unwrap();
        db.retain_responses(Duration::from_secs(1_800), 1)
            .await
            .unwrap();
        assert!(db.response_body("new", "k1", 0).await.unwrap().is_some());
        // The key's running sum lost what was deleted, and only that.
        assert_eq!(db.stored_bytes("k1").await.unwrap(), new.bytes() as u64);
        for id in ["r1", "r2", "r3"] {
            assert!(
                db.response_body(id, "k1", 0).await.unwrap().is_none(),
                "{id}"
            );
        }
    }

    #[tokio::test]
    async fn rows_stored_before_chains_read_as_a_first_turn() {
        let dir = tempfile::tempdir().unwrap();
        let db = RecordDb::connect(&RecordsDb::Sqlite(dir.path().join("r.db")))
            .await
            .unwrap();
        db.migrate(5).await.unwrap();
        let now = to_db(now_ms());
        sqlx::query(
            "INSERT INTO responses (id, owner, created_ms, conversation, body) \
             VALUES ('old', 'k1', $1, '{\"system\":[],\"messages\":[]}', '{\"id\":\"old\"}')",
        )
        .bind(now)
        .execute(db.pool())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO response_items (owner, id, response_id, body) VALUES ('k1', 'msg', 'old', 'xyz')",
        )
        .execute(db.pool())
        .await
        .unwrap();
        db.migrate(usize::MAX).await.unwrap();
        let conversation = "{\"system\":[],\"messages\":[]}";
        assert_eq!(
            db.response_chain("old", "k1", 0, 1_000, 10).await.unwrap(),
            [ChainLink {
                id: "old".into(),
                parent: None,
                text_bytes: conversation.len() as u64
            }]
        );
        assert_eq!(
            db.stored_bytes("k1").await.unwrap(),
            (conversation.len() + "{\"id\":\"old\"}".len() + "msg".len() + "xyz".len()) as u64
        );
        assert!(db.response_body("old", "k1", 0).await.unwrap().is_some());
    }

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
