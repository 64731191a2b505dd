//! Runs every arm on every item: at most `concurrency` sessions at once, no new item once
//! `max_cost_usd` is spent, too many results failed or Ctrl-C came (`stop`), each graded
//! item and arm appended to `items.jsonl` (and the records) as it finishes, then the
//! reports. An answer kept from an earlier invocation is graded again, not asked again,
//! when only the grading changed (`resume`); what a job makes of its sessions is `answer`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use massgen_core::coordination::SessionInput;
use tokio::sync::Semaphore;

use super::arms::Arms;
use super::data::Item;
use super::files::{OutDir, Previous, RunFile};
use super::grade::Grader;
use super::progress::{self, Progress};
use super::records::Records;
use super::report::{self, Report, RunInfo, StopReason, Stopped};
use super::resume::{self, Fingerprints, Job};
use super::session::{self, Label, Outcome};
use super::stop::{Ending, FailureRule, Stops, Tally};
use crate::app::evals::{ArmInfo, ItemResult};
use crate::app::{App, Caller};
use crate::config::PanelConfig;

/// Everything a run is made of, checked.
pub struct Plan {
    /// The data file as given (the report names it).
    pub data: String,
    pub items: Vec<Item>,
    /// The arms sessions run on; none when only grading stored answers again.
    pub arms: Arms,
    /// Every arm the report covers, in order: `arms`' own, or, grading only, those of the
    /// run being graded again.
    pub infos: Vec<ArmInfo>,
    pub grader: Grader,
    /// The judge's panel (`judge` grader), made to answer in one call when it has one
    /// agent.
    pub judge: Option<Arc<PanelConfig>>,
    /// Sessions in flight at most.
    pub concurrency: usize,
    pub max_cost_usd: Option<f64>,
    pub failures: FailureRule,
    /// `--group-by`, passed to the report.
    pub group_by: Option<String>,
    pub out: PathBuf,
    /// Whose run it is: the records file it and its sessions under this caller's owner id.
    pub caller: Caller,
    /// Each item's session input (built and checked before the run: see
    /// [`session::input`]); empty when grading only.
    pub inputs: Vec<SessionInput>,
    /// What every session is sent besides its item (the instruction, the structured
    /// output), as the answers' fingerprints take it.
    pub asked: String,
    /// The grader's settings, as the grading fingerprints take them.
    pub grading: String,
    /// `--regrade`: the folder's run is graded again, nothing is asked.
    pub regrade_only: bool,
    /// Set by the command's signal handler (Ctrl-C, SIGTERM).
    pub interrupt: Arc<Interrupt>,
}

/// A stop asked for from outside (the command's signal handler): no new item starts.
#[derive(Debug, Default)]
pub struct Interrupt {
    asked: AtomicBool,
    /// Every job has ended (the run is writing its report, the records, shutting down).
    jobs_done: AtomicBool,
}

impl Interrupt {
    /// Asks the run to stop; whether there is nothing left to stop gracefully (the caller
    /// then exits at once).
    pub fn ask(&self) -> bool {
        self.asked.store(true, Ordering::Relaxed);
        self.jobs_done.load(Ordering::Relaxed)
    }

    fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }
}

/// What the run left: its report, and how it ended (the exit code).
pub struct Finished {
    pub report: Report,
    pub markdown: String,
    pub ending: Ending,
}

pub(super) struct Run {
    pub(super) app: Arc<App>,
    pub(super) plan: Plan,
    run_id: String,
    pub(super) fingerprints: Fingerprints,
    sessions: Semaphore,
    out: Mutex<OutDir>,
    records: Records,
    /// USD the run has spent (arms and judge), earlier invocations' results included.
    spent: Mutex<f64>,
    started: Mutex<HashSet<usize>>,
    /// Why no new item starts (the budget, failures), and how many were left out.
    stops: Mutex<Stops>,
    tally: Mutex<Tally>,
    /// Jobs left per item, for the progress line.
    left: Vec<AtomicUsize>,
    progress: Progress,
    /// Results of this invocation.
    results: Mutex<Vec<ItemResult>>,
}

