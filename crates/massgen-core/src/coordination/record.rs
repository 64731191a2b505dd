//! What the session knows at any moment: live agents, answers shown, votes, tally, winner.

use super::engine::{AgentState, Session, Status};
use super::events::*;
use super::prompt::ShownAnswer;

impl Session {
    pub(super) fn too_few_live(&self) -> Option<SessionError> {
        let live = self
            .agents
            .iter()
            .filter(|a| !matches!(a.status, Status::Failed))
            .count();
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

    pub(super) fn converged(&self) -> bool {
        let mut live = self
            .agents
            .iter()
            .filter(|a| !matches!(a.status, Status::Failed))
            .peekable();
        live.peek().is_some() && live.all(|a| matches!(a.status, Status::Voted))
    }

    /// Most counted votes; a tie goes to config order; no votes: the first agent with an
    /// answer.
    pub(super) fn pick_winner(&self) -> Option<usize> {
        let tally = self.tally();
        let mut best: Option<(usize, u32)> = None;
        for entry in &tally {
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
    pub(super) fn tally(&self) -> Vec<TallyEntry> {
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

    pub(super) fn counted_votes(&self) -> Vec<VoteRecord> {
        self.agents.iter().filter_map(|a| a.vote.clone()).collect()
    }

    /// The latest answer of every agent that has one, in config order.
    pub(super) fn shown_answers(&self) -> Vec<ShownAnswer> {
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

    pub(super) fn latest_answer_labels(&self) -> Vec<String> {
        self.agents
            .iter()
            .filter_map(|a| Some(self.answers[a.latest?].answer_label.clone()))
            .collect()
    }

    pub(super) fn limit_reached(&self, i: usize) -> Option<u32> {
        self.options
            .max_new_answers_per_agent
            .filter(|&max| self.agents[i].answers >= max)
    }

    pub(super) fn cancelled(&self) -> SessionError {
        self.error(
            SessionErrorKind::Cancelled,
            "the session was cancelled (the client went away)".into(),
        )
    }

    pub(super) fn error(&self, kind: SessionErrorKind, message: String) -> SessionError {
        SessionError {
            kind,
            message,
            agent_errors: self.agents.iter().filter_map(|a| a.error.clone()).collect(),
            usage: self.usage,
        }
    }
}

pub(super) fn agent_summary(a: &AgentState) -> AgentSummary {
    AgentSummary {
        agent: a.who.clone(),
        provider: a.spec.provider.provider_name().to_string(),
        model: a.spec.provider.model().to_string(),
        usage: a.usage,
        answers: a.answers,
        failed: matches!(a.status, Status::Failed),
        error: a.error.clone(),
    }
}
