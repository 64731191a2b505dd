//! The protocol's state of one session, apart from the loop that runs it: who takes part,
//! every answer, the counted votes and the answer-set version each turn saw, who must take a
//! new turn after an answer, the tally and the winner (docs/protocol.md, "The session loop"
//! and "Winner and final presentation"). Plain data and synchronous rules, so every rule is
//! unit-tested here without a runtime; `engine.rs` runs the turns this state asks for.

use super::events::{
    AgentError, AgentErrorKind, AgentRef, AgentSummary, Answer, AnswerContent, SessionError,
    SessionErrorKind, TallyEntry, VoteRecord,
};
use super::options::Quorum;
use super::prompt::ShownAnswer;
use crate::provider::{Price, ProviderError, Usage};

mod limits;

/// One participant as the state knows it: its real id, and what the summary reports.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Member {
    pub id: String,
    pub provider: String,
    pub model: String,
    /// `None`: the model's price is unknown, so is its cost.
    pub price: Option<Price>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// Needs a turn: before its first one, after its answer, or after its vote was cleared
    /// or discarded. [`SessionState::due`] lists these.
    Idle,
    /// Has answered and waits: for the other agents' first answers (deferred voting), or,
    /// alone, for the end.
    Waiting,
    /// In a turn that started when the answer set had this version.
    Running {
        seen_version: u64,
    },
    /// Its vote counts; it waits for a new answer or the end.
    Voted,
    Failed,
}

#[derive(Debug)]
struct AgentState {
    who: AgentRef,
    provider: String,
    model: String,
    price: Option<Price>,
    /// USD spent so far (0 while unpriced).
    cost: f64,
    status: Status,
    turns: u32,
    calls: u32,
    restarts: u32,
    answers: u32,
    /// Index of the latest answer in `SessionState::answers`.
    latest: Option<usize>,
    vote: Option<VoteRecord>,
    /// Has ended a turn with an answer or a counted vote (deferred voting waits for this).
    settled: bool,
    usage: Usage,
    error: Option<AgentError>,
}

/// What a vote came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum VoteOutcome {
    /// Cast against the current answer set: it counts.
    Counted(VoteRecord),
    /// Cast in a turn that started before the newest answer: discarded, and the agent
    /// must take a fresh turn.
    Stale { vote: VoteRecord, why: String },
}

#[derive(Debug)]
pub(super) struct SessionState {
    agents: Vec<AgentState>,
    /// Every answer of the session, in order.
    answers: Vec<Answer>,
    /// Bumped on every new answer: a vote counts only if its turn saw the current version.
    version: u64,
    usage: Usage,
    /// USD spent by the agents whose price is known.
    spent: f64,
    /// An agent without a price reported usage: the session's cost is unknown.
    unpriced_usage: bool,
    /// Alone (one agent): answer once, no votes.
    single: bool,
    min_live: usize,
    answer_cap: Option<u32>,
    global_cap: Option<u32>,
    fairness_cap: Option<u32>,
    answer_once: bool,
    /// `defer_voting_until_all_answered`.
    defer: bool,
    quorum: Quorum,
    budget: Option<f64>,
}

/// The options the state's rules depend on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules {
    pub min_live: usize,
    /// `max_new_answers_per_agent`.
    pub answer_cap: Option<u32>,
    /// `max_new_answers_global`.
    pub global_cap: Option<u32>,
    /// `fairness_lead_cap_answers` (when fairness is on).
    pub fairness_cap: Option<u32>,
    /// The deliberation ends once every live agent has answered (`skip_voting`): after its
    /// answer an agent waits for the end.
    pub answer_once: bool,
    /// `defer_voting_until_all_answered`.
    pub defer: bool,
    pub quorum: Quorum,
    /// `max_cost_usd`.
    pub budget: Option<f64>,
}

impl SessionState {
    /// Members in config order get the labels `agent1`, `agent2`, …
    pub fn new(members: Vec<Member>, rules: Rules) -> Self {
        Self {
            single: members.len() == 1,
            agents: members
                .into_iter()
                .enumerate()
                .map(|(i, m)| AgentState {
                    who: AgentRef {
                        agent_id: m.id,
                        label: format!("agent{}", i + 1),
                    },
                    provider: m.provider,
                    model: m.model,
                    price: m.price,
                    cost: 0.0,
                    status: Status::Idle,
                    turns: 0,
                    calls: 0,
                    restarts: 0,
                    answers: 0,
                    latest: None,
                    vote: None,
                    settled: false,
                    usage: Usage::default(),
                    error: None,
                })
                .collect(),
            answers: Vec::new(),
            version: 0,
            usage: Usage::default(),
            spent: 0.0,
            unpriced_usage: false,
            min_live: rules.min_live,
            answer_cap: rules.answer_cap,
            global_cap: rules.global_cap,
            fairness_cap: rules.fairness_cap,
            answer_once: rules.answer_once,
            defer: rules.defer,
            quorum: rules.quorum,
            budget: rules.budget,
        }
    }

