//! Runs every arm on every item: at most `concurrency` sessions at once, no new item
//! once `max_cost_usd` is spent, each graded item and arm appended to `items.jsonl` (and
//! the records) as it finishes, then the reports.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use massgen_core::coordination::SessionInput;
use tokio::sync::Semaphore;

use super::arms::{AgentArms, Arms, PanelArm};
use super::data::Item;
use super::files::{OutDir, Previous, RunFile};
use super::grade::{self, Grader};
use super::progress::Progress;
use super::records::Records;
use super::report::{self, Report, RunInfo};
use super::resume::{self, Fingerprints, Job};
use super::session::{self, Label, Outcome};
use crate::app::evals::{ArmInfo, ItemResult};
use crate::app::{App, Caller};
use crate::config::PanelConfig;

/// Everything a run is made of, checked.
pub struct Plan {
    /// The data file as given (the report names it).
    pub data: String,
    pub items: Vec<Item>,
    pub arms: Arms,
    pub grader: Grader,
    /// The judge's panel (`judge` grader), made to answer in one call when it has one
    /// agent.
    pub judge: Option<Arc<PanelConfig>>,
    /// Sent to every agent as a system message (how to end the answer).
    pub instruction: Option<String>,
    /// Sessions in flight at most.
    pub concurrency: usize,
    pub max_cost_usd: Option<f64>,
    pub out: PathBuf,
    /// Whose run it is: the records file it and its sessions under this caller's owner id.
    pub caller: Caller,
    /// Each item's session input (built and checked before the run: see
    /// [`session::input`]).
    pub inputs: Vec<SessionInput>,
    /// The grader's settings and the instruction, as the fingerprints take them.
    pub settings: String,
    /// Set by the command's signal handler (Ctrl-C, SIGTERM).
    pub interrupt: Arc<Interrupt>,
}

/// A stop asked for from outside (the command's signal handler): no new item starts.
#[derive(Debug, Default)]
pub struct Interrupt {
    asked: AtomicBool,
    /// Every job has ended (the run is writing its report, the records, shutting down).
    jobs_done: AtomicBool,
    /// An item was not started because of it.
    skipped: AtomicBool,
}

impl Interrupt {
    /// Asks the run to stop; whether there is nothing left to stop gracefully (the caller
    /// then exits at once).
    pub fn ask(&self) -> bool {
        self.asked.store(true, Ordering::Relaxed);
        self.jobs_done.load(Ordering::Relaxed)
    }
}

/// What the run left: its report and where the files are.
pub struct Finished {
    pub report: Report,
    pub markdown: String,
}

struct Run {
    app: Arc<App>,
    plan: Plan,
    run_id: String,
    fingerprints: Fingerprints,
    sessions: Semaphore,
    out: Mutex<OutDir>,
    records: Records,
    /// USD the run has spent (arms and judge), earlier invocations' results included.
    spent: Mutex<f64>,
    started: Mutex<HashSet<usize>>,
    /// The budget was reached: no new item starts.
    stopped: AtomicBool,

    /// Jobs left per item, for the progress line.
    left: Vec<AtomicUsize>,
    progress: Progress,
    /// Results of this invocation.
    results: Mutex<Vec<ItemResult>>,
}

pub async fn run(app: Arc<App>, plan: Plan) -> Result<Finished, String> {
    let (mut out, previous) = OutDir::open(&plan.out)?;
    let arm_infos = plan.arms.infos();
    let (run_file, records, previous_items) = take_run(&app, &plan, &mut out, previous).await?;
    let fingerprints = Fingerprints::new(&plan.items, &plan.arms, &plan.settings);
    // The budget counts what earlier invocations of the run spent, on anything.
    let spent_before = report::known_spend(&previous_items);
    // Earlier results graded from what the run holds now; the others, and the failed
    // ones, run again.
    let earlier: Vec<ItemResult> = previous_items
        .into_iter()
        .filter(|r| fingerprints.current(r) && r.failed.is_none())
        .collect();
    let done: HashSet<(&str, &str)> = earlier
        .iter()
        .map(|r| (r.item.as_str(), r.arm.as_str()))
        .collect();
    let jobs = resume::jobs(&plan.items, &plan.arms, &|item, arm| {
        done.contains(&(item.id.as_str(), arm.name.as_str()))
    });
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
        stopped: AtomicBool::new(false),
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
    let info = info(
        &run_file,
        &run.plan,
        run.stopped.load(Ordering::Relaxed),
        run.plan.interrupt.skipped.load(Ordering::Relaxed),
    );
    let report = report::build(info, &arm_infos, &all);
    let markdown = report::markdown(&report);
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    {
        let out = lock(&run.out);
        out.write("report.json", &json)?;
        out.write("report.md", &markdown)?;
        out.write("chart.svg", &super::chart::accuracy_cost_svg(&report))?;
    }
    run.records.finish(&run_file, &report).await;
    Ok(Finished { report, markdown })
}

