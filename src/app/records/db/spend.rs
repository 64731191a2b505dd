//! Spend per owner and UTC day in the database (table `spend`, migration 0002), so every
//! replica on one database sees one key's spend (`--max-key-cost-usd-per-day`). It is
//! added in the writer's flush transaction from the batch's `Usage` events, so it is
//! committed exactly when those events are.

use std::collections::{BTreeMap, HashSet};

use massgen_core::coordination::EventKind;
use sqlx::{Any, Row, Transaction};

use super::RecordDb;
use super::flush::Batch;
use super::rows::{from_db, to_db};
use crate::app::spend::{Spent, day_text, utc_day};

/// Adds the cost and tokens of `batch`'s `Usage` events to their owners' days. Events
/// already stored are skipped: a batch is retried whole when its commit's answer was
/// lost, and its spend must not count twice. Runs before the batch's events are inserted.
pub(super) async fn add(
    tx: &mut Transaction<'static, Any>,
    batch: &Batch,
) -> Result<(), sqlx::Error> {
    let mut days: BTreeMap<(&str, String), Spent> = BTreeMap::new();
    for session in &batch.sessions {
        let usage: Vec<_> = session
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Usage {
                    usage, cost_usd, ..
                } => Some((
                    e.seq,
                    e.at_ms,
                    cost_usd.unwrap_or_default(),
                    usage.total_tokens,
                )),
                _ => None,
            })
            .collect();
        let (Some(first), Some(last)) = (usage.first(), usage.last()) else {
            continue;
        };
        let stored: HashSet<u64> =
            sqlx::query("SELECT seq FROM events WHERE session_id = $1 AND seq >= $2 AND seq <= $3")
                .bind(&*session.id)
                .bind(to_db(first.0))
                .bind(to_db(last.0))
                .fetch_all(&mut **tx)
                .await?
                .iter()
                .map(|row| row.try_get::<i64, _>(0).map(from_db))
                .collect::<Result<_, _>>()?;
        for (seq, at_ms, usd, tokens) in usage {
            if stored.contains(&seq) {
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

    use super::super::flush::SessionWrite;
    use super::super::migrate;
    use super::*;
    use crate::app::records::{SessionInfo, Summary};
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
}
