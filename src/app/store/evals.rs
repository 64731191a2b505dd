//! `massgen eval`'s runs in the records database (`eval_runs` and `eval_items`,
//! migration 5): the CLI writes a run's row when it starts and as it ends, and one row per
//! graded item and arm as it goes; the server lists and shows them (`GET /v1/evals`).
//! The sessions an item ran are ordinary session records, named by `session_ids`.
//!
//! Not pruned by the records' upkeep: a run is a handful of rows a user keeps to compare
//! against, unlike the sessions it ran (those age out, and the page then says a linked
//! session is gone).

use sqlx::Row;

use super::db::RecordDb;
use super::db::sql::{from_db, to_db};
use crate::app::evals::{ArmInfo, ItemResult};

/// Items one read returns at most: a run may hold many thousands (questions × arms), each
/// with its answer text, so they are read a page at a time.
pub const MAX_ITEMS_PAGE: usize = 1_000;
/// Runs one list returns at most.
pub const MAX_RUNS: usize = 1_000;

/// Whole items one read by item returns at most (each with one line per arm).
pub const MAX_ITEM_GROUPS_PAGE: usize = 100;

/// Which items a read by item keeps. An arm's line is right when it is correct and did
/// not fail; a failure counts as wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemFilter {
    All,
    /// Items whose lines are not all right or all wrong.
    Disagree,
    /// Items where arm `panel` is wrong and one of `agents` is right.
    PanelWrongAgentRight {
        panel: String,
        agents: Vec<String>,
    },
}

/// 1 for a right line, 0 for a wrong or failed one.
const RIGHT: &str = "(CASE WHEN correct = 1 AND failed IS NULL THEN 1 ELSE 0 END)";

impl ItemFilter {
    /// The `HAVING` clause over one item's lines, its arm names bound from `$first` on;
    /// `None` when no item can match (no agent arm to be right).
    fn having(&self, first: usize) -> Option<(String, Vec<&str>)> {
        match self {
            Self::All => Some((String::new(), Vec::new())),
            Self::Disagree => Some((format!("HAVING MIN({RIGHT}) <> MAX({RIGHT})"), Vec::new())),
            Self::PanelWrongAgentRight { panel, agents } => {
                if agents.is_empty() {
                    return None;
                }
                let names: Vec<String> = (0..agents.len())
                    .map(|n| format!("${}", first + 1 + n))
                    .collect();
                let clause = format!(
                    "HAVING SUM(CASE WHEN arm = ${first} AND {RIGHT} = 0 THEN 1 ELSE 0 END) > 0 \
                     AND SUM(CASE WHEN arm IN ({}) AND {RIGHT} = 1 THEN 1 ELSE 0 END) > 0",
                    names.join(", ")
                );
                let mut arms = vec![panel.as_str()];
                arms.extend(agents.iter().map(String::as_str));
                Some((clause, arms))
            }
        }
    }
}

/// One run as its row holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalRun {
    pub id: String,
    /// `Caller::owner()`: "" for the CLI (and a server without keys).
    pub owner: String,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// `running`, `finished` or `stopped`.
    pub status: String,
    /// The data file as given.
    pub data: String,
    pub grader: String,
    pub arms: Vec<ArmInfo>,
    /// The report, once the run has one.
    pub report: Option<serde_json::Value>,
}

/// A value for a plain TEXT column: PostgreSQL refuses NUL in text (ids and paths come
/// from the user's files). Applied to what is written and to what is looked up alike.
fn text(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains('\0') {
        value.replace('\0', "\u{FFFD}").into()
    } else {
        value.into()
    }
}

fn decode_error(e: serde_json::Error) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(e))
}

fn encode_error(e: serde_json::Error) -> sqlx::Error {
    sqlx::Error::Encode(Box::new(e))
}

const SELECT_RUN: &str =
    "SELECT id, owner, created_ms, updated_ms, status, data, grader, arms, report FROM eval_runs";

