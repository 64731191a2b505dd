//! A run in the records database (when the command has one): its row, kept up to date,
//! and one row per graded item and arm, under the owner id of `MASSGEN_EVAL_KEY` (else
//! nobody's, which only a server without keys shows), so the server's page lists runs and opens the
//! sessions behind any item. A run id is its owner's: every write names the owner and
//! changes nothing of another owner's run, and [`Records::claim`] says when the id is
//! taken (the run then starts under a new one). A write that fails is said on stderr; the
//! files in `--out` stay the run's own record.

use std::sync::Arc;

use crate::app::store::RecordDb;
use crate::app::store::evals::EvalRun;

use super::files::RunFile;
use super::report::Report;
use crate::app::evals::ItemResult;

pub struct Records {
    db: Option<Arc<RecordDb>>,
    run_id: String,
    owner: String,
}

impl Records {
    /// Saves `run` as running under `owner`; `None` when its id is another owner's run in
    /// the database (nothing of it was touched). Without a database, or when the write
    /// fails (said on stderr), the run goes on: every later write checks the owner too.
    pub async fn claim(app: &crate::app::App, owner: &str, run: &RunFile) -> Option<Self> {
        let records = Self {
            db: app.records().db().cloned(),
            run_id: run.run_id.clone(),
            owner: owner.to_string(),
        };
        records.save(run, "running", None).await.then_some(records)
    }

    /// The item rows become `earlier` (what an earlier invocation graded and still
    /// counts): a result that no longer does (its item changed, or left the data) must not
    /// stay listed.
    pub async fn restate(&self, earlier: &[ItemResult]) {
        if let Some(db) = &self.db
            && let Err(e) = db.delete_eval_items(&self.run_id, &self.owner).await
        {
            warn(&format!(
                "cannot clear the earlier items of run {}: {e}",
                self.run_id
            ));
        }
        for item in earlier {
            self.item(item).await;
        }
    }

    pub async fn item(&self, result: &ItemResult) {
        let Some(db) = &self.db else { return };
        match db.save_eval_item(&self.run_id, &self.owner, result).await {
            Ok(true) => {}
            Ok(false) => warn(&format!(
                "item {} on {} not recorded: the records hold no run {} of this owner's",
                result.item, result.arm, self.run_id
            )),
            Err(e) => warn(&format!(
                "cannot record item {} on {}: {e}",
                result.item, result.arm
            )),
        }
    }

    pub async fn finish(&self, run: &RunFile, report: &Report) {
        let status = if report.run.stopped_by_budget || report.run.interrupted {
            "stopped"
        } else {
            "finished"
        };
        match serde_json::to_value(report) {
            Ok(json) => {
                if !self.save(run, status, Some(json)).await {
                    warn(&format!(
                        "run {} not recorded: the records hold it as another owner's",
                        run.run_id
                    ));
                }
            }
            Err(e) => warn(&format!("cannot record the report: {e}")),
        }
    }

    /// Writes the run's row; false only when the id is another owner's.
    async fn save(&self, run: &RunFile, status: &str, report: Option<serde_json::Value>) -> bool {
        let Some(db) = &self.db else { return true };
        let now = now_ms();
        let row = EvalRun {
            id: run.run_id.clone(),
            owner: self.owner.clone(),
            created_ms: i64::try_from(run.created.saturating_mul(1000)).unwrap_or(i64::MAX),
            updated_ms: now,
            status: status.to_string(),
            data: run.data.clone(),
            grader: run.grader.clone(),
            arms: run.arms.clone(),
            report,
        };
        match db.save_eval_run(&row).await {
            Ok(written) => written,
            Err(e) => {
                warn(&format!("cannot record run {}: {e}", run.run_id));
                true
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn warn(message: &str) {
    eprintln!("eval: warning: {message}");
}
