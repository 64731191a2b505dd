//! The deliberation up to a winner that stands: one attempt, or, with
//! `max_orchestration_restarts`, more when the winner's post-evaluation rejects the winning
//! answer (`evaluate.rs`). Every attempt runs under the same session deadline and budget.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Session;
use crate::coordination::emit::Emitter;
use crate::coordination::evaluate::{Evaluator, Verdict};
use crate::coordination::events::{
    AgentRef, AnswerContent, ConsensusReason, EventKind, SessionError, SessionErrorKind,
};
use crate::coordination::prompt;

impl Session {
    /// Runs attempts until a winner stands; returns it, why the deliberation ended and the
    /// turns that were cut.
    pub(super) async fn deliberate(
        &mut self,
        em: &mut Emitter,
        cancel: &CancellationToken,
        deadline: Instant,
    ) -> Result<(usize, ConsensusReason, Vec<AgentRef>), SessionError> {
        let mut restarts_left = self.options.max_orchestration_restarts;
        // The rejected winner of the attempt before: the answer if a restarted attempt runs
        // out of time or money before anybody answers (a restart never leaves the client
        // with less than it would have had without it).
        let mut earlier: Option<(usize, AnswerContent)> = None;
        loop {
            let reason = match self.coordinate(em, cancel, deadline).await {
                Ok(reason) => reason,
                Err(e) if e.kind == SessionErrorKind::BudgetExhausted && earlier.is_some() => {
                    ConsensusReason::Budget
                }
                Err(e) => return Err(e),
            };
            let cut = self.cut_running(em).await?;
            if self.state.answers().is_empty()
                && let Some((i, content)) = earlier.take()
            {
                self.state.record_answer(i, content);
            }
            let Some(winner) = self.state.pick_winner() else {
                return Err(self.state.error(
                    SessionErrorKind::Timeout,
                    format!(
                        "the session timed out after {}s before any agent answered",
                        self.options.session_timeout.as_secs()
                    ),
                ));
            };
            let consensus = EventKind::Consensus {
                winner: self.state.who(winner).clone(),
                reason,
                tally: self.state.tally(),
                votes: self.state.counted_votes(),
                cut: cut.clone(),
            };
            em.send(&self.state, consensus).await?;
            let out_of_means = matches!(reason, ConsensusReason::Timeout | ConsensusReason::Budget)
                || Instant::now() >= deadline
                || self.state.budget_spent().is_some();
            // A set of client tool calls is not reviewed: the client runs them.
            let text = match self.state.latest_answer(winner).map(|a| &a.content) {
                Some(AnswerContent::Text { text }) => text.clone(),
                _ => String::new(),
            };
            if restarts_left == 0 || out_of_means || text.is_empty() {
                return Ok((winner, reason, cut));
            }
            let verdict = Evaluator {
                state: &mut self.state,
                winner,
                agent: &self.agents[winner],
                input: &self.input,
                clock: self.clock.as_ref(),
                em,
                cancel,
                deadline: deadline.min(Instant::now() + self.options.presentation_timeout),
            }
            .evaluate(&text)
            .await?;
            let Verdict::Restart {
                reason: why,
                instructions,
            } = verdict
            else {
                return Ok((winner, reason, cut));
            };
            restarts_left -= 1;
            self.feedback = Some(prompt::restart_feedback(&why, &instructions, &text));
            earlier = Some((winner, AnswerContent::Text { text }));
            self.state.new_attempt();
        }
    }
}