/// The run this invocation continues, with its records and the lines it graded before,
/// or a new run. A folder's run is continued by its owner only: a `run.json` naming
/// another owner (a folder copied, or run under another key), or an id the records hold
/// as another owner's (a `run.json` edited), starts a new run from scratch, its id new and
/// the folder's earlier lines dropped, and the other run is left as it was.
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
        arms: plan.arms.infos(),
    };
    let mut items = previous.items;
    let mut run = match previous.run {
        Some(run) if run.owner.as_deref().is_none_or(|o| o == owner) => RunFile {
            owner: Some(owner.to_string()),
            arms: plan.arms.infos(),
            data: plan.data.clone(),
            grader: plan.grader.name().to_string(),
            ..run
        },
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
    eprintln!(
        "eval: {} names run {theirs}, which is another owner's: starting a new run here \
         (this folder's earlier lines are dropped; that run is left as it was)",
        out.join(super::files::RUN_FILE).display()
    );
}

fn info(run: &RunFile, plan: &Plan, stopped_by_budget: bool, interrupted: bool) -> RunInfo {
    RunInfo {
        run_id: run.run_id.clone(),
        created: run.created,
        data: run.data.clone(),
        grader: run.grader.clone(),
        questions: plan.items.len(),
        max_cost_usd: plan.max_cost_usd,
        stopped_by_budget,
        interrupted,
        group_by: None,
    }
}

impl Run {
    fn spent(&self) -> f64 {
        *lock(&self.spent)
    }

