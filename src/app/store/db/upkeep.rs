//! What every replica does on a timer: say it is alive (`replicas.heartbeat_ms`), mark
//! `interrupted` the sessions left `running` by a replica that stopped saying so (on a
//! SQLite file, which one process owns: by any earlier process), and
//! enforce retention. Each step is one idempotent statement, so any number of replicas
//! may run them at once.

use std::time::Duration;

use sqlx::Row;

use super::sql::to_db;
use super::{Engine, RecordDb, now_ms};
use crate::app::quota::{day_text, utc_day};

/// Retention is checked at most this often (a DELETE scan, not a heartbeat's cost).
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// What the timer is set to.
#[derive(Debug, Clone, Copy)]
pub struct Upkeep {
    pub heartbeat: Duration,
    pub interrupted_after: Duration,
    /// Finished sessions older than this are deleted.
    pub max_age: Duration,
    /// Beyond this many sessions, the oldest finished ones are deleted.
    pub max_sessions: usize,
    /// Enforce `max_age` and `max_sessions`. Off for a process that only adds to a
    /// database a server owns (`massgen eval`): the server's retention is the one that
    /// counts, and the eval's own defaults must not delete what the server keeps.
    pub retain: bool,
}

impl RecordDb {
    /// Records this replica as alive now.
    pub async fn heartbeat(&self) -> Result<(), sqlx::Error> {
        let now = to_db(now_ms());
        sqlx::query(
            "INSERT INTO replicas (id, started_ms, heartbeat_ms) VALUES ($1, $2, $2) \
             ON CONFLICT (id) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms",
        )
        .bind(self.replica())
        .bind(now)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    /// Marks `interrupted` every `running` session of another replica whose heartbeat
    /// is older than `after` (or gone), ended at its last stored event; forgets such
    /// replicas. On a SQLite file this process holds the lock of, every other replica
    /// is gone (it was an earlier process), whatever its heartbeat. Returns how many
    /// sessions it marked.
    pub async fn mark_interrupted(&self, after: Duration) -> Result<u64, sqlx::Error> {
        let cutoff = if self.owns_file() {
            i64::MAX
        } else {
            to_db(now_ms().saturating_sub(u64::try_from(after.as_millis()).unwrap_or(u64::MAX)))
        };
        let mut tx = self.begin_write().await?;
        let marked = sqlx::query(
            "UPDATE sessions SET status = 'interrupted', \
             ended_ms = COALESCE((SELECT MAX(at_ms) FROM events WHERE events.session_id = sessions.id), created_ms) \
             WHERE status = 'running' AND replica <> $1 AND NOT EXISTS \
             (SELECT 1 FROM replicas WHERE replicas.id = sessions.replica AND replicas.heartbeat_ms >= $2) \
             RETURNING id",
        )
        .bind(self.replica())
        .bind(cutoff)
        .fetch_all(&mut *tx)
        .await?;
        let ids = marked
            .iter()
            .map(|r| r.try_get::<String, _>(0))
            .collect::<Result<Vec<_>, _>>()?;
        sqlx::query("DELETE FROM replicas WHERE heartbeat_ms < $1 AND id <> $2")
            .bind(cutoff)
            .bind(self.replica())
            .execute(&mut *tx)
            .await?;
        // Cost reservations of past days, and those of replicas just forgotten: the next
        // reservation of the same owner and day deletes a dead replica's rows, but rows of
        // owners that never come back (or of yesterday) would stay for good.
        sqlx::query(
            "DELETE FROM reservations WHERE day < $1 OR (replica <> $2 AND NOT EXISTS \
             (SELECT 1 FROM replicas WHERE replicas.id = reservations.replica))",
        )
        .bind(day_text(utc_day(now_ms())))
        .bind(self.replica())
        .execute(&mut *tx)
        .await?;
        if self.engine() == Engine::Postgres {
            // Readers following these sessions on any replica end now.
            super::listen::notify(&mut tx, ids.iter().map(String::as_str)).await?;
        }
        tx.commit().await?;
        if !ids.is_empty() && self.owns_file() {
            tracing::info!(
                sessions = ids.len(),
                "marked sessions interrupted: the process that ran them on this file stopped"
            );
        } else if !ids.is_empty() {
            tracing::info!(
                sessions = ids.len(),
                "marked sessions interrupted: their replica stopped (no heartbeat for {} s)",
                after.as_secs()
            );
        }
        Ok(ids.len() as u64)
    }

    /// Deletes finished sessions older than `max_age`, then the oldest finished ones
    /// beyond the newest `max_sessions`. Running sessions are never deleted.
    pub async fn retain(&self, max_age: Duration, max_sessions: usize) -> Result<(), sqlx::Error> {
        let cutoff =
            to_db(now_ms().saturating_sub(u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX)));
        let mut tx = self.begin_write().await?;
        // Events first: SQLite only cascades with foreign keys on, and this does not
        // depend on it.
        for table_sql in [
            "DELETE FROM events WHERE session_id IN (SELECT id FROM sessions WHERE status <> 'running' AND created_ms < $1)",
            "DELETE FROM sessions WHERE status <> 'running' AND created_ms < $1",
        ] {
            sqlx::query(table_sql)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?;
        }
        // The created_ms of the newest session past the limit, if there are that many.
        let oldest_kept =
            "(SELECT created_ms FROM sessions ORDER BY created_ms DESC LIMIT 1 OFFSET $1)";
        for table_sql in [
            format!(
                "DELETE FROM events WHERE session_id IN (SELECT id FROM sessions WHERE status <> 'running' AND created_ms <= {oldest_kept})"
            ),
            format!(
                "DELETE FROM sessions WHERE status <> 'running' AND created_ms <= {oldest_kept}"
            ),
        ] {
            sqlx::query(&table_sql)
                .bind(to_db(max_sessions as u64))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    /// The timer: heartbeat and interrupted marking every `heartbeat`, retention every
    /// minute. Failures are noted like the writer's (one warning per burst) and retried
    /// at the next tick.
    pub async fn run_upkeep(&self, upkeep: Upkeep) {
        let mut tick = tokio::time::interval(upkeep.heartbeat.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_retention: Option<tokio::time::Instant> = None;
        loop {
            tick.tick().await;
            let mut result = self.heartbeat().await;
            if result.is_ok() {
                result = self
                    .mark_interrupted(upkeep.interrupted_after)
                    .await
                    .map(drop);
            }
            if upkeep.retain
                && result.is_ok()
                && last_retention.is_none_or(|at| at.elapsed() >= RETENTION_EVERY)
            {
                last_retention = Some(tokio::time::Instant::now());
                result = self.retain(upkeep.max_age, upkeep.max_sessions).await;
                if result.is_ok() {
                    // Stored responses age and count out as session records do.
                    result = self
                        .retain_responses(upkeep.max_age, upkeep.max_sessions)
                        .await;
                }
            }
            self.note_write(&result);
        }
    }
}
