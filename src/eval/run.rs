//! Runs every arm on every item: at most `concurrency` sessions at once, no new item
//! once `max_cost_usd` is spent, each graded item and arm appended to `items.jsonl` (and
//! the records) as it finishes, then the reports.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use massgen_core::coordination::SessionInput;
use tokio::sync::Semaphore;

use super::arms::{AgentArms, Arms, PanelArm};
use super::data::Item;
use super::files::{OutDir, RunFile};
use super::grade::{self, Grader};
use super::item::{ArmInfo, ItemResult};
use super::progress::Progress;
use super::records::Records;
use super::report::{self, Report, RunInfo};
use super::session::{self, Label, Outcome};
use crate::app::Caller;
use crate::config::PanelConfig;
use crate::server::AppState;

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
}

/// What the run left: its report and where the files are.
pub struct Finished {
    pub report: Report,
    pub markdown: String,
}

/// One unit of work: an item on a panel arm, or an item on an agent's baselines.
#[derive(Clone, Copy)]
enum Job {
    Panel { item: usize, arm: usize },
    Agent { item: usize, agent: usize },
}

impl Job {
    fn item(self) -> usize {
        match self {
            Self::Panel { item, .. } | Self::Agent { item, .. } => item,
        }
    }
}

struct Run {
    state: AppState,
    plan: Plan,
    run_id: String,
    inputs: Vec<SessionInput>,
    sessions: Semaphore,
    out: Mutex<OutDir>,
    records: Records,
    /// USD spent by this invocation (arms and judge).
    spent: Mutex<f64>,
    started: Mutex<HashSet<usize>>,
    stopped: AtomicBool,
    /// Jobs left per item, for the progress line.
    left: Vec<AtomicUsize>,
    progress: Progress,
    /// Results of this invocation.
    results: Mutex<Vec<ItemResult>>,
}