fn eval_run(row: &sqlx::any::AnyRow) -> Result<EvalRun, sqlx::Error> {
    let arms: String = row.try_get("arms")?;
    let report: Option<String> = row.try_get("report")?;
    Ok(EvalRun {
        id: row.try_get("id")?,
        owner: row.try_get("owner")?,
        created_ms: row.try_get("created_ms")?,
        updated_ms: row.try_get("updated_ms")?,
        status: row.try_get("status")?,
        data: row.try_get("data")?,
        grader: row.try_get("grader")?,
        arms: serde_json::from_str(&arms).map_err(decode_error)?,
        report: report
            .map(|r| serde_json::from_str(&r))
            .transpose()
            .map_err(decode_error)?,
    })
}

/// Seconds as whole milliseconds for the `latency_ms` column (a non-finite or negative
/// time, which a clock step could give, as 0).
fn latency_ms(seconds: f64) -> i64 {
    if seconds.is_finite() && seconds > 0.0 {
        // `as` saturates: an absurd latency stays a large number, never wraps.
        (seconds * 1000.0).round() as i64
    } else {
        0
    }
}

impl RecordDb {
    /// Writes `run` when its id is new or already `run.owner`'s (again: the row is
    /// replaced, its `created_ms` kept); `false`, writing nothing, when the id is another
    /// owner's run. One statement, so two writers cannot both take an id.
    pub async fn save_eval_run(&self, run: &EvalRun) -> Result<bool, sqlx::Error> {
        let arms = serde_json::to_string(&run.arms).map_err(encode_error)?;
        let report = run
            .report
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(encode_error)?;
        let written = sqlx::query(
            "INSERT INTO eval_runs (id, owner, created_ms, updated_ms, status, data, grader, arms, report) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (id) DO UPDATE SET updated_ms = excluded.updated_ms, \
             status = excluded.status, data = excluded.data, grader = excluded.grader, \
             arms = excluded.arms, report = excluded.report \
             WHERE eval_runs.owner = excluded.owner",
        )
        .bind(&*text(&run.id))
        .bind(&run.owner)
        .bind(run.created_ms)
        .bind(run.updated_ms)
        .bind(&*text(&run.status))
        .bind(&*text(&run.data))
        .bind(&*text(&run.grader))
        .bind(arms)
        .bind(report)
        .execute(self.writer())
        .await?;
        Ok(written.rows_affected() > 0)
    }

    /// Writes `item`'s row of run `run_id` (again: replaced, so a resumed run's regraded
    /// item is its newest outcome) when that run is `owner`'s; `false`, writing nothing,
    /// when it is not (another owner's, or no run).
    pub async fn save_eval_item(
        &self,
        run_id: &str,
        owner: &str,
        item: &ItemResult,
    ) -> Result<bool, sqlx::Error> {
        // JSON has no NaN: serde writes it as null, which would not read back as an f64.
        let result = if item.latency_s.is_finite() {
            serde_json::to_string(item)
        } else {
            serde_json::to_string(&ItemResult {
                latency_s: 0.0,
                ..item.clone()
            })
        }
        .map_err(encode_error)?;
        let sessions = serde_json::to_string(&item.session_ids).map_err(encode_error)?;
        // The owner is checked in the statement that writes, not before it.
        let written = sqlx::query(
            "INSERT INTO eval_items (run_id, item_id, arm, correct, failed, cost_usd, latency_ms, session_ids, result) \
             SELECT $1, $2, $3, $4, $5, CAST($6 AS DOUBLE PRECISION), $7, $8, $9 \
             WHERE EXISTS (SELECT 1 FROM eval_runs WHERE id = $1 AND owner = $10) \
             ON CONFLICT (run_id, item_id, arm) DO UPDATE SET correct = excluded.correct, \
             failed = excluded.failed, cost_usd = excluded.cost_usd, latency_ms = excluded.latency_ms, \
             session_ids = excluded.session_ids, result = excluded.result",
        )
        .bind(&*text(run_id))
        .bind(&*text(&item.item))
        .bind(&*text(&item.arm))
        .bind(i64::from(item.correct))
        .bind(item.failed.as_deref().map(text).map(|f| f.into_owned()))
        // As text, cast by the database: through sqlx's Any driver a null f64 after a
        // non-null one on the same PostgreSQL connection fails ("incorrect binary data
        // format in bind parameter"); a text parameter is one type either way.
        .bind(item.cost_usd.filter(|c| c.is_finite()).map(|c| c.to_string()))
        .bind(latency_ms(item.latency_s))
        .bind(sessions)
        .bind(result)
        .bind(owner)
        .execute(self.writer())
        .await?;
        Ok(written.rows_affected() > 0)
    }

