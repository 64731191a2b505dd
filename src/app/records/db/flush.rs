//! One batch of the writer: every touched session's row and its new events, in ONE
//! transaction ([`RecordDb::flush`]), so a reader never sees a final status without the
//! events before it. Whatever else must be committed with the events (per-owner spend)
//! is one more step of that function.

use std::sync::Arc;

use massgen_core::coordination::SessionEvent;
use sqlx::{Any, Transaction};

use super::rows::{StoredInfo, StoredSummary, to_db};
use super::{Engine, RecordDb};
use crate::app::records::{SessionInfo, Summary};

/// Event rows per INSERT statement (4 parameters each: far below both engines' limits).
const ROWS_PER_INSERT: usize = 200;

/// One session's part of a batch.
pub struct SessionWrite {
    pub id: Arc<str>,
    pub owner: String,
    /// Written with the session's first batch only (the row's `info` never changes).
    pub(super) info: Option<StoredInfo>,
    pub door: String,
    pub model: String,
    pub panel: String,
    pub created_ms: u64,
    pub summary: Summary,
    pub dropped: u64,
    pub events: Vec<Arc<SessionEvent>>,
}

impl SessionWrite {
    pub fn new(
        id: Arc<str>,
        owner: &str,
        info: &SessionInfo,
        first: bool,
        summary: Summary,
        dropped: u64,
        events: Vec<Arc<SessionEvent>>,
    ) -> Self {
        Self {
            id,
            owner: owner.to_string(),
            info: first.then(|| StoredInfo::of(info)),
            door: text_column(&info.door),
            model: text_column(&info.model),
            panel: text_column(&info.panel),
            created_ms: info.created_ms,
            summary,
            dropped,
            events,
        }
    }
}

/// A value for a plain TEXT column. PostgreSQL refuses NUL in text (SQLite takes it), and
/// `model` is whatever the client sent: one such request would fail its batch on every
/// retry and stop the replica's records. (JSON columns escape it as `\u0000`.)
fn text_column(value: &str) -> String {
    value.replace('\0', "\u{FFFD}")
}

/// What one transaction writes.
#[derive(Default)]
pub struct Batch {
    pub sessions: Vec<SessionWrite>,
}

impl Batch {
    pub fn events(&self) -> usize {
        self.sessions.iter().map(|s| s.events.len()).sum()
    }
}

impl RecordDb {
    /// Commits `batch` in one transaction: all of it or nothing (the writer retries the
    /// whole batch; events are keyed by `(session_id, seq)`, so a retry after a commit
    /// whose answer was lost writes nothing twice).
    pub async fn flush(&self, batch: &Batch) -> Result<(), sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        match self.write(&mut tx, batch).await {
            // A failed commit leaves the transaction to sqlx's drop, which rolls back
            // what is still open; the pool closes the connection if that fails.
            Ok(()) => tx.commit().await,
            Err(e) => {
                // Rolled back now, before the writer's retry: the retry must not find
                // this transaction still holding the write lock. A rollback that fails
                // (SQLite may already have ended the transaction itself) leaves the
                // connection in a transaction, and the pool closes it on release.
                match tokio::time::timeout(ROLLBACK_TIMEOUT, tx.rollback()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(r)) => tracing::debug!(
                        "rollback after a failed batch failed (the connection is closed): {}",
                        super::safe_error(&r)
                    ),
                    Err(_) => tracing::debug!("rollback after a failed batch timed out"),
                }
                Err(e)
            }
        }
    }

    async fn write(
        &self,
        tx: &mut Transaction<'static, Any>,
        batch: &Batch,
    ) -> Result<(), sqlx::Error> {
        // Before the events go in: it skips those a lost commit answer already stored.
        super::spend::add(tx, batch).await?;
        for session in &batch.sessions {
            upsert_session(tx, self.replica(), session).await?;
            insert_events(tx, session).await?;
        }
        if self.engine() == Engine::Postgres {
            notify(tx, batch.sessions.iter().map(|s| &*s.id)).await?;
        }
        Ok(())
    }
}

/// How long a rollback after a failed batch may take (a cut PostgreSQL link otherwise
/// holds the writer until TCP notices).
const ROLLBACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

async fn upsert_session(
    tx: &mut Transaction<'static, Any>,
    replica: &str,
    s: &SessionWrite,
) -> Result<(), sqlx::Error> {
    let info = match &s.info {
        Some(info) => serde_json::to_string(info),
        // Only reached when the row exists (the first batch committed): the conflict
        // branch below leaves `info` alone.
        None => Ok("{}".to_string()),
    }
    .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let summary = serde_json::to_string(&StoredSummary::of(&s.summary, s.dropped))
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    sqlx::query(
        "INSERT INTO sessions (id, owner, replica, status, door, model, panel, created_ms, \
         started_ms, ended_ms, info, summary) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
         ON CONFLICT (id) DO UPDATE SET replica = excluded.replica, status = excluded.status, \
         started_ms = excluded.started_ms, ended_ms = excluded.ended_ms, \
         summary = excluded.summary",
    )
    .bind(&*s.id)
    .bind(&s.owner)
    .bind(replica)
    .bind(s.summary.status)
    .bind(&s.door)
    .bind(&s.model)
    .bind(&s.panel)
    .bind(to_db(s.created_ms))
    .bind(s.summary.started_ms.map(to_db))
    .bind(s.summary.ended_ms.map(to_db))
    .bind(info)
    .bind(summary)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn insert_events(
    tx: &mut Transaction<'static, Any>,
    s: &SessionWrite,
) -> Result<(), sqlx::Error> {
    for chunk in s.events.chunks(ROWS_PER_INSERT) {
        let mut sql = String::from("INSERT INTO events (session_id, seq, at_ms, body) VALUES ");
        for i in 0..chunk.len() {
            let n = i * 4;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(${}, ${}, ${}, ${})", n + 1, n + 2, n + 3, n + 4));
        }
        sql.push_str(" ON CONFLICT (session_id, seq) DO NOTHING");
        let mut query = sqlx::query(&sql);
        for event in chunk {
            let body =
                serde_json::to_string(&**event).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
            query = query
                .bind(&*s.id)
                .bind(to_db(event.seq))
                .bind(to_db(event.at_ms))
                .bind(body);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// PostgreSQL: tells every replica's listener which sessions changed; delivered at
/// commit, so a woken reader finds the rows.
pub(super) async fn notify<'a>(
    tx: &mut Transaction<'static, Any>,
    ids: impl Iterator<Item = &'a str>,
) -> Result<(), sqlx::Error> {
    for id in ids {
        // Counted, not selected: the `Any` driver has no type for pg_notify's `void`.
        sqlx::query("SELECT COUNT(*) FROM (SELECT pg_notify($1, $2)) AS sent")
            .bind(super::upkeep::CHANNEL)
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_columns_never_carry_nul() {
        assert_eq!(super::text_column("gpt\0x"), "gpt\u{FFFD}x");
        assert_eq!(super::text_column("massgen/team"), "massgen/team");
    }
}
