//! The reads the record routes need: a session's row, an owner's newest rows, a run of
//! stored events, a stored status.

use std::sync::Arc;

use massgen_core::coordination::SessionEvent;
use sqlx::Row;

use super::live::{SessionInfo, Summary};
use super::rows::{StoredInfo, StoredSummary, status_name};
use crate::app::store::db::RecordDb;
use crate::app::store::db::sql::{from_db, to_db};

/// A session row (without its events).
pub(in crate::app::store) struct StoredSession {
    pub id: Arc<str>,
    pub status: &'static str,
    pub info: SessionInfo,
    pub summary: Summary,
    pub dropped: u64,
}

impl RecordDb {
    /// The row of session `id` if `owner` owns it.
    pub(in crate::app::store) async fn session(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<StoredSession>, sqlx::Error> {
        let row = sqlx::query(&format!("{SELECT_SESSION} WHERE id = $1 AND owner = $2"))
            .bind(id)
            .bind(owner)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| stored_session(&r)).transpose()
    }

    /// The newest `limit` sessions of `owner` (of `door` only, when named), newest first:
    /// each read along an index ending in `created_ms`, so no more than `limit` rows.
    pub(in crate::app::store) async fn list(
        &self,
        owner: &str,
        door: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredSession>, sqlx::Error> {
        let rows = match door {
            None => {
                sqlx::query(&format!(
                    "{SELECT_SESSION} WHERE owner = $1 ORDER BY created_ms DESC LIMIT $2"
                ))
                .bind(owner)
                .bind(to_db(limit as u64))
                .fetch_all(self.pool())
                .await?
            }
            Some(door) => sqlx::query(&format!(
                "{SELECT_SESSION} WHERE owner = $1 AND door = $2 ORDER BY created_ms DESC LIMIT $3"
            ))
            .bind(owner)
            .bind(door)
            .bind(to_db(limit as u64))
            .fetch_all(self.pool())
            .await?,
        };
        rows.iter().map(stored_session).collect()
    }

    /// At most `max` events of session `id` with `seq >= from`, in order.
    pub(in crate::app::store) async fn events(
        &self,
        id: &str,
        from: u64,
        max: usize,
    ) -> Result<Vec<SessionEvent>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT body FROM events WHERE session_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(to_db(from))
        .bind(to_db(max as u64))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let body: String = r.try_get(0)?;
                serde_json::from_str(&body).map_err(|e| sqlx::Error::Decode(Box::new(e)))
            })
            .collect()
    }

    /// The stored status of session `id` (`None`: no such row, e.g. deleted by retention).
    pub(in crate::app::store) async fn status(
        &self,
        id: &str,
    ) -> Result<Option<&'static str>, sqlx::Error> {
        let row = sqlx::query("SELECT status FROM sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| r.try_get::<String, _>(0).map(|s| status_name(&s)))
            .transpose()
    }
}

const SELECT_SESSION: &str = "SELECT id, status, door, model, panel, created_ms, started_ms, ended_ms, info, summary FROM sessions";

fn stored_session(row: &sqlx::any::AnyRow) -> Result<StoredSession, sqlx::Error> {
    let json = |text: String| -> Result<serde_json::Value, sqlx::Error> {
        serde_json::from_str(&text).map_err(|e| sqlx::Error::Decode(Box::new(e)))
    };
    let status: String = row.try_get("status")?;
    let info: StoredInfo = serde_json::from_value(json(row.try_get("info")?)?)
        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let summary: StoredSummary = serde_json::from_value(json(row.try_get("summary")?)?)
        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let optional = |name: &str| -> Result<Option<u64>, sqlx::Error> {
        Ok(row.try_get::<Option<i64>, _>(name)?.map(from_db))
    };
    let (summary, dropped) =
        summary.into_summary(&status, optional("started_ms")?, optional("ended_ms")?);
    Ok(StoredSession {
        id: row.try_get::<String, _>("id")?.into(),
        status: summary.status,
        info: info.into_info(
            row.try_get("model")?,
            row.try_get("door")?,
            row.try_get("panel")?,
            from_db(row.try_get("created_ms")?),
        ),
        summary,
        dropped,
    })
}
