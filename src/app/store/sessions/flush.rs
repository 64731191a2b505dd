//! One batch of the writer: every touched session's row and its new events, in ONE
//! transaction ([`RecordDb::flush`]), so a reader never sees a final status without the
//! events before it. Whatever else must be committed with the events (per-owner spend)
//! is one more step of that function.

use massgen_core::coordination::SessionEvent;
use sqlx::{Any, Transaction};

use std::sync::Arc;

use super::rows::{Batch, SessionWrite, StoredSummary, merged_deltas};
use crate::app::store::db::listen::notify;
use crate::app::store::db::sql::{placeholders, shaped_chunks, to_db};
use crate::app::store::db::{Engine, RecordDb, roll_back};
use crate::app::store::spend;

/// Event rows per INSERT statement at most (4 parameters each: far below both engines'
/// limits).
const ROWS_PER_INSERT: usize = 128;

impl RecordDb {
    /// Commits `batch` in one transaction: all of it or nothing (the writer retries the
    /// whole batch; events are keyed by `(session_id, seq)`, so a retry after a commit
    /// whose answer was lost writes nothing twice).
    pub(in crate::app::store) async fn flush(&self, batch: &Batch) -> Result<(), sqlx::Error> {
        let mut tx = self.begin_write().await?;
        match self.write(&mut tx, batch).await {
            // A failed commit leaves the transaction to sqlx's drop, which rolls back
            // what is still open; the pool closes the connection if that fails.
            Ok(()) => tx.commit().await,
            Err(e) => {
                roll_back(tx).await;
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
        spend::add(tx, engine, batch).await?;
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

/// Session rows per INSERT statement at most (12 parameters each).
const SESSIONS_PER_UPSERT: usize = 32;

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

/// The events of every session of the batch, [`ROWS_PER_INSERT`] rows per statement, each
/// call's token deltas merged ([`merged_deltas`]).
async fn insert_events(
    tx: &mut Transaction<'static, Any>,
    engine: Engine,
    sessions: &[SessionWrite],
) -> Result<(), sqlx::Error> {
    let merged: Vec<(&str, Vec<Arc<SessionEvent>>)> = sessions
        .iter()
        .map(|s| (&*s.id, merged_deltas(&s.events)))
        .collect();
    let rows: Vec<(&str, &SessionEvent)> = merged
        .iter()
        .flat_map(|(id, events)| events.iter().map(move |e| (*id, &**e)))
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