pub async fn run(app: Arc<App>, plan: Plan) -> Result<Finished, String> {
    let (mut out, previous) = OutDir::open(&plan.out)?;
    let (run_file, records, previous_items) = take_run(&app, &plan, &mut out, previous).await?;
    let fingerprints = if plan.regrade_only {
        Fingerprints::grading_only(&plan.items, &plan.grading)
    } else {
        Fingerprints::new(&plan.items, &plan.arms, &plan.asked, &plan.grading)
    };
    // The budget counts what earlier invocations of the run spent, on anything.
    let spent_before = report::known_spend(&previous_items);
    let work = resume::work(
        &plan.items,
        &plan.arms,
        &plan.infos,
        previous_items,
        &fingerprints,
    );
    // What the run holds now of each item (a metadata key edited since) goes with every
    // result the report counts.
    let earlier: Vec<ItemResult> = work
        .kept
        .into_iter()
        .map(|mut result| {
            if let Some(item) = plan.items.iter().find(|i| i.id == result.item) {
                describe(&mut result, item);
            }
            result
        })
        .collect();
    let jobs = work.jobs;
    let mut left: Vec<usize> = vec![0; plan.items.len()];
    for job in &jobs {
        left[job.item()] += 1;
    }
    let pending_items = left.iter().filter(|n| **n > 0).count();
    records.restate(&earlier).await;
    let run = Arc::new(Run {
        fingerprints,
        sessions: Semaphore::new(plan.concurrency.max(1)),
        out: Mutex::new(out),
        records,
        spent: Mutex::new(spent_before),
        started: Mutex::default(),
        stops: Mutex::new(Stops {
            total: pending_items,
            ..Stops::default()
        }),
        tally: Mutex::default(),
        left: left.into_iter().map(AtomicUsize::new).collect(),
        progress: Progress::new(plan.items.len(), plan.items.len() - pending_items),
        results: Mutex::default(),
        run_id: run_file.run_id.clone(),
        app,
        plan,
    });
    let concurrency = run.plan.concurrency.max(1);
    futures::stream::iter(jobs)
        .for_each_concurrent(concurrency, |job| {
            let run = Arc::clone(&run);
            async move { run.job(job).await }
        })
        .await;
    run.plan.interrupt.jobs_done.store(true, Ordering::Relaxed);
    run.progress.finish(run.spent());
    // Every session's record is written before the run says it is done.
    let tasks = run.app.sessions().tasks();
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(10), tasks.wait()).await;
    run.app
        .sessions()
        .records()
        .close(Duration::from_secs(10))
        .await;
    let mut all = earlier;
    all.extend(lock(&run.results).drain(..));
    let (stopped, ending) = {
        let mut stops = lock(&run.stops);
        stops.interrupted = run.plan.interrupt.asked();
        stops.verdict(&lock(&run.tally))
    };
    let info = info(&run_file, &run.plan, stopped);
    let report = report::build(info, &run.plan.infos, &all);
    let markdown = report::markdown(&report);
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    {
        let out = lock(&run.out);
        out.write("report.json", &json)?;
        out.write("report.md", &markdown)?;
        out.write("chart.svg", &super::chart::accuracy_cost_svg(&report))?;
    }
    run.records.finish(&run_file, &report).await;
    Ok(Finished {
        report,
        markdown,
        ending,
    })
}

/// The run this invocation continues, with its records and the lines it graded before,
/// or a new run. A folder's run is continued by its owner only: a `run.json` naming
/// another owner (a folder copied, or run under another key), or an id the records hold
/// as another owner's (a `run.json` edited), starts a new run from scratch, its id new and
/// the folder's earlier lines dropped, and the other run is left as it was. Grading only,
/// there is nothing to start from scratch: such a folder is refused.
async fn take_run(
    app: &App,
    plan: &Plan,
    out: &mut OutDir,
    previous: Previous,
) -> Result<(RunFile, Records, Vec<ItemResult>), String> {
    let owner = plan.caller.owner();
    let fresh = || RunFile {
        run_id: format!("eval_{}", uuid::Uuid::now_v7().simple()),
        owner: Some(owner.to_string()),
        created: now_secs(),
        data: plan.data.clone(),
        grader: plan.grader.name().to_string(),
        arms: plan.infos.clone(),
    };
    let theirs = |run: &str| {
        format!(
            "--regrade: {} names run {run}, which is another owner's (MASSGEN_EVAL_KEY): \
             nothing was graded",
            plan.out.join(super::files::RUN_FILE).display()
        )
    };
    let mut items = previous.items;
    let mut run = match previous.run {
        Some(run) if run.owner.as_deref().is_none_or(|o| o == owner) => RunFile {
            owner: Some(owner.to_string()),
            arms: plan.infos.clone(),
            data: plan.data.clone(),
            grader: plan.grader.name().to_string(),
            ..run
        },
        Some(other) if plan.regrade_only => return Err(theirs(&other.run_id)),
        None if plan.regrade_only => {
            return Err(format!(
                "--regrade: {} holds no run (no {})",
                plan.out.display(),
                super::files::RUN_FILE
            ));
        }
        other => {
            if let Some(theirs) = other {
                restarted(&plan.out, &theirs.run_id);
            }
            // Lines without their run (or another owner's) are no run's to continue.
            items.clear();
            out.restart()?;
            fresh()
        }
    };
    let records = match Records::claim(app, owner, &run).await {
        Some(records) => records,
        None if plan.regrade_only => return Err(theirs(&run.run_id)),
        None => {
            restarted(&plan.out, &run.run_id);
            items.clear();
            out.restart()?;
            run = fresh();
            Records::claim(app, owner, &run).await.ok_or_else(|| {
                format!(
                    "the records hold the new run id {} as another owner's",
                    run.run_id
                )
            })?
        }
    };
    out.write_run(&run)?;
    Ok((run, records, items))
}

