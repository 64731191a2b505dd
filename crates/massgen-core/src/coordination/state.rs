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
        self.agents[i].status = if self.single || self.deferring() {
            Status::Waiting
        } else {
            Status::Idle
        };
        self.release();
        answer
    }

    /// Deferred voting is holding answered agents back: some live agent has not ended a
    /// turn with an answer yet (nor with a counted vote: an agent whose proposal repeats
    /// another's has voted for it).
    fn deferring(&self) -> bool {
        self.defer && self.live().any(|a| !a.settled)
    }

    /// Once nothing defers any more, every agent waiting for the first answers needs a turn.
    fn release(&mut self) {
        if self.single || self.deferring() {
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

    /// Live agents that need a turn now, in config order.
    pub fn due(&self) -> Vec<usize> {
        (0..self.agents.len())
            .filter(|&i| self.agents[i].status == Status::Idle)
            .collect()
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

    /// `Some(cap)` once agent `i` has used up `max_new_answers_per_agent`.
    pub fn answer_limit_reached(&self, i: usize) -> Option<u32> {
        self.answer_cap.filter(|&max| self.agents[i].answers >= max)
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
mod tests {
    use super::*;

    fn member(id: &str) -> Member {
        Member {
            id: id.into(),
            provider: "p".into(),
            model: "m".into(),
            price: None,
        }
    }

    fn rules(defer: bool) -> Rules {
        Rules {
            min_live: 1,
            answer_cap: None,
            defer,
            quorum: Quorum::All,
            budget: None,
        }
    }

    fn with(n: usize, rules: Rules) -> SessionState {
        let members = (0..n).map(|i| member(&format!("id{i}"))).collect();
        SessionState::new(members, rules)
    }

    fn state(n: usize) -> SessionState {
        with(n, rules(false))
    }

    /// `n` agents, each in its first turn (no deferred voting).
    fn started(n: usize) -> SessionState {
        let mut s = state(n);
        for i in 0..n {
            s.begin_turn(i);
        }
        s
    }

    fn text(t: &str) -> AnswerContent {
        AnswerContent::Text { text: t.into() }
    }

    fn vote(s: &mut SessionState, i: usize, target: &str) -> VoteOutcome {
        s.record_vote(i, target.into(), "r".into())
    }

    #[test]
    fn labels_follow_config_order() {
        let s = state(3);
        let labels: Vec<_> = s.everyone().into_iter().map(|a| a.label).collect();
        assert_eq!(labels, ["agent1", "agent2", "agent3"]);
        assert_eq!(s.who(1).agent_id, "id1");
    }

    #[test]
    fn an_answer_clears_votes_and_restarts_its_author_and_the_voters() {
        let mut s = started(3);
        let a = s.record_answer(0, text("one"));
        assert_eq!(a.answer_label, "agent1.1");
        assert_eq!(s.due(), [0]);
        s.begin_turn(0);
        assert!(matches!(vote(&mut s, 0, "agent1"), VoteOutcome::Counted(_)));
        assert_eq!(s.counted_votes().len(), 1);
        // agent2 answers: agent1's vote is cleared and agent1 (voted) restarts with agent2;
        // agent3, still in its turn, does not.
        let a = s.record_answer(1, text("two"));
        assert_eq!(a.answer_label, "agent2.1");
        assert_eq!(s.due(), [0, 1]);
        assert!(s.counted_votes().is_empty());
        assert_eq!(s.status(2), Status::Running { seen_version: 0 });
        assert_eq!(s.latest_answer_labels(), ["agent1.1", "agent2.1"]);
    }

    #[test]
    fn deferred_voting_holds_answers_until_every_live_agent_has_one() {
        let mut s = with(3, rules(true));
        assert_eq!(s.due(), [0, 1, 2]);
        for i in 0..3 {
            s.begin_turn(i);
        }
        s.record_answer(1, text("two"));
        assert_eq!(s.status(1), Status::Waiting);
        assert!(s.due().is_empty());
        s.record_answer(0, text("one"));
        assert!(s.due().is_empty());
        // The last first answer releases everybody at once, its author included.
        s.record_answer(2, text("three"));
        assert_eq!(s.due(), [0, 1, 2]);
        // Past the first answers nothing defers: a new answer restarts its author at once.
        for i in 0..3 {
            s.begin_turn(i);
        }
        s.record_answer(0, text("one, better"));
        assert_eq!(s.due(), [0]);
    }

    #[test]
    fn a_counted_vote_ends_the_wait_like_an_answer() {
        // An agent whose proposal repeats another's has voted for it instead of answering.
        let mut s = with(2, rules(true));
        s.begin_turn(0);
        s.begin_turn(1);
        s.record_answer(0, text("one"));
        assert!(matches!(
            vote(&mut s, 1, "agent1"),
            VoteOutcome::Stale { .. }
        ));
        assert_eq!(s.due(), [1]);
        s.begin_turn(1);
        assert!(matches!(vote(&mut s, 1, "agent1"), VoteOutcome::Counted(_)));
        assert_eq!(s.due(), [0]);
    }

    #[test]
    fn a_failure_ends_the_wait_for_its_first_answer() {
        let mut s = with(3, rules(true));
        for i in 0..3 {
            s.begin_turn(i);
        }
        s.record_answer(0, text("one"));
        s.record_answer(1, text("two"));
        assert!(s.due().is_empty());
        s.fail(2, AgentErrorKind::TurnTimeout, "slow".into(), None);
        assert_eq!(s.due(), [0, 1]);
    }

    #[test]
    fn a_vote_from_an_older_answer_set_is_stale() {
        let mut s = started(2);
        s.record_answer(0, text("one"));
        match vote(&mut s, 1, "agent1") {
            VoteOutcome::Stale { vote, why } => {
                assert_eq!(vote.target_agent_id, "id0");
                assert_eq!(why, "cast before the newest answer (agent1.1) was seen");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(s.status(1), Status::Idle);
        assert!(s.counted_votes().is_empty());
    }

    #[test]
    fn convergence_needs_every_live_agent_to_vote() {
        let mut s = started(3);
        s.record_answer(0, text("one"));
        s.begin_turn(0);
        s.begin_turn(1);
        vote(&mut s, 0, "agent1");
        vote(&mut s, 1, "agent1");
        assert!(!s.converged());
        s.fail(2, AgentErrorKind::TurnTimeout, "slow".into(), None);
        assert!(s.converged());
        assert!(s.too_few_live().is_none());
    }

    #[test]
    fn a_majority_for_one_answer_is_a_quorum() {
        let majority = Rules {
            quorum: Quorum::Majority,
            ..rules(false)
        };
        let mut s = with(3, majority);
        for i in 0..3 {
            s.begin_turn(i);
        }
        s.record_answer(0, text("one"));
        s.record_answer(1, text("two"));
        for i in 0..3 {
            s.begin_turn(i);
        }
        vote(&mut s, 0, "agent1");
        vote(&mut s, 1, "agent2");
        assert!(!s.quorum_reached(), "split votes are no quorum");
        vote(&mut s, 2, "agent2");
        assert!(s.quorum_reached());
        assert_eq!(s.pick_winner(), Some(1));
        // Once the other live agent fails, the two votes are everybody's: no early stop.
        let mut s = with(3, majority);
        s.begin_turn(0);
        s.record_answer(0, text("one"));
        s.fail(2, AgentErrorKind::TurnTimeout, "slow".into(), None);
        s.begin_turn(0);
        s.begin_turn(1);
        vote(&mut s, 0, "agent1");
        assert!(!s.quorum_reached());
        vote(&mut s, 1, "agent1");
        assert!(!s.quorum_reached());
        assert!(s.converged());
    }

    #[test]
    fn ties_go_to_config_order_and_no_votes_to_the_first_answer() {
        let mut s = started(4);
        assert_eq!(s.pick_winner(), None);
        s.record_answer(2, text("three"));
        assert_eq!(s.pick_winner(), Some(2));
        s.record_answer(1, text("two"));
        for i in 0..4 {
            s.begin_turn(i);
        }
        vote(&mut s, 0, "agent3");
        vote(&mut s, 1, "agent2");
        vote(&mut s, 2, "agent3");
        vote(&mut s, 3, "agent2");
        let tally: Vec<_> = s.tally().into_iter().map(|t| (t.label, t.votes)).collect();
        assert_eq!(
            tally,
            [("agent2".to_string(), 2), ("agent3".to_string(), 2)]
        );
        assert_eq!(s.pick_winner(), Some(1));
    }

    #[test]
    fn too_few_live_agents_names_the_failures() {
        let two = Rules {
            min_live: 2,
            ..rules(false)
        };
        let mut s = SessionState::new(vec![member("a"), member("b")], two);
        s.fail(0, AgentErrorKind::InvalidTurns, "no tools".into(), None);
        let e = s.too_few_live().expect("too few");
        assert_eq!(e.kind, SessionErrorKind::NoUsableAgent);
        assert_eq!(
            e.message,
            "1 live agent(s) left, fewer than min_live_agents (2): a: no tools"
        );
        let upstream = ProviderError::new(crate::provider::ProviderErrorKind::Server, "p", "down");
        s.fail(1, AgentErrorKind::Upstream, "down".into(), Some(&upstream));
        let e = s.too_few_live().expect("too few");
        assert_eq!(e.kind, SessionErrorKind::UpstreamFailed);
        assert!(
            e.message.starts_with("every agent failed: "),
            "{}",
            e.message
        );
        assert_eq!(e.agent_errors.len(), 2);
    }

    #[test]
    fn a_single_agent_restarts_nobody_and_the_cap_counts_answers() {
        let capped = Rules {
            answer_cap: Some(1),
            ..rules(true)
        };
        let mut s = SessionState::new(vec![member("a")], capped);
        assert!(s.is_single());
        s.begin_turn(0);
        assert_eq!(s.answer_limit_reached(0), None);
        s.record_answer(0, text("one"));
        assert!(s.due().is_empty());
        assert_eq!(s.status(0), Status::Waiting);
        assert_eq!(s.answer_limit_reached(0), Some(1));
        assert_eq!(s.shown_answers()[0].text, "one");
    }

    #[test]
    fn usage_adds_up_per_agent_and_in_total() {
        let mut s = state(2);
        let u = Usage {
            input_tokens: 3,
            output_tokens: 2,
            total_tokens: 5,
            ..Usage::default()
        };
        s.add_usage(0, &u);
        s.add_usage(1, &u);
        s.add_usage(1, &u);
        assert_eq!(s.usage().total_tokens, 15);
        let summaries = s.summaries();
        assert_eq!(summaries[1].usage.total_tokens, 10);
        assert_eq!(summaries[0].provider, "p");
    }

    #[test]
    fn cost_is_known_only_where_the_price_is() {
        let price = Price {
            input_per_million: 1_000_000.0,
            output_per_million: 2_000_000.0,
            cached_input_per_million: 0.0,
        };
        let priced = Member {
            price: Some(price),
            ..member("a")
        };
        let mut s = SessionState::new(vec![priced, member("b")], rules(true));
        let u = Usage {
            input_tokens: 3,
            output_tokens: 2,
            total_tokens: 5,
            cached_input_tokens: 1,
            reasoning_tokens: 1,
        };
        assert_eq!(s.add_usage(0, &u), Some(2.0 + 4.0));
        assert_eq!(s.cost_usd(), Some(6.0));
        // The unpriced agent's call has no cost, and makes the session's unknown (never 0).
        assert_eq!(s.add_usage(1, &u), None);
        assert_eq!(s.cost_usd(), None);
        assert_eq!(s.spent(), 6.0);
        let summaries = s.summaries();
        assert_eq!(summaries[0].cost_usd, Some(6.0));
        assert_eq!(summaries[1].cost_usd, None);
        assert_eq!(
            s.error(SessionErrorKind::Timeout, "t".into()).cost_usd,
            None
        );
    }
}
