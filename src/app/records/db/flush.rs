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

/// Event rows per INSERT statement at most (4 parameters each: far below both engines'
/// limits).
const ROWS_PER_INSERT: usize = 128;

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
        let mut tx = self.begin_write().await?;
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
        let engine = self.engine();
        super::spend::add(tx, engine, batch).await?;
        // Every session of the batch in a few multi-row statements, not two per session:
        // on SQLite each statement is a round trip to sqlx's worker thread (two context
        // switches), and those were most of the records' CPU per session.
        upsert_sessions(tx, engine, self.replica(), &batch.sessions).await?;
        insert_events(tx, engine, &batch.sessions).await?;
        if self.engine() == Engine::Postgres {
            notify(tx, batch.sessions.iter().map(|s| &*s.id)).await?;
        }
        Ok(())
    }
}

/// How long a rollback after a failed batch may take (a cut PostgreSQL link otherwise
/// holds the writer until TCP notices).
const ROLLBACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Session rows per INSERT statement at most (12 parameters each).
const SESSIONS_PER_UPSERT: usize = 32;

/// `items` in chunks whose lengths are powers of two, at most `max` (a power of two): a
/// multi-row statement then has one of a few shapes (8 for 128), which the connection's
/// statement cache keeps prepared. A chunk of every length would prepare a new statement
/// most batches and push the cache's other statements out.
pub(super) fn shaped_chunks<T>(items: &[T], max: usize) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let fits = rest.len().min(max);
        // The largest power of two not above `fits` (≥ 1, as `fits` ≥ 1).
        let size = 1usize << (usize::BITS - 1 - fits.leading_zeros());
        let (chunk, after) = rest.split_at(size);
        rest = after;
        Some(chunk)
    })
}

/// One parameter: `$n` for PostgreSQL; SQLite's anonymous `?`, because sqlx binds a
/// numbered SQLite parameter by asking SQLite for its name, a scan of the statement's
/// names: quadratic in the parameters (measured: at 800 parameters a third of the writer
/// thread's CPU went to that lookup).
pub(super) fn parameter(sql: &mut String, engine: Engine, n: usize) {
    match engine {
        Engine::Postgres => {
            sql.push('$');
            sql.push_str(&n.to_string());
        }
        Engine::Sqlite => sql.push('?'),
    }
}

/// `($1, $2, …), ($n+1, …)`: `rows` groups of `columns` parameters.
pub(super) fn placeholders(engine: Engine, rows: usize, columns: usize) -> String {
    let mut sql = String::with_capacity(rows * columns * 5);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            parameter(&mut sql, engine, row * columns + column + 1);
        }
        sql.push(')');
    }
    sql
}

async fn upsert_sessions(
    tx: &mut Transaction<'static, Any>,
    engine: Engine,
    replica: &str,
    sessions: &[SessionWrite],
) -> Result<(), sqlx::Error> {
    // One statement may not update a row twice (PostgreSQL refuses it): a session seen
    // again in this batch starts the next statement.
    let mut start = 0;
    while start < sessions.len() {
        let mut seen = std::collections::HashSet::new();
        let mut end = start;
        while end < sessions.len()
            && end - start < SESSIONS_PER_UPSERT
            && seen.insert(&*sessions[end].id)
        {
            end += 1;
        }
        for chunk in shaped_chunks(&sessions[start..end], SESSIONS_PER_UPSERT) {
            upsert_rows(tx, engine, replica, chunk).await?;
        }
        start = end;
    }
    Ok(())
}

async fn upsert_rows(
    tx: &mut Transaction<'static, Any>,
    engine: Engine,
    replica: &str,
    sessions: &[SessionWrite],
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO sessions (id, owner, replica, status, door, model, panel, created_ms, \
         started_ms, ended_ms, info, summary) VALUES {} \
         ON CONFLICT (id) DO UPDATE SET replica = excluded.replica, status = excluded.status, \
         started_ms = excluded.started_ms, ended_ms = excluded.ended_ms, \
         summary = excluded.summary",
        placeholders(engine, sessions.len(), 12)
    );
    let mut query = sqlx::query(&sql);
    for s in sessions {
        let info = match &s.info {
            Some(info) => serde_json::to_string(info),
            // Only reached when the row exists (the first batch committed): the conflict
            // branch leaves `info` alone.
            None => Ok("{}".to_string()),
        }
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        let summary = serde_json::to_string(&StoredSummary::of(&s.summary, s.dropped))
            .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        query = query
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
            .bind(summary);
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

/// The events of every session of the batch, [`ROWS_PER_INSERT`] rows per statement.
async fn insert_events(
    tx: &mut Transaction<'static, Any>,
    engine: Engine,
    sessions: &[SessionWrite],
) -> Result<(), sqlx::Error> {
    let rows: Vec<(&str, &SessionEvent)> = sessions
        .iter()
        .flat_map(|s| s.events.iter().map(move |e| (&*s.id, &**e)))
        .collect();
    for chunk in shaped_chunks(&rows, ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO events (session_id, seq, at_ms, body) VALUES {} \
             ON CONFLICT (session_id, seq) DO NOTHING",
            placeholders(engine, chunk.len(), 4)
        );
        let mut query = sqlx::query(&sql);
        for (id, event) in chunk {
            let body =
                serde_json::to_string(event).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
            query = query
                .bind(*id)
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
    fn chunks_take_a_few_shapes_and_cover_every_item() {
        let items: Vec<usize> = (0..300).collect();
        let sizes: Vec<usize> = super::shaped_chunks(&items, 128).map(<[_]>::len).collect();
        assert_eq!(sizes, [128, 128, 32, 8, 4]);
        let joined: Vec<usize> = super::shaped_chunks(&items, 128)
            .flatten()
            .copied()
            .collect();
        assert_eq!(joined, items);
        assert_eq!(super::shaped_chunks(&items[..0], 128).count(), 0);
        let one: Vec<usize> = super::shaped_chunks(&items[..1], 128)
            .map(<[_]>::len)
            .collect();
        assert_eq!(one, [1]);
    }

    #[test]
    fn placeholders_number_every_row() {
        use super::Engine::{Postgres, Sqlite};
        assert_eq!(
            super::placeholders(Postgres, 2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(super::placeholders(Sqlite, 2, 2), "(?, ?), (?, ?)");
        assert_eq!(super::placeholders(Postgres, 1, 1), "($1)");
    }

    #[test]
    fn text_columns_never_carry_nul() {
        assert_eq!(super::text_column("gpt\0x"), "gpt\u{FFFD}x");
        assert_eq!(super::text_column("massgen/team"), "massgen/team");
    }
}