fn restarted(out: &Path, theirs: &str) {
    progress::say(&format!(
        "eval: {} names run {theirs}, which is another owner's: starting a new run here \
         (this folder's earlier lines are dropped; that run is left as it was)",
        out.join(super::files::RUN_FILE).display()
    ));
}

fn info(run: &RunFile, plan: &Plan, stopped: Option<Stopped>) -> RunInfo {
    let reason = stopped.as_ref().map(|s| s.reason);
    RunInfo {
        run_id: run.run_id.clone(),
        created: run.created,
        data: run.data.clone(),
        grader: run.grader.clone(),
        questions: plan.items.len(),
        max_cost_usd: plan.max_cost_usd,
        stopped_by_budget: reason == Some(StopReason::Budget),
        interrupted: reason == Some(StopReason::Interrupted),
        stopped,
        group_by: plan.group_by.clone(),
    }
}

/// What the item is, as each of its results keeps it (for the report and the page).
pub(super) fn describe(result: &mut ItemResult, item: &Item) {
    result.question = Some(item.question_text());
    result.reference = item.answer.clone();
    result.metadata = item.metadata.clone();
}

impl Run {
    pub(super) fn spent(&self) -> f64 {
        *lock(&self.spent)
    }

    /// Whether `item` may run: it has begun, or nothing stops a new item.
    fn admit(&self, item: usize) -> bool {
        let mut started = lock(&self.started);
        if started.contains(&item) {
            return true;
        }
        if self.plan.interrupt.asked() {
            return false;
        }
        let mut stops = lock(&self.stops);
        if stops.reached.is_some() {
            return false;
        }
        if let Some(limit) = self.plan.max_cost_usd {
            let spent = self.spent();
            if spent >= limit {
                stops.reached = Some((
                    StopReason::Budget,
                    format!("--max-cost-usd ${limit} was reached (${spent:.4} spent)"),
                ));
                return false;
            }
        }
        started.insert(item);
        true
    }

    async fn job(&self, job: Job) {
        let item = job.item();
        let admitted = self.admit(item);
        if admitted {
            let results = match job {
                Job::Panel { item, arm } => {
                    vec![self.panel(item, &self.plan.arms.panels[arm]).await]
                }
                Job::Agent {
                    item,
                    agent,
                    alone,
                    consistency,
                } => {
                    let arms = &self.plan.arms.agents[agent];
                    self.agent(item, arms, alone, consistency).await
                }
                Job::Regrade { item, result } => vec![self.regrade(item, *result).await],
            };
            for result in results {
                self.keep(result).await;
            }
        }
        if self.left[item].fetch_sub(1, Ordering::AcqRel) == 1 {
            let why = if admitted {
                ""
            } else {
                lock(&self.stops).skipped += 1;
                match &lock(&self.stops).reached {
                    _ if self.plan.interrupt.asked() => "interrupted",
                    Some((StopReason::Failures, _)) => "too many failures",
                    _ => "budget reached",
                }
            };
            self.progress.item_done(self.spent(), admitted, why);
        }
    }

    pub(super) fn blank(&self, item: &Item, info: &ArmInfo) -> ItemResult {
        let mut result = ItemResult {
            fingerprint: self.fingerprints.answer(&item.id, &info.name),
            grading: self.fingerprints.grading(&item.id),
            item: item.id.clone(),
            arm: info.name.clone(),
            kind: info.kind,
            ..ItemResult::default()
        };
        describe(&mut result, item);
        result
    }

    async fn keep(&self, result: ItemResult) {
        let appended = lock(&self.out).append(&result);
        if let Err(e) = appended {
            self.progress.warn(&format!("cannot keep a result: {e}"));
        }
        self.records.item(&result).await;
        let reached = lock(&self.tally).count(result.failed.as_deref(), self.plan.failures);
        if result.failed.is_some() {
            self.progress.failed();
        }
        if let Some(why) = reached {
            let mut stops = lock(&self.stops);
            if stops.reached.is_none() {
                stops.reached = Some((StopReason::Failures, why));
            }
        }
        lock(&self.results).push(result);
    }

    /// One session, under the concurrency bound, its cost counted.
    pub(super) async fn session(
        &self,
        panel: &Arc<PanelConfig>,
        input: SessionInput,
        item: &Item,
        arm: &str,
    ) -> Outcome {
        let Ok(_slot) = self.sessions.acquire().await else {
            return Outcome {
                error: Some("the run was stopped".to_string()),
                ..Outcome::default()
            };
        };
        let label = Label {
            caller: self.plan.caller,
            run: &self.run_id,
            item: &item.id,
            arm,
        };
        let outcome = session::run(&self.app, Arc::clone(panel), input, &label).await;
        if let Some(usd) = outcome.cost_usd {
            *lock(&self.spent) += usd;
        }
        outcome
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A poisoned lock still holds good data here (counters and an append-only file).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