    /// Whether `item` may run: it has begun, or the budget allows a new item.
    fn admit(&self, item: usize) -> bool {
        let mut started = lock(&self.started);
        if started.contains(&item) {
            return true;
        }
        if self.plan.interrupt.asked.load(Ordering::Relaxed) {
            self.plan.interrupt.skipped.store(true, Ordering::Relaxed);
            return false;
        }
        if let Some(limit) = self.plan.max_cost_usd
            && self.spent() >= limit
        {
            self.stopped.store(true, Ordering::Relaxed);
            return false;
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
            };
            for result in results {
                self.keep(result).await;
            }
        }
        if self.left[item].fetch_sub(1, Ordering::AcqRel) == 1 {
            let why = if self.plan.interrupt.asked.load(Ordering::Relaxed) {
                "interrupted"
            } else {
                "budget reached"
            };
            self.progress.item_done(self.spent(), admitted, why);
        }
    }

    fn blank(&self, item: &Item, info: &ArmInfo) -> ItemResult {
        blank(&self.fingerprints, item, info)
    }

    async fn keep(&self, result: ItemResult) {
        let appended = lock(&self.out).append(&result);
        if let Err(e) = appended {
            self.progress.warn(&format!("cannot keep a result: {e}"));
        }
        self.records.item(&result).await;
        lock(&self.results).push(result);
    }

    /// One session, under the concurrency bound, its cost counted.
    async fn session(
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

    async fn panel(&self, index: usize, arm: &PanelArm) -> ItemResult {
        let item = &self.plan.items[index];
        let outcome = self
            .session(
                &arm.panel,
                self.plan.inputs[index].clone(),
                item,
                &arm.info.name,
            )
            .await;
        let mut result = self.blank(item, &arm.info);
        result.cost_usd = outcome.cost_usd;
        result.input_tokens = outcome.input_tokens;
        result.output_tokens = outcome.output_tokens;
        result.latency_s = outcome.elapsed.as_secs_f64();
        result.session_ids.extend(outcome.id.clone());
        match outcome.text {
            Some(text) => self.grade(item, &arm.info.name, text, &mut result).await,
            None => result.failed = outcome.error,
        }
        result
    }

    /// One-call sessions at once, `samples` of them for self-consistency (the first is
    /// also the agent alone), one when only the agent alone is wanted.
    async fn agent(
        &self,
        index: usize,
        arms: &AgentArms,
        alone: bool,
        consistency: bool,
    ) -> Vec<ItemResult> {
        let item = &self.plan.items[index];
        let (alone, consistency) = (
            arms.alone.as_ref().filter(|_| alone),
            arms.consistency.as_ref().filter(|_| consistency),
        );
        let name = consistency.or(alone).map_or("agent", |a| a.name.as_str());
        let count = if consistency.is_some() {
            arms.samples.max(1)
        } else {
            1
        };
        let samples: Vec<Outcome> = futures::future::join_all(
            (0..count)
                .map(|_| self.session(&arms.panel, self.plan.inputs[index].clone(), item, name)),
        )
        .await;
        // Samples run at once: the item took as long as the slowest (its wait for a
        // session slot apart, as for every arm).
        let wall = samples
            .iter()
            .map(|s| s.elapsed.as_secs_f64())
            .fold(0.0, f64::max);
        let mut out = Vec::new();
        if let (Some(info), Some(first)) = (alone, samples.first()) {
            let mut result = self.blank(item, info);
            result.cost_usd = first.cost_usd;
            result.input_tokens = first.input_tokens;
            result.output_tokens = first.output_tokens;
            result.latency_s = first.elapsed.as_secs_f64();
            result.session_ids.extend(first.id.clone());
            match &first.text {
                Some(text) => {
                    self.grade(item, &info.name, text.clone(), &mut result)
                        .await
                }
                None => result.failed = first.error.clone(),
            }
            out.push(result);
        }
        if let Some(info) = consistency {
            let mut result = self.blank(item, info);
            result.cost_usd = samples.iter().map(|s| s.cost_usd).sum();
            result.input_tokens = samples.iter().map(|s| s.input_tokens).sum();
            result.output_tokens = samples.iter().map(|s| s.output_tokens).sum();
            result.latency_s = wall;
            result.session_ids = samples.iter().filter_map(|s| s.id.clone()).collect();
            result.samples = samples
                .iter()
                .map(|s| s.text.as_deref().and_then(|t| self.plan.grader.key(t)))
                .collect();
            let keys: Vec<Option<&str>> = result.samples.iter().map(|k| k.as_deref()).collect();
            let chosen = super::stats::majority(&keys).map(str::to_string);
            let text = chosen.as_deref().and_then(|chosen| {
                samples.iter().find_map(|s| {
                    let text = s.text.as_deref()?;
                    (self.plan.grader.key(text).as_deref() == Some(chosen))
                        .then(|| text.to_string())
                })
            });
            match text {
                Some(text) => self.grade(item, &info.name, text, &mut result).await,
                None => {
                    result.failed = Some(
                        samples
                            .iter()
                            .find_map(|s| s.error.clone())
                            .unwrap_or_else(|| {
                                "no sample gave an answer the grader could read".into()
                            }),
                    );
                }
            }
            out.push(result);
        }
        out
    }

    /// Grades `text` into `result`: at once, or through the judge's session.
    async fn grade(&self, item: &Item, arm: &str, text: String, result: &mut ItemResult) {
        if let Some(grade) = self.plan.grader.grade(item, &text) {
            result.correct = grade.correct;
            result.extracted = grade.key;
            result.answer = Some(text);
            return;
        }
        result.extracted = self.plan.grader.key(&text);
        let Some(judge) = &self.plan.judge else {
            result.failed = Some("the judge grader has no judge".to_string());
            return;
        };
        let question = grade::judge_prompt(item, &text);
        result.answer = Some(text);
        let input = SessionInput {
            question,
            ..SessionInput::default()
        };
        let outcome = self
            .session(judge, input, item, &format!("judge:{arm}"))
            .await;
        result.judge_cost_usd = outcome.cost_usd;
        result.judge_session_ids.extend(outcome.id);
        match outcome.text.as_deref().map(grade::verdict) {
            Some(Some(correct)) => result.correct = correct,
            Some(None) => {
                result.failed = Some("judge: its reply has no VERDICT line".to_string());
            }
            None => {
                result.failed = Some(format!(
                    "judge: {}",
                    outcome.error.unwrap_or_else(|| "no reply".into())
                ));
            }
        }
    }
}

fn blank(fingerprints: &Fingerprints, item: &Item, info: &ArmInfo) -> ItemResult {
    ItemResult {
        fingerprint: fingerprints.of(&item.id, &info.name),
        item: item.id.clone(),
        arm: info.name.clone(),
        kind: info.kind,
        correct: false,
        failed: None,
        answer: None,
        extracted: None,
        samples: Vec::new(),
        cost_usd: None,
        judge_cost_usd: None,
        input_tokens: 0,
        output_tokens: 0,
        latency_s: 0.0,
        session_ids: Vec::new(),
        judge_session_ids: Vec::new(),
        question: String::new(),
        reference: None,
        metadata: None,
        members: Vec::new(),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A poisoned lock still holds good data here (counters and an append-only file).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