    pub fn len(&self) -> usize {
        self.agents.len()
    }

    pub fn who(&self, i: usize) -> &AgentRef {
        &self.agents[i].who
    }

    pub fn everyone(&self) -> Vec<AgentRef> {
        self.agents.iter().map(|a| a.who.clone()).collect()
    }

    #[cfg(test)]
    pub fn status(&self, i: usize) -> Status {
        self.agents[i].status
    }

    pub fn is_single(&self) -> bool {
        self.single
    }

    pub fn min_live(&self) -> usize {
        self.min_live
    }

    pub fn answers(&self) -> &[Answer] {
        &self.answers
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Starts a turn of agent `i` against the current answer set; returns its number.
    pub fn begin_turn(&mut self, i: usize) -> u32 {
        let agent = &mut self.agents[i];
        agent.turns += 1;
        agent.status = Status::Running {
            seen_version: self.version,
        };
        agent.turns
    }

    /// Stores agent `i`'s new answer, bumps the version and clears every vote: agents that
    /// had voted need a fresh turn. The author needs one too, unless it is alone or deferred
    /// voting holds it until every live agent has a first answer. Agents still in a turn saw
    /// an older set (see [`Self::stale`]).
    pub fn record_answer(&mut self, i: usize, content: AnswerContent) -> Answer {
        let agent = &mut self.agents[i];
        agent.answers += 1;
        agent.settled = true;
        let answer = Answer {
            agent: agent.who.clone(),
            answer_label: format!("{}.{}", agent.who.label, agent.answers),
            content,
        };
        agent.latest = Some(self.answers.len());
        self.answers.push(answer.clone());
        self.version += 1;
        for agent in &mut self.agents {
            agent.vote = None;
            if agent.status == Status::Voted {
                agent.status = Status::Idle;
            }
        }
        self.agents[i].status = if self.single || self.answer_once || self.deferring() {
            Status::Waiting
        } else {
            Status::Idle
        };
        self.release();
        answer
    }

    /// Deferred voting is holding answered agents back: some live agent has not ended a
    /// turn with an answer yet (nor with a counted vote: an agent whose answer or proposal
    /// repeats another's has voted for it). Once the panel's answers are used up nobody
    /// waits.
    fn deferring(&self) -> bool {
        self.defer && !self.global_cap_reached() && self.live().any(|a| !a.settled)
    }

    /// Once nothing defers any more, every agent waiting for the first answers needs a turn.
    fn release(&mut self) {
        if self.single || self.answer_once || self.deferring() {
            return;
        }
        for agent in &mut self.agents {
            if agent.status == Status::Waiting {
                agent.status = Status::Idle;
            }
        }
    }

    /// Agents in a turn that no longer shows the current answer set and that could end it
    /// with a vote, which would be discarded: they should start over. A turn that started
    /// with no answer to show was offered no vote and can only answer, so it goes on (first
    /// answers are written independently). The loop also spares turns that have begun an
    /// answer.
    pub fn stale(&self) -> Vec<usize> {
        (0..self.agents.len())
            .filter(|&i| self.is_stale(i))
            .collect()
    }

    pub fn is_stale(&self, i: usize) -> bool {
        matches!(
            self.agents[i].status,
            Status::Running { seen_version } if seen_version != 0 && seen_version != self.version
        )
    }

    /// Agents in a turn now.
    pub fn running(&self) -> Vec<usize> {
        (0..self.agents.len())
            .filter(|&i| matches!(self.agents[i].status, Status::Running { .. }))
            .collect()
    }

    /// Agent `i`'s turn was cancelled before it ended; returns that turn's number. The
    /// agent needs a new turn (it is due).
    pub fn abandon_turn(&mut self, i: usize) -> u32 {
        let agent = &mut self.agents[i];
        if matches!(agent.status, Status::Running { .. }) {
            agent.status = Status::Idle;
        }
        agent.turns
    }

    /// A new attempt after the winner rejected the winning answer
    /// (`max_orchestration_restarts`): answers, votes and the version start over, every
    /// live agent needs a turn; what was spent (usage, cost, calls, turns) stays, and failed
    /// agents stay failed. No turn may be running.
    pub fn new_attempt(&mut self) {
        self.answers.clear();
        self.version = 0;
        for agent in &mut self.agents {
            agent.answers = 0;
            agent.latest = None;
            agent.vote = None;
            agent.settled = false;
            if agent.status != Status::Failed {
                agent.status = Status::Idle;
            }
        }
    }

    /// Agent `i` made `n` more upstream calls.
    pub fn add_calls(&mut self, i: usize, n: u32) {
        self.agents[i].calls = self.agents[i].calls.saturating_add(n);
    }

    /// Agent `i`'s turn was cancelled to restart it (see [`Self::abandon_turn`]).
    pub fn count_restart(&mut self, i: usize) {
        self.agents[i].restarts += 1;
    }

    /// The label of the newest answer (`agent3.1`), once there is one.
    pub fn newest_answer_label(&self) -> Option<&str> {
        self.answers.last().map(|a| a.answer_label.as_str())
    }

    /// Live agents that need a turn now, in config order. Agents held by the fairness cap
    /// wait, unless nobody else is in a turn or due (then they take turns that may only
    /// vote, so the session cannot stall).
    pub fn due(&self) -> Vec<usize> {
        let idle: Vec<usize> = (0..self.agents.len())
            .filter(|&i| self.agents[i].status == Status::Idle)
            .collect();
        let free: Vec<usize> = idle.iter().copied().filter(|&i| !self.held(i)).collect();
        if free.is_empty() && self.running().is_empty() {
            return idle;
        }
        free
    }

    /// Agent `i`'s vote for `target`, counted only if its turn saw the current answer set.
    pub fn record_vote(&mut self, i: usize, target: String, reason: String) -> VoteOutcome {
        let target_agent_id = self
            .agents
            .iter()
            .find(|a| a.who.label == target)
            .map(|a| a.who.agent_id.clone())
            .unwrap_or_default();
        let vote = VoteRecord {
            voter: self.agents[i].who.clone(),
            target_label: target,
            target_agent_id,
            reason,
        };
        let agent = &mut self.agents[i];
        if agent.status
            == (Status::Running {
                seen_version: self.version,
            })
        {
            agent.vote = Some(vote.clone());
            agent.status = Status::Voted;
            agent.settled = true;
            self.release();
            return VoteOutcome::Counted(vote);
        }
        agent.status = Status::Idle;
        let newest = self.newest_answer_label().unwrap_or_default();
        VoteOutcome::Stale {
            why: format!("cast before the newest answer ({newest}) was seen"),
            vote,
        }
    }

    /// Marks agent `i` failed (no more turns, its vote no longer counts).
    pub fn fail(
        &mut self,
        i: usize,
        kind: AgentErrorKind,
        message: String,
        upstream: Option<&ProviderError>,
    ) -> AgentError {
        let agent = &mut self.agents[i];
        let error = AgentError {
            agent: agent.who.clone(),
            kind,
            message,
            provider: upstream.map(|e| e.provider.clone()),
            status: upstream.and_then(|e| e.status),
            upstream_kind: upstream.map(|e| e.kind),
            retry_after_ms: upstream
                .and_then(|e| e.retry_after)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            retry_can_help: upstream.map(ProviderError::retry_can_help),
        };
        agent.status = Status::Failed;
        agent.vote = None;
        agent.error = Some(error.clone());
        // The others may have been waiting for this agent's first answer.
        self.release();
        error
    }

    /// Adds one call's usage to agent `i` and the session; returns what the call cost
    /// (`None` when the agent's price is unknown).
    pub fn add_usage(&mut self, i: usize, usage: &Usage) -> Option<f64> {
        let agent = &mut self.agents[i];
        agent.usage.add(usage);
        self.usage.add(usage);
        let cost = agent.price.map(|p| p.cost(usage));
        match cost {
            Some(c) => {
                agent.cost += c;
                self.spent += c;
            }
            None => self.unpriced_usage |= usage.total_tokens > 0 || usage.input_tokens > 0,
        }
        cost
    }

    /// USD spent by the agents whose price is known (what a budget counts).
    pub fn spent(&self) -> f64 {
        self.spent
    }

    /// The spending limit, if any.
    pub fn budget(&self) -> Option<f64> {
        self.budget
    }

    /// The limit, once the spend has reached it.
    pub fn budget_spent(&self) -> Option<f64> {
        self.budget.filter(|&limit| self.spent >= limit)
    }

    /// The session's cost in USD; `None` when an agent without a price used tokens.
    pub fn cost_usd(&self) -> Option<f64> {
        (!self.unpriced_usage).then(|| self.spent())
    }

    fn live(&self) -> impl Iterator<Item = &AgentState> {
        self.agents.iter().filter(|a| a.status != Status::Failed)
    }

    /// The session's failure once fewer than `min_live_agents` agents are left: upstream
    /// when any failure came from an upstream, else no usable agent.
    pub fn too_few_live(&self) -> Option<SessionError> {
        let live = self.live().count();
        if live >= self.min_live {
            return None;
        }
        let upstream = self
            .agents
            .iter()
            .filter_map(|a| a.error.as_ref())
            .any(|e| e.kind == AgentErrorKind::Upstream);
        let kind = if upstream {
            SessionErrorKind::UpstreamFailed
        } else {
            SessionErrorKind::NoUsableAgent
        };
        let head = if live == 0 {
            "every agent failed".to_string()
        } else {
            format!(
                "{live} live agent(s) left, fewer than min_live_agents ({})",
                self.min_live
            )
        };
        let details: Vec<String> = self
            .agents
            .iter()
            .filter_map(|a| a.error.as_ref())
            .map(|e| format!("{}: {}", e.agent.agent_id, e.message))
            .collect();
        Some(self.error(kind, format!("{head}: {}", details.join("; "))))
    }

    /// What the deliberation waits for when it ends once everybody answered
    /// (`skip_voting`): every live agent has an answer or holds a counted vote. An agent
    /// whose answer or proposal repeated another's has voted for it instead of answering:
    /// counting answers only, the session would wait for it until nobody could move.
    pub fn all_live_answered_or_voted(&self) -> bool {
        self.all_live_answered()
            || (self.live().any(|a| a.status == Status::Voted)
                && self
                    .live()
                    .all(|a| a.answers > 0 || a.status == Status::Voted))
    }

    /// Every live agent holds a counted vote.
    pub fn converged(&self) -> bool {
        let mut live = self.live().peekable();
        live.peek().is_some() && live.all(|a| a.status == Status::Voted)
    }

    /// One answer holds the quorum's votes while some live agent has not voted yet.
    pub fn quorum_reached(&self) -> bool {
        let Some(needed) = self.quorum.needed(self.live().count()) else {
            return false;
        };
        self.tally()
            .iter()
            .any(|t| usize::try_from(t.votes).unwrap_or(usize::MAX) >= needed)
    }

    /// Most counted votes; a tie goes to config order; no votes: the first agent with an
    /// answer.
    pub fn pick_winner(&self) -> Option<usize> {
        let mut best: Option<(usize, u32)> = None;
        for entry in &self.tally() {
            let Some(i) = self.agents.iter().position(|a| a.who.label == entry.label) else {
                continue;
            };
            if best.is_none_or(|(_, votes)| entry.votes > votes) {
                best = Some((i, entry.votes));
            }
        }
        best.map(|(i, _)| i)
    }

    /// One entry per agent with an answer, in config order.
    pub fn tally(&self) -> Vec<TallyEntry> {
        let votes = self.counted_votes();
        self.agents
            .iter()
            .filter(|a| a.latest.is_some())
            .map(|a| TallyEntry {
                label: a.who.label.clone(),
                agent_id: a.who.agent_id.clone(),
                votes: u32::try_from(
                    votes
                        .iter()
                        .filter(|v| v.target_label == a.who.label)
                        .count(),
                )
                .unwrap_or(u32::MAX),
            })
            .collect()
    }

    pub fn counted_votes(&self) -> Vec<VoteRecord> {
        self.agents.iter().filter_map(|a| a.vote.clone()).collect()
    }

    /// Agent `i`'s latest answer.
    pub fn latest_answer(&self, i: usize) -> Option<&Answer> {
        self.agents[i].latest.map(|k| &self.answers[k])
    }

    /// The latest answer of every agent that has one, in config order, as prompts show it.
    pub fn shown_answers(&self) -> Vec<ShownAnswer> {
        self.agents
            .iter()
            .filter_map(|a| {
                let answer = &self.answers[a.latest?];
                Some(match &answer.content {
                    AnswerContent::Text { text } => ShownAnswer {
                        label: a.who.label.clone(),
                        text: text.clone(),
                        calls: Vec::new(),
                    },
                    AnswerContent::ToolCalls { calls } => {
                        ShownAnswer::proposal(&a.who.label, calls)
                    }
                })
            })
            .collect()
    }

    pub fn latest_answer_labels(&self) -> Vec<String> {
        self.agents
            .iter()
            .filter_map(|a| Some(self.answers[a.latest?].answer_label.clone()))
            .collect()
    }

    pub fn cancelled(&self) -> SessionError {
        self.error(
            SessionErrorKind::Cancelled,
            "the session was cancelled (the client went away)".into(),
        )
    }

    pub fn error(&self, kind: SessionErrorKind, message: String) -> SessionError {
        SessionError {
            kind,
            message,
            agent_errors: self.agents.iter().filter_map(|a| a.error.clone()).collect(),
            usage: self.usage,
            cost_usd: self.cost_usd(),
        }
    }

    pub fn summaries(&self) -> Vec<AgentSummary> {
        self.agents
            .iter()
            .map(|a| AgentSummary {
                agent: a.who.clone(),
                provider: a.provider.clone(),
                model: a.model.clone(),
                usage: a.usage,
                calls: a.calls,
                restarts: a.restarts,
                cost_usd: a.price.map(|_| a.cost),
                answers: a.answers,
                failed: a.status == Status::Failed,
                error: a.error.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
