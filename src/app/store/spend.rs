//! Spend per owner and UTC day in the database (table `spend`, migration 0002), so every
//! replica on one database sees one key's spend (`--max-key-cost-usd-per-day`). It is
//! added in the writer's flush transaction from the batch's `Usage` events, so it is
//! committed exactly when those events are. Running sessions' cost reservations are kept
//! beside it (table `reservations`, migration 0003; see [`crate::app::spend`]).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use massgen_core::coordination::EventKind;
use sqlx::{Any, Row, Transaction};

use super::db::sql::{from_db, parameter, shaped_chunks, to_db};
use super::db::{Engine, RecordDb};
use super::sessions::rows::{Batch, SessionWrite};
use crate::app::quota::{DailyQuota, QuotaSpent, Spent, Want, day_text, utc_day};

/// Sessions per stored-usage SELECT at most (3 parameters each; in power-of-two shapes,
/// see `flush::shaped_chunks`).
const SESSIONS_PER_SELECT: usize = 64;

/// One `Usage` event: what it adds to its owner's day.
#[derive(Clone, Copy)]
struct Use {
    seq: u64,
    at_ms: u64,
    usd: f64,
    tokens: u64,
}

fn usage_of(session: &SessionWrite) -> Vec<Use> {
    session
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Usage {
                usage, cost_usd, ..
            } => Some(Use {
                seq: e.seq,
                at_ms: e.at_ms,
                usd: cost_usd.unwrap_or_default(),
                tokens: usage.total_tokens,
            }),
            _ => None,
        })
        .collect()
}

