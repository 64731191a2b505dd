//! A run in the records database (when the command has one): its row, kept up to date,
//! and one row per graded item and arm, under the owner id of `MASSGEN_EVAL_KEY` (else
//! nobody's, which only a server without keys shows), so the server's page lists runs and opens the
//! sessions behind any item. A write that fails is said on stderr; the files in `--out`
//! stay the run's own record.

use std::sync::Arc;

use crate::app::records::db::RecordDb;
use crate::app::records::db::evals::EvalRun;
use crate::server::AppState;

use super::files::RunFile;
use super::item::ItemResult;
use super::report::Report;

pub struct Records {
    db: Option<Arc<RecordDb>>,
    run_id: String,
    owner: String,
}

impl Records {
    /// Saves the run as running, with the items an earlier invocation graded.
    pub async fn new(state: &AppState, owner: &str, run: &RunFile, earlier: &[ItemResult]) -> Self {
        let records = Self {
            db: state.sessions.records().db().cloned(),
            run_id: run.run_id.clone(),
            owner: owner.to_string(),
        };
        records.save(run, "running", None).await;
        // The rows are rewritten from what counts now: a result that no longer does (its
        // item changed, or left the data) must not stay listed.
        if let Some(db) = &records.db
            && let Err(e) = db.delete_eval_items(&run.run_id).await
        {
            warn(&format!(
                "cannot clear the earlier items of run {}: {e}",
                run.run_id
            ));
        }
        for item in earlier {
            records.item(item).await;
        }
        records
    }

    pub async fn item(&self, result: &ItemResult) {
        let Some(db) = &self.db else { return };
        if let Err(e) = db.save_eval_item(&self.run_id, result).await {
            warn(&format!(
                "cannot record item {} on {}: {e}",
                result.item, result.arm
            ));
        }
    }

    pub async fn finish(&self, run: &RunFile, report: &Report) {
        let status = if report.run.stopped_by_budget || report.run.interrupted {
            "stopped"
        } else {
            "finished"
        };
        match serde_json::to_value(report) {
            Ok(json) => self.save(run, status, Some(json)).await,
            Err(e) => warn(&format!("cannot record the report: {e}")),
        }
    }

    async fn save(&self, run: &RunFile, status: &str, report: Option<serde_json::Value>) {
        let Some(db) = &self.db else { return };
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
        if let Err(e) = db.save_eval_run(&row).await {
            warn(&format!("cannot record run {}: {e}", run.run_id));
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