pub async fn run(state: AppState, plan: Plan) -> Result<Finished, String> {
    let (out, previous) = OutDir::open(&plan.out)?;
    let arm_infos = plan.arms.infos();
    let created = now_secs();
    let run_file = match &previous.run {
        Some(run) if run.grader != plan.grader.name() => {
            return Err(format!(
                "--out {}: it holds run {} graded by {}; grade with the same grader or use another folder",
                plan.out.display(),
                run.run_id,
                run.grader
            ));
        }
        Some(run) => RunFile {
            arms: arm_infos.clone(),
            data: plan.data.clone(),
            ..run.clone()
        },
        None => RunFile {
            run_id: format!("eval_{}", uuid::Uuid::now_v7().simple()),
            created,
            data: plan.data.clone(),
            grader: plan.grader.name().to_string(),
            arms: arm_infos.clone(),
        },
    };
    out.write_run(&run_file)?;
    let schema = match &plan.grader {
        Grader::JsonSchema { schema, .. } => Some(schema.clone()),
        _ => None,
    };
    let inputs = plan
        .items
        .iter()
        .map(|item| session::input(item, plan.instruction.as_deref(), schema.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let done = previous.done();
    let jobs = jobs(&plan, &done);
    let mut left: Vec<usize> = vec![0; plan.items.len()];
    for job in &jobs {
        left[job.item()] += 1;
    }
    let pending_items = left.iter().filter(|n| **n > 0).count();
    let records = Records::new(&state, plan.caller.owner(), &run_file, &previous.items).await;
    let run = Arc::new(Run {
        inputs,
        sessions: Semaphore::new(plan.concurrency.max(1)),
        out: Mutex::new(out),
        records,
        spent: Mutex::new(0.0),
        started: Mutex::default(),
        stopped: AtomicBool::new(false),
        left: left.into_iter().map(AtomicUsize::new).collect(),
        progress: Progress::new(plan.items.len(), plan.items.len() - pending_items),
        results: Mutex::default(),
        run_id: run_file.run_id.clone(),
        state,
        plan,
    });
    let concurrency = run.plan.concurrency.max(1);
    futures::stream::iter(jobs)
        .for_each_concurrent(concurrency, |job| {
            let run = Arc::clone(&run);
            async move { run.job(job).await }
        })
        .await;
    run.progress.finish(run.spent());
    // Every session's record is written before the run says it is done.
    let tasks = run.state.sessions.tasks();
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(10), tasks.wait()).await;
    run.state
        .sessions
        .records()
        .close(Duration::from_secs(10))
        .await;
    let mut all: Vec<ItemResult> = previous.items;
    all.extend(lock(&run.results).drain(..));
    let info = RunInfo {
        run_id: run_file.run_id.clone(),
        created: run_file.created,
        data: run_file.data.clone(),
        grader: run_file.grader.clone(),
        questions: run.plan.items.len(),
        max_cost_usd: run.plan.max_cost_usd,
        stopped_by_budget: run.stopped.load(Ordering::Relaxed),
    };
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

/// Item-major, so a budget stop leaves whole items behind it; finished pairs are skipped.
fn jobs(plan: &Plan, done: &HashSet<(String, String)>) -> Vec<Job> {
    let finished = |item: &Item, arm: &ArmInfo| done.contains(&(item.id.clone(), arm.name.clone()));
    let mut jobs = Vec::new();
    for (index, item) in plan.items.iter().enumerate() {
        for (arm, panel) in plan.arms.panels.iter().enumerate() {
            if !finished(item, &panel.info) {
                jobs.push(Job::Panel { item: index, arm });
            }
        }
        for (agent, arms) in plan.arms.agents.iter().enumerate() {
            let missing = arms
                .alone
                .iter()
                .chain(arms.consistency.iter())
                .any(|info| !finished(item, info));
            if missing {
                jobs.push(Job::Agent { item: index, agent });
            }
        }
    }
    jobs
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
        if self.admit(item) {
            let results = match job {
                Job::Panel { item, arm } => {
                    vec![self.panel(item, &self.plan.arms.panels[arm]).await]
                }
                Job::Agent { item, agent } => self.agent(item, &self.plan.arms.agents[agent]).await,
            };
            for result in results {
                self.keep(result).await;
            }
        }
        if self.left[item].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.progress
                .item_done(self.spent(), self.stopped.load(Ordering::Relaxed));
        }
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
        let outcome = session::run(&self.state, Arc::clone(panel), input, &label).await;
        if let Some(usd) = outcome.cost_usd {
            *lock(&self.spent) += usd;
        }
        outcome
    }

    async fn panel(&self, index: usize, arm: &PanelArm) -> ItemResult {
        let item = &self.plan.items[index];
        let outcome = self
            .session(&arm.panel, self.inputs[index].clone(), item, &arm.info.name)
            .await;
        let mut result = blank(item, &arm.info);
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

    /// `samples` one-call sessions at once: the first is the agent alone, all of them its
    /// self-consistency.
    async fn agent(&self, index: usize, arms: &AgentArms) -> Vec<ItemResult> {
        let item = &self.plan.items[index];
        let name = arms
            .consistency
            .as_ref()
            .or(arms.alone.as_ref())
            .map_or("agent", |a| a.name.as_str());
        let started = Instant::now();
        let samples: Vec<Outcome> = futures::future::join_all(
            (0..arms.samples.max(1))
                .map(|_| self.session(&arms.panel, self.inputs[index].clone(), item, name)),
        )
        .await;
        let wall = started.elapsed().as_secs_f64();
        let mut out = Vec::new();
        if let (Some(info), Some(first)) = (&arms.alone, samples.first()) {
            let mut result = blank(item, info);
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
        if let Some(info) = &arms.consistency {
            let mut result = blank(item, info);
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

fn blank(item: &Item, info: &ArmInfo) -> ItemResult {
    ItemResult {
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
