//! What a job makes of its sessions: a panel's answer and what each of its agents said, an
//! agent alone, self-consistency's majority over its samples, and a stored answer graded
//! again (another grader, a changed reference, a judge that failed) without asking again.
//! Every answer keeps its whole text (each sample's, each member's), so any grader can
//! read it later.

use std::sync::Arc;

use massgen_core::coordination::SessionInput;

use super::arms::{AgentArms, PanelArm};
use super::data::Item;
use super::grade;
use super::run::{Run, describe};
use super::session::Outcome;
use crate::app::evals::{ArmInfo, ArmKind, ItemResult, Member};
use crate::config::PanelConfig;

impl Run {
    pub(super) async fn panel(&self, index: usize, arm: &PanelArm) -> ItemResult {
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
        spent(&mut result, &outcome);
        result.members = members(&arm.panel, &outcome);
        self.member_keys(&mut result);
        match outcome.text {
            Some(text) => self.grade(item, &arm.info.name, text, &mut result).await,
            None => result.failed = outcome.error,
        }
        result
    }

    /// One-call sessions at once, `samples` of them for self-consistency (the first is
    /// also the agent alone), one when only the agent alone is wanted.
    pub(super) async fn agent(
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
        let mut out = Vec::new();
        if let (Some(info), Some(first)) = (alone, samples.first()) {
            let mut result = self.blank(item, info);
            spent(&mut result, first);
            match &first.text {
                Some(text) => {
                    self.grade(item, &info.name, text.clone(), &mut result)
                        .await;
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
            // Samples run at once: the item took as long as the slowest (its wait for a
            // session slot apart, as for every arm).
            result.latency_s = samples
                .iter()
                .map(|s| s.elapsed.as_secs_f64())
                .fold(0.0, f64::max);
            result.session_ids = samples.iter().filter_map(|s| s.id.clone()).collect();
            result.sample_answers = samples.iter().map(|s| s.text.clone()).collect();
            let error = samples.iter().find_map(|s| s.error.clone());
            self.majority(item, info, error, &mut result).await;
            out.push(result);
        }
        out
    }

    /// `earlier`'s stored answer graded as the run grades now: the key of every sample
    /// and member taken again, self-consistency's majority counted again, the judge asked
    /// again. Its sessions, cost and latency stay the answer's.
    pub(super) async fn regrade(&self, index: usize, earlier: ItemResult) -> ItemResult {
        let item = &self.plan.items[index];
        let mut result = ItemResult {
            correct: false,
            failed: None,
            extracted: None,
            samples: Vec::new(),
            judge_cost_usd: None,
            judge_session_ids: Vec::new(),
            grading: self.fingerprints.grading(&item.id),
            ..earlier
        };
        describe(&mut result, item);
        self.member_keys(&mut result);
        let info = ArmInfo {
            name: result.arm.clone(),
            kind: result.kind,
            ..ArmInfo::default()
        };
        match result.kind {
            ArmKind::SelfConsistency => {
                result.answer = None;
                self.majority(item, &info, None, &mut result).await;
            }
            ArmKind::Panel | ArmKind::Agent => match result.answer.take() {
                Some(text) => self.grade(item, &info.name, text, &mut result).await,
                None => result.failed = Some("no stored answer to grade".to_string()),
            },
        }
        result
    }

    /// Each panel member's key, as the run's grader reads its last answer.
    fn member_keys(&self, result: &mut ItemResult) {
        for member in &mut result.members {
            member.key = member
                .answer
                .as_deref()
                .and_then(|a| self.plan.grader.key(a));
        }
    }

    /// Self-consistency: each sample's key, the key most samples give (ties: the
    /// earliest sample's) and the first sample that gave it, graded. Without any key the
    /// item failed (`error`: the first sample's failure, when one failed).
    async fn majority(
        &self,
        item: &Item,
        info: &ArmInfo,
        error: Option<String>,
        result: &mut ItemResult,
    ) {
        result.samples = result
            .sample_answers
            .iter()
            .map(|text| text.as_deref().and_then(|t| self.plan.grader.key(t)))
            .collect();
        let keys: Vec<Option<&str>> = result.samples.iter().map(|k| k.as_deref()).collect();
        let chosen = super::stats::majority(&keys).map(str::to_string);
        let text = chosen.as_deref().and_then(|chosen| {
            result
                .samples
                .iter()
                .zip(&result.sample_answers)
                .find(|(key, _)| key.as_deref() == Some(chosen))
                .and_then(|(_, text)| text.clone())
        });
        match text {
            Some(text) => self.grade(item, &info.name, text, result).await,
            None => {
                result.failed =
                    Some(error.unwrap_or_else(|| {
                        "no sample gave an answer the grader could read".into()
                    }));
            }
        }
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

/// What one session cost, and took, into `result`.
fn spent(result: &mut ItemResult, outcome: &Outcome) {
    result.cost_usd = outcome.cost_usd;
    result.input_tokens = outcome.input_tokens;
    result.output_tokens = outcome.output_tokens;
    result.latency_s = outcome.elapsed.as_secs_f64();
    result.session_ids.extend(outcome.id.clone());
}

/// Every agent of `panel`, in its order, with what it said last in the session (its key
/// is taken when the answer is graded).
fn members(panel: &Arc<PanelConfig>, outcome: &Outcome) -> Vec<Member> {
    panel
        .agents
        .iter()
        .map(|agent| {
            let said = outcome.said.iter().find(|s| s.agent == agent.id);
            Member {
                agent: agent.id.clone(),
                model: super::arms::model_of(agent),
                key: None,
                vote: said.and_then(|s| s.vote.clone()),
                answer: said.and_then(|s| s.answer.clone()),
            }
        })
        .collect()
}