    /// The newest `limit` runs (at most [`MAX_RUNS`]) of `owner`, or of everyone with
    /// `None`, newest first.
    pub async fn eval_runs(
        &self,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EvalRun>, sqlx::Error> {
        let limit = to_db(limit.min(MAX_RUNS) as u64);
        let rows = match owner {
            Some(owner) => {
                sqlx::query(&format!(
                    "{SELECT_RUN} WHERE owner = $1 ORDER BY created_ms DESC, id LIMIT $2"
                ))
                .bind(owner)
                .bind(limit)
                .fetch_all(self.pool())
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "{SELECT_RUN} ORDER BY created_ms DESC, id LIMIT $1"
                ))
                .bind(limit)
                .fetch_all(self.pool())
                .await?
            }
        };
        rows.iter().map(eval_run).collect()
    }

    /// Run `id`, whoever owns it (the caller checks the owner).
    pub async fn eval_run(&self, id: &str) -> Result<Option<EvalRun>, sqlx::Error> {
        let row = sqlx::query(&format!("{SELECT_RUN} WHERE id = $1"))
            .bind(&*text(id))
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(eval_run).transpose()
    }

    /// At most `limit` (and [`MAX_ITEMS_PAGE`]) items of run `run_id` from the `offset`th,
    /// by item id (shorter first, so `2` comes before `10`), then arm.
    pub async fn eval_items(
        &self,
        run_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ItemResult>, sqlx::Error> {
        let rows = sqlx::query(
            "SELECT result FROM eval_items WHERE run_id = $1 \
             ORDER BY LENGTH(item_id), item_id, arm LIMIT $2 OFFSET $3",
        )
        .bind(&*text(run_id))
        .bind(to_db(limit.min(MAX_ITEMS_PAGE) as u64))
        .bind(to_db(offset as u64))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let result: String = r.try_get(0)?;
                serde_json::from_str(&result).map_err(decode_error)
            })
            .collect()
    }

    /// The lines of at most `limit` (and [`MAX_ITEM_GROUPS_PAGE`]) whole items of run
    /// `run_id`, from the `offset`th item that `filter` keeps, in item order (as
    /// [`Self::eval_items`]) and each item's lines by arm. The database picks the page's
    /// items from the key columns and reads only those items' lines.
    pub async fn eval_items_by_item(
        &self,
        run_id: &str,
        filter: &ItemFilter,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<ItemResult>, sqlx::Error> {
        let Some((having, arms)) = filter.having(2) else {
            return Ok(Vec::new());
        };
        let next = 2 + arms.len();
        let sql = format!(
            "SELECT result FROM eval_items WHERE run_id = $1 AND item_id IN (\
             SELECT item_id FROM eval_items WHERE run_id = $1 GROUP BY item_id {having} \
             ORDER BY LENGTH(item_id), item_id LIMIT ${next} OFFSET ${}) \
             ORDER BY LENGTH(item_id), item_id, arm",
            next + 1
        );
        let mut query = sqlx::query(&sql).bind(text(run_id).into_owned());
        for arm in arms {
            query = query.bind(text(arm).into_owned());
        }
        let rows = query
            .bind(to_db(limit.min(MAX_ITEM_GROUPS_PAGE) as u64))
            .bind(to_db(offset as u64))
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                let result: String = r.try_get(0)?;
                serde_json::from_str(&result).map_err(decode_error)
            })
            .collect()
    }

    /// How many items (not lines) of run `run_id` `filter` keeps.
    pub async fn eval_item_group_count(
        &self,
        run_id: &str,
        filter: &ItemFilter,
    ) -> Result<u64, sqlx::Error> {
        let Some((having, arms)) = filter.having(2) else {
            return Ok(0);
        };
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT item_id FROM eval_items WHERE run_id = $1 \
             GROUP BY item_id {having}) AS kept"
        );
        let mut query = sqlx::query(&sql).bind(text(run_id).into_owned());
        for arm in arms {
            query = query.bind(text(arm).into_owned());
        }
        let row = query.fetch_one(self.pool()).await?;
        Ok(from_db(row.try_get(0)?))
    }

    /// How many items run `run_id` holds.
    pub async fn eval_item_count(&self, run_id: &str) -> Result<u64, sqlx::Error> {
        let row = sqlx::query("SELECT COUNT(*) FROM eval_items WHERE run_id = $1")
            .bind(&*text(run_id))
            .fetch_one(self.pool())
            .await?;
        Ok(from_db(row.try_get(0)?))
    }

    /// Forgets every item row of run `run_id` when that run is `owner`'s (a resumed run
    /// writes its current ones again: a result that no longer counts must not stay listed).
    pub async fn delete_eval_items(&self, run_id: &str, owner: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "DELETE FROM eval_items WHERE run_id = $1 \
             AND EXISTS (SELECT 1 FROM eval_runs WHERE id = $1 AND owner = $2)",
        )
        .bind(&*text(run_id))
        .bind(owner)
        .execute(self.writer())
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::evals::ArmKind;
    use crate::config::RecordsDb;

    async fn open(dir: &tempfile::TempDir) -> RecordDb {
        RecordDb::open(&RecordsDb::Sqlite(dir.path().join("records.db")))
            .await
            .unwrap()
    }

    fn arm(name: &str, kind: ArmKind) -> ArmInfo {
        ArmInfo {
            name: name.into(),
            kind,
            samples: if kind == ArmKind::SelfConsistency {
                5
            } else {
                1
            },
            models: vec!["openai/gpt-x".into(), "anthropic/claude-y".into()],
        }
    }

    fn run(id: &str, owner: &str, created_ms: i64) -> EvalRun {
        EvalRun {
            id: id.into(),
            owner: owner.into(),
            created_ms,
            updated_ms: created_ms,
            status: "running".into(),
            data: "questions.jsonl".into(),
            grader: "exact".into(),
            arms: vec![
                arm("panel", ArmKind::Panel),
                arm("agent:gpt", ArmKind::Agent),
                arm("sc5:gpt", ArmKind::SelfConsistency),
            ],
            report: None,
        }
    }

    fn item(id: &str, arm: &str, correct: bool) -> ItemResult {
        ItemResult {
            item: id.into(),
            arm: arm.into(),
            kind: ArmKind::Agent,
            correct,
            failed: None,
            answer: Some(format!("The answer to {id} is 42.")),
            extracted: Some("42".into()),
            samples: Vec::new(),
            cost_usd: Some(0.0125),
            judge_cost_usd: None,
            input_tokens: 120,
            output_tokens: 30,
            latency_s: 2.25,
            session_ids: vec![format!("sess_{id}_{arm}")],
            judge_session_ids: Vec::new(),
            fingerprint: String::new(),
            ..ItemResult::default()
        }
    }

    #[tokio::test]
    async fn a_run_is_saved_again_as_it_ends_and_reads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir).await;
        let mut r = run("eval_1", "", 1_000);
        assert!(db.save_eval_run(&r).await.unwrap());
        assert_eq!(db.eval_run("eval_1").await.unwrap(), Some(r.clone()));

        r.status = "finished".into();
        r.updated_ms = 9_000;
        r.report = Some(serde_json::json!({"arms": [{"name": "panel", "accuracy": 0.75}]}));
        // What a second save cannot change: when the run began.
        let mut again = r.clone();
        again.created_ms = 5_000;
        assert!(db.save_eval_run(&again).await.unwrap());
        assert_eq!(db.eval_run("eval_1").await.unwrap(), Some(r));
        assert_eq!(db.eval_run("eval_2").await.unwrap(), None);
    }

    #[tokio::test]
    async fn another_owners_writes_change_nothing_of_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir).await;
        let mine = run("eval_1", "owner-a", 1_000);
        assert!(db.save_eval_run(&mine).await.unwrap());
        assert!(
            db.save_eval_item("eval_1", "owner-a", &item("1", "panel", true))
                .await
                .unwrap()
        );
        // Another owner (a copied folder, an edited run.json) naming the same id.
        let mut theirs = run("eval_1", "owner-b", 2_000);
        theirs.status = "finished".into();
        theirs.report = Some(serde_json::json!({"taken": true}));
        assert!(!db.save_eval_run(&theirs).await.unwrap());
        let mut other = item("1", "panel", false);
        other.session_ids = vec!["sess_theirs".into()];
        assert!(
            !db.save_eval_item("eval_1", "owner-b", &other)
                .await
                .unwrap()
        );
        assert!(
            !db.save_eval_item("eval_1", "owner-b", &item("2", "panel", true))
                .await
                .unwrap()
        );
        db.delete_eval_items("eval_1", "owner-b").await.unwrap();
        // Nobody's run is not everybody's either.
        db.delete_eval_items("eval_1", "").await.unwrap();
        assert_eq!(db.eval_run("eval_1").await.unwrap(), Some(mine));
        assert_eq!(
            db.eval_items("eval_1", 0, 10).await.unwrap(),
            [item("1", "panel", true)]
        );
        // No run, no item: a row needs its owner's run.
        assert!(
            !db.save_eval_item("eval_9", "owner-a", &item("1", "panel", true))
                .await
                .unwrap()
        );
        assert_eq!(db.eval_item_count("eval_9").await.unwrap(), 0);
        // The owner's own delete still clears them.
        db.delete_eval_items("eval_1", "owner-a").await.unwrap();
        assert_eq!(db.eval_item_count("eval_1").await.unwrap(), 0);
    }

    #[tokio::test]
    async fn runs_list_newest_first_per_owner_or_all_bounded_by_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir).await;
        for (id, owner, at) in [("a", "", 1), ("b", "k1", 2), ("c", "", 3), ("d", "", 4)] {
            db.save_eval_run(&run(id, owner, at)).await.unwrap();
        }
        let ids = |runs: Vec<EvalRun>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            ids(db.eval_runs(Some(""), 10).await.unwrap()),
            ["d", "c", "a"]
        );
        assert_eq!(ids(db.eval_runs(Some(""), 2).await.unwrap()), ["d", "c"]);
        assert_eq!(ids(db.eval_runs(Some("k1"), 10).await.unwrap()), ["b"]);
        assert!(db.eval_runs(Some("k2"), 10).await.unwrap().is_empty());
        assert_eq!(
            ids(db.eval_runs(None, 10).await.unwrap()),
            ["d", "c", "b", "a"]
        );
    }

    #[tokio::test]
    async fn items_derive_their_columns_and_page_in_item_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir).await;
        db.save_eval_run(&run("eval_1", "", 1)).await.unwrap();
        db.save_eval_run(&run("eval_2", "", 2)).await.unwrap();
        for id in ["10", "2", "1"] {
            for arm in ["panel", "agent:gpt"] {
                assert!(
                    db.save_eval_item("eval_1", "", &item(id, arm, arm == "panel"))
                        .await
                        .unwrap()
                );
            }
        }
        let mut failed = item("q\0nul", "sc5:gpt", true);
        failed.correct = false;
        failed.failed = Some("every sample failed".into());
        failed.cost_usd = None;
        failed.samples = vec![None, Some("41".into())];
        failed.latency_s = f64::NAN;
        assert!(db.save_eval_item("eval_2", "", &failed).await.unwrap());

        assert_eq!(db.eval_item_count("eval_1").await.unwrap(), 6);
        assert_eq!(db.eval_item_count("nope").await.unwrap(), 0);
        let all = db.eval_items("eval_1", 0, 100).await.unwrap();
        let keys: Vec<(&str, &str)> = all
            .iter()
            .map(|i| (i.item.as_str(), i.arm.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("1", "agent:gpt"),
                ("1", "panel"),
                ("2", "agent:gpt"),
                ("2", "panel"),
                ("10", "agent:gpt"),
                ("10", "panel")
            ]
        );
        assert_eq!(all[1], item("1", "panel", true), "round-trips whole");
        let page = db.eval_items("eval_1", 2, 3).await.unwrap();
        assert_eq!(page, all[2..5]);
        assert!(db.eval_items("eval_1", 6, 10).await.unwrap().is_empty());

        // Saved again: replaced, not added.
        let mut regraded = item("2", "panel", false);
        regraded.failed = Some("the judge failed".into());
        assert!(db.save_eval_item("eval_1", "", &regraded).await.unwrap());
        assert_eq!(db.eval_item_count("eval_1").await.unwrap(), 6);
        assert_eq!(db.eval_items("eval_1", 3, 1).await.unwrap(), [regraded]);

        let columns = sqlx::query(
            "SELECT item_id, correct, failed, cost_usd, latency_ms, session_ids FROM eval_items \
             WHERE run_id = $1 ORDER BY item_id, arm",
        )
        .bind("eval_1")
        .fetch_all(db.pool())
        .await
        .unwrap();
        let first = &columns[0];
        assert_eq!(first.get::<String, _>(0), "1");
        assert_eq!(first.get::<i64, _>(1), 0);
        assert_eq!(first.get::<Option<String>, _>(2), None);
        assert_eq!(first.get::<Option<f64>, _>(3), Some(0.0125));
        assert_eq!(first.get::<i64, _>(4), 2_250);
        assert_eq!(first.get::<String, _>(5), r#"["sess_1_agent:gpt"]"#);
        assert_eq!(columns[1].get::<i64, _>(1), 1, "the panel was correct");

        let back = db.eval_items("eval_2", 0, 10).await.unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].item, "q\0nul", "the JSON keeps the id as given");
        assert_eq!(back[0].failed.as_deref(), Some("every sample failed"));
        assert_eq!(back[0].cost_usd, None);
        assert_eq!(back[0].samples, [None, Some("41".into())]);
        assert_eq!(back[0].latency_s, 0.0, "NaN has no JSON: stored as 0");
        let row =
            sqlx::query("SELECT item_id, cost_usd, latency_ms FROM eval_items WHERE run_id = $1")
                .bind("eval_2")
                .fetch_one(db.pool())
                .await
                .unwrap();
        assert_eq!(row.get::<String, _>(0), "q\u{FFFD}nul");
        assert_eq!(row.get::<Option<f64>, _>(1), None);
        assert_eq!(row.get::<i64, _>(2), 0);
    }

    #[tokio::test]
    async fn pages_by_item_hold_whole_items_and_filters_keep_only_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir).await;
        db.save_eval_run(&run("eval_1", "", 1)).await.unwrap();
        // Item 2: the arms disagree, the panel right. Item 3: the panel wrong, the agent
        // right. Item 10: the panel fails, self-consistency right (no agent arm right).
        for (id, panel, agent, sc) in [
            ("1", true, true, true),
            ("2", true, false, true),
            ("3", false, true, false),
            ("10", false, false, true),
            ("11", false, false, false),
        ] {
            for (arm, right) in [("panel", panel), ("agent:gpt", agent), ("sc5:gpt", sc)] {
                let mut line = item(id, arm, right);
                if id == "10" && arm == "panel" {
                    line.failed = Some("every session failed".into());
                }
                db.save_eval_item("eval_1", "", &line).await.unwrap();
            }
        }
        let ids = |lines: Vec<ItemResult>| {
            let mut ids: Vec<String> = lines.into_iter().map(|l| l.item).collect();
            ids.dedup();
            ids
        };
        let first = db
            .eval_items_by_item("eval_1", &ItemFilter::All, 0, 2)
            .await
            .unwrap();
        assert_eq!(first.len(), 6, "two items, three arms each");
        assert_eq!(ids(first), ["1", "2"]);
        let rest = db
            .eval_items_by_item("eval_1", &ItemFilter::All, 2, 100)
            .await
            .unwrap();
        assert_eq!(ids(rest), ["3", "10", "11"]);
        assert_eq!(
            db.eval_item_group_count("eval_1", &ItemFilter::All)
                .await
                .unwrap(),
            5
        );
        let disagree = ItemFilter::Disagree;
        let kept = db
            .eval_items_by_item("eval_1", &disagree, 0, 100)
            .await
            .unwrap();
        assert_eq!(ids(kept), ["2", "3", "10"]);
        assert_eq!(
            db.eval_item_group_count("eval_1", &disagree).await.unwrap(),
            3
        );
        let panel_wrong = ItemFilter::PanelWrongAgentRight {
            panel: "panel".into(),
            agents: vec!["agent:gpt".into(), "agent:other".into()],
        };
        let kept = db
            .eval_items_by_item("eval_1", &panel_wrong, 0, 100)
            .await
            .unwrap();
        assert_eq!(ids(kept), ["3"]);
        assert_eq!(
            db.eval_item_group_count("eval_1", &panel_wrong)
                .await
                .unwrap(),
            1
        );
        let no_agents = ItemFilter::PanelWrongAgentRight {
            panel: "panel".into(),
            agents: Vec::new(),
        };
        assert!(
            db.eval_items_by_item("eval_1", &no_agents, 0, 100)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            db.eval_item_group_count("eval_1", &no_agents)
                .await
                .unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn a_page_is_never_larger_than_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir).await;
        // Many rows at once: one transaction, so the test stays fast on a slow disk.
        let mut tx = db.pool().begin().await.unwrap();
        for n in 0..MAX_ITEMS_PAGE + 5 {
            sqlx::query(
                "INSERT INTO eval_items (run_id, item_id, arm, correct, latency_ms, session_ids, result) \
                 VALUES ($1, $2, $3, 0, 0, '[]', $4)",
            )
            .bind("big")
            .bind(n.to_string())
            .bind("panel")
            .bind(serde_json::to_string(&item(&n.to_string(), "panel", false)).unwrap())
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
        let page = db.eval_items("big", 0, usize::MAX).await.unwrap();
        assert_eq!(page.len(), MAX_ITEMS_PAGE);
        assert_eq!(page.last().unwrap().item, (MAX_ITEMS_PAGE - 1).to_string());
        let rest = db
            .eval_items("big", MAX_ITEMS_PAGE, usize::MAX)
            .await
            .unwrap();
        assert_eq!(rest.len(), 5);
    }

    #[tokio::test]
    async fn the_previous_schema_migrates_to_one_with_eval_tables() {
        let dir = tempfile::tempdir().unwrap();
        let db = RecordDb::connect(&RecordsDb::Sqlite(dir.path().join("records.db")))
            .await
            .unwrap();
        db.migrate(4).await.unwrap();
        assert!(db.eval_runs(None, 1).await.is_err(), "no table yet");
        db.migrate(crate::app::store::db::migrate::count())
            .await
            .unwrap();
        db.save_eval_run(&run("eval_1", "", 1)).await.unwrap();
        assert_eq!(db.eval_runs(None, 10).await.unwrap().len(), 1);
    }
}