/// Adds the cost and tokens of `batch`'s `Usage` events to their owners' days. Events
/// already stored are skipped: a batch is retried whole when its commit's answer was
/// lost, and its spend must not count twice. Runs before the batch's events are inserted.
pub(in crate::app::store) async fn add(
    tx: &mut Transaction<'static, Any>,
    engine: Engine,
    batch: &Batch,
) -> Result<(), sqlx::Error> {
    // Each session's usage events, and those of them already stored, for all sessions in
    // a few statements (see `upsert_sessions` for why not one per session).
    let usage: Vec<(&SessionWrite, Vec<Use>)> = batch
        .sessions
        .iter()
        .map(|session| (session, usage_of(session)))
        .filter(|(_, usage)| !usage.is_empty())
        .collect();
    let mut stored: HashSet<(&str, u64)> = HashSet::new();
    for chunk in shaped_chunks(&usage, SESSIONS_PER_SELECT) {
        let mut sql = String::from("SELECT session_id, seq FROM events WHERE ");
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(" OR ");
            }
            let n = i * 3;
            sql.push_str("(session_id = ");
            parameter(&mut sql, engine, n + 1);
            sql.push_str(" AND seq >= ");
            parameter(&mut sql, engine, n + 2);
            sql.push_str(" AND seq <= ");
            parameter(&mut sql, engine, n + 3);
            sql.push(')');
        }
        let mut query = sqlx::query(&sql);
        for (session, usage) in chunk {
            // Never empty (filtered above); a range of nothing would do no harm either.
            let first = usage.first().map_or(0, |u| u.seq);
            let last = usage.last().map_or(0, |u| u.seq);
            query = query
                .bind(&*session.id)
                .bind(to_db(first))
                .bind(to_db(last));
        }
        // The batch's own ids, so the set borrows nothing from the rows.
        let ids: HashSet<&str> = chunk.iter().map(|(s, _)| &*s.id).collect();
        for row in query.fetch_all(&mut **tx).await? {
            let id: String = row.try_get(0)?;
            let seq = from_db(row.try_get::<i64, _>(1)?);
            if let Some(&own) = ids.get(id.as_str()) {
                stored.insert((own, seq));
            }
        }
    }
    let mut days: BTreeMap<(&str, String), Spent> = BTreeMap::new();
    for (session, usage) in &usage {
        for &Use {
            seq,
            at_ms,
            usd,
            tokens,
        } in usage
        {
            if stored.contains(&(&*session.id, seq)) {
                continue;
            }
            let day = days
                .entry((&session.owner, day_text(utc_day(at_ms))))
                .or_default();
            // A negative or NaN cost (no price is set that way) must not give allowance back.
            if usd.is_finite() && usd > 0.0 {
                day.usd += usd;
            }
            day.tokens = day.tokens.saturating_add(tokens);
        }
    }
    for ((owner, day), spent) in days {
        sqlx::query(
            "INSERT INTO spend (owner, day, usd, tokens) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (owner, day) DO UPDATE SET usd = spend.usd + excluded.usd, \
             tokens = spend.tokens + excluded.tokens",
        )
        .bind(owner)
        .bind(day)
        .bind(spent.usd)
        .bind(to_db(spent.tokens))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

impl RecordDb {
    /// Reserves at most `want.usd` of `owner`'s day (the UTC day of `now_ms`) under
    /// `want.limit` for a session, as reservation `id`: what was granted (all of it, or
    /// what is left when less), or the refusal when nothing is left. This replica's own
    /// reservations count as `want.own` (its ledger's, exact now) rather than as its rows. One transaction that
    /// first locks the owner's `spend` row of the day (a no-op UPDATE: PostgreSQL's row
    /// lock, SQLite's write lock), so reservations of one owner and day are made one at a
    /// time and each sees those committed before it. Reservations of a replica whose
    /// heartbeat is older than `stale_after` are deleted first: that replica stopped
    /// without giving them back. (Used with PostgreSQL: on SQLite one process owns the
    /// file and its ledger holds every reservation.)
    pub async fn reserve(
        &self,
        id: &str,
        owner: &str,
        now_ms: u64,
        want: Want,
        stale_after: Duration,
    ) -> Result<Result<f64, QuotaSpent>, sqlx::Error> {
        let day = day_text(utc_day(now_ms));
        let cutoff = to_db(
            now_ms.saturating_sub(u64::try_from(stale_after.as_millis()).unwrap_or(u64::MAX)),
        );
        let mut tx = self.begin_write().await?;
        // So that other replicas never take this one for stopped before its first beat.
        sqlx::query(
            "INSERT INTO replicas (id, started_ms, heartbeat_ms) VALUES ($1, $2, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(self.replica())
        .bind(to_db(now_ms))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO spend (owner, day, usd, tokens) VALUES ($1, $2, 0, 0) \
             ON CONFLICT (owner, day) DO NOTHING",
        )
        .bind(owner)
        .bind(&day)
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(
            "UPDATE spend SET usd = usd WHERE owner = $1 AND day = $2 RETURNING usd, tokens",
        )
        .bind(owner)
        .bind(&day)
        .fetch_one(&mut *tx)
        .await?;
        let spent = Spent {
            usd: row.try_get(0)?,
            tokens: from_db(row.try_get(1)?),
        };
        sqlx::query(
            "DELETE FROM reservations WHERE owner = $1 AND day = $2 AND replica <> $3 \
             AND NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.id = reservations.replica \
             AND replicas.heartbeat_ms >= $4)",
        )
        .bind(owner)
        .bind(&day)
        .bind(self.replica())
        .bind(cutoff)
        .execute(&mut *tx)
        .await?;
        let others: Option<f64> = sqlx::query(
            "SELECT SUM(usd) FROM reservations WHERE owner = $1 AND day = $2 AND replica <> $3",
        )
        .bind(owner)
        .bind(&day)
        .bind(self.replica())
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
        let quota = DailyQuota {
            limit_usd: want.limit,
        };
        let reserved = others.unwrap_or_default() + want.own;
        let granted = match quota.allowance(spent, reserved, Some(want.usd), want.floor) {
            Ok(usd) => usd,
            Err(refused) => {
                tx.commit().await?;
                return Ok(Err(refused));
            }
        };
        sqlx::query(
            "INSERT INTO reservations (id, owner, day, replica, usd, created_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(owner)
        .bind(&day)
        .bind(self.replica())
        .bind(granted)
        .bind(to_db(now_ms))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(granted))
    }

    /// Lowers reservation `id` to `usd`, what its ended session spent (never raises it).
    pub async fn settle_reservation(&self, id: &str, usd: f64) -> Result<(), sqlx::Error> {
        sqlx::query("UPDATE reservations SET usd = $2 WHERE id = $1 AND usd > $2")
            .bind(id)
            .bind(usd)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    /// Gives reservation `id` back (nothing when it is gone already).
    pub async fn release_reservation(&self, id: &str) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM reservations WHERE id = $1")
            .bind(id)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    /// What `owner` spent on the UTC day of `at_ms`, as committed by every replica.
    pub async fn spent_on(&self, owner: &str, at_ms: u64) -> Result<Spent, sqlx::Error> {
        let row = sqlx::query("SELECT usd, tokens FROM spend WHERE owner = $1 AND day = $2")
            .bind(owner)
            .bind(day_text(utc_day(at_ms)))
            .fetch_optional(self.pool())
            .await?;
        let Some(row) = row else {
            return Ok(Spent::default());
        };
        Ok(Spent {
            usd: row.try_get(0)?,
            tokens: from_db(row.try_get(1)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use massgen_core::coordination::{AgentRef, CallPhase, SessionEvent};
    use massgen_core::provider::Usage;

    use super::*;
    use crate::app::store::db::migrate;
    use crate::app::store::sessions::{SessionInfo, Summary};
    use crate::config::RecordsDb;

    const DAY_MS: u64 = 86_400_000;
    /// Noon UTC of 2026-11-23.
    const NOON: u64 = 1_795_392_000_000 + DAY_MS / 2;

    fn usage(id: &str, seq: u64, at_ms: u64, usd: Option<f64>, tokens: u64) -> Arc<SessionEvent> {
        Arc::new(SessionEvent {
            seq,
            at_ms,
            session_id: id.into(),
            kind: EventKind::Usage {
                agent: AgentRef {
                    agent_id: "a".into(),
                    label: "agent1".into(),
                },
                phase: CallPhase::Coordination,
                usage: Usage {
                    total_tokens: tokens,
                    ..Usage::default()
                },
                cost_usd: usd,
            },
        })
    }

    fn started(id: &str) -> Arc<SessionEvent> {
        Arc::new(SessionEvent {
            seq: 0,
            at_ms: NOON,
            session_id: id.into(),
            kind: EventKind::SessionStarted { agents: Vec::new() },
        })
    }

    fn write(id: &str, owner: &str, first: bool, events: Vec<Arc<SessionEvent>>) -> SessionWrite {
        let info = SessionInfo {
            model: "massgen".into(),
            door: "chat_completions".into(),
            created_ms: NOON,
            ..SessionInfo::default()
        };
        let summary = Summary {
            status: "running",
            ..Summary::default()
        };
        SessionWrite::new(id.into(), owner, &info, first, summary, 0, events)
    }

    fn batch(sessions: Vec<SessionWrite>) -> Batch {
        Batch { sessions }
    }

    async fn sqlite(dir: &tempfile::TempDir) -> RecordDb {
        RecordDb::connect(&RecordsDb::Sqlite(dir.path().join("records.db")))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn usage_adds_up_per_owner_and_utc_day_once_even_when_a_batch_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        db.migrate(migrate::count()).await.unwrap();
        let first = batch(vec![
            write(
                "s1",
                "owner-a",
                true,
                vec![
                    started("s1"),
                    usage("s1", 1, NOON, Some(0.25), 100),
                    usage("s1", 2, NOON + 1, Some(0.5), 50),
                ],
            ),
            write(
                "s2",
                "owner-b",
                true,
                vec![started("s2"), usage("s2", 1, NOON, Some(1.0), 7)],
            ),
        ]);
        db.flush(&first).await.unwrap();
        // The same batch again (its commit's answer was lost): nothing counts twice.
        db.flush(&first).await.unwrap();
        let a = db.spent_on("owner-a", NOON).await.unwrap();
        assert_eq!((a.usd, a.tokens), (0.75, 150));
        assert_eq!(db.spent_on("owner-b", NOON).await.unwrap().usd, 1.0);
        assert_eq!(db.spent_on("nobody", NOON).await.unwrap(), Spent::default());

        // A later batch of s1 adds to the day; a call after midnight is the next day's;
        // an unpriced call counts its tokens only.
        let tomorrow = NOON + DAY_MS;
        db.flush(&batch(vec![write(
            "s1",
            "owner-a",
            false,
            vec![
                usage("s1", 3, NOON + 2, None, 10),
                usage("s1", 4, tomorrow, Some(2.0), 1),
            ],
        )]))
        .await
        .unwrap();
        let a = db.spent_on("owner-a", NOON).await.unwrap();
        assert_eq!((a.usd, a.tokens), (0.75, 160));
        let next = db.spent_on("owner-a", tomorrow).await.unwrap();
        assert_eq!((next.usd, next.tokens), (2.0, 1));
        let days: Vec<String> = sqlx::query("SELECT day FROM spend WHERE owner = $1 ORDER BY day")
            .bind("owner-a")
            .fetch_all(db.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(days, ["2026-11-23", "2026-11-24"]);
    }

    #[tokio::test]
    async fn reservations_never_pass_the_limit_and_a_stopped_replicas_expire() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        db.migrate(migrate::count()).await.unwrap();
        let stale = Duration::from_secs(60);
        sqlx::query("INSERT INTO replicas (id, started_ms, heartbeat_ms) VALUES ('live', $1, $1)")
            .bind(to_db(NOON))
            .execute(db.pool())
            .await
            .unwrap();
        // Each reservation as if made by another live replica, this one counting none of
        // its own (`own: 0`).
        let reserve = |id: &'static str, usd: f64| {
            let db = &db;
            async move {
                let want = Want {
                    usd,
                    floor: 0.0,
                    limit: 5.0,
                    own: 0.0,
                };
                let granted = db.reserve(id, "owner-a", NOON, want, stale).await.unwrap();
                sqlx::query("UPDATE reservations SET replica = 'live' WHERE id = $1")
                    .bind(id)
                    .execute(db.pool())
                    .await
                    .unwrap();
                granted
            }
        };
        assert_eq!(reserve("r1", 2.0).await, Ok(2.0));
        assert_eq!(reserve("r2", 2.0).await, Ok(2.0));
        // What is left, when less than asked; then nothing.
        assert_eq!(reserve("r3", 2.0).await, Ok(1.0));
        let refused = reserve("r4", 0.5).await.unwrap_err();
        assert_eq!(refused.reserved_usd, 5.0);
        // Spend committed by the writer counts too.
        db.release_reservation("r3").await.unwrap();
        db.flush(&batch(vec![write(
            "s1",
            "owner-a",
            true,
            vec![started("s1"), usage("s1", 1, NOON, Some(0.75), 10)],
        )]))
        .await
        .unwrap();
        assert_eq!(reserve("r5", 1.0).await, Ok(0.25));
        // An ended session keeps only what it spent reserved until that is committed.
        db.settle_reservation("r5", 0.125).await.unwrap();
        db.settle_reservation("r5", 0.5).await.unwrap();
        assert_eq!(reserve("r7", 1.0).await, Ok(0.125));
        db.release_reservation("r7").await.unwrap();
        db.release_reservation("r5").await.unwrap();
        db.release_reservation("r5").await.unwrap();
        // A reservation of a replica without a heartbeat is a dead one's: the next
        // reservation drops it.
        sqlx::query("UPDATE reservations SET replica = 'gone' WHERE id = 'r1'")
            .execute(db.pool())
            .await
            .unwrap();
        assert_eq!(reserve("r6", 5.0).await, Ok(2.25));
        let left: i64 = sqlx::query("SELECT COUNT(*) FROM reservations")
            .fetch_one(db.pool())
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 2, "r2 and r6");
    }

    #[tokio::test]
    async fn a_database_of_the_previous_schema_keeps_its_sessions_and_gains_spend() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        db.migrate(1).await.unwrap();
        // A session written by the previous version (no Usage events: its writer had no
        // spend table to add to).
        db.flush(&batch(vec![write(
            "old",
            "owner-a",
            true,
            vec![started("old")],
        )]))
        .await
        .unwrap();
        let spend_table = "SELECT COUNT(*) FROM sqlite_master WHERE name = 'spend'";
        let count = |sql: &'static str| {
            let db = &db;
            async move {
                sqlx::query(sql)
                    .fetch_one(db.pool())
                    .await
                    .unwrap()
                    .get::<i64, _>(0)
            }
        };
        assert_eq!(count(spend_table).await, 0);

        db.migrate(migrate::count()).await.unwrap();
        assert_eq!(count(spend_table).await, 1);
        let old = db.session("old", "owner-a").await.unwrap().expect("kept");
        assert_eq!(old.status, "running");
        assert_eq!(db.events("old", 0, 10).await.unwrap().len(), 1);
        db.flush(&batch(vec![write(
            "old",
            "owner-a",
            false,
            vec![usage("old", 1, NOON, Some(0.5), 3)],
        )]))
        .await
        .unwrap();
        assert_eq!(db.spent_on("owner-a", NOON).await.unwrap().usd, 0.5);
    }

    #[tokio::test]
    async fn upkeep_forgets_reservations_of_past_days_and_of_forgotten_replicas() {
        let dir = tempfile::tempdir().unwrap();
        let db = sqlite(&dir).await;
        db.migrate(migrate::count()).await.unwrap();
        db.heartbeat().await.unwrap();
        let today = day_text(utc_day(crate::app::store::db::now_ms()));
        for (id, day, replica) in [
            ("old", "2000-01-01", db.replica().to_string()),
            ("gone", today.as_str(), "a-replica-long-gone".to_string()),
            ("mine", today.as_str(), db.replica().to_string()),
        ] {
            sqlx::query(
                "INSERT INTO reservations (id, owner, day, replica, usd, created_ms) \
                 VALUES ($1, 'o', $2, $3, 1.0, 0)",
            )
            .bind(id)
            .bind(day)
            .bind(replica)
            .execute(db.pool())
            .await
            .unwrap();
        }
        db.mark_interrupted(Duration::from_secs(60)).await.unwrap();
        let left: Vec<String> = sqlx::query("SELECT id FROM reservations ORDER BY id")
            .fetch_all(db.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<String, _>(0))
            .collect();
        assert_eq!(left, ["mine"]);
    }
}
