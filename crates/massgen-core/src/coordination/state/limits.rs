//! Who may write another answer: `max_new_answers_per_agent`, `max_new_answers_global` and
//! the fairness lead cap (MassGen's `fairness_lead_cap_answers`), and when the deliberation
//! ends without votes (`skip_voting`). An agent that may not answer may still vote.

use super::{SessionState, Status};

impl SessionState {
    /// Answers written by the whole panel.
    fn total_answers(&self) -> u32 {
        u32::try_from(self.answers.len()).unwrap_or(u32::MAX)
    }

    /// `max_new_answers_global` is used up: from now on every agent may only vote.
    pub fn global_cap_reached(&self) -> bool {
        self.global_cap
            .is_some_and(|cap| self.total_answers() >= cap)
    }

    /// Why agent `i` may not write a new answer now (a sentence for the agent), or `None`.
    pub fn answer_blocked(&self, i: usize) -> Option<String> {
        if let Some(cap) = self.global_cap.filter(|_| self.global_cap_reached()) {
            return Some(format!(
                "The panel has written all {cap} of its new answers (max_new_answers_global)."
            ));
        }
        if let Some(cap) = self.answer_cap.filter(|&c| self.agents[i].answers >= c) {
            return Some(format!("You have used all {cap} of your new answers."));
        }
        let (lead, cap) = self.lead_over_cap(i)?;
        Some(format!(
            "Another answer now would put you {lead} answers ahead of the slowest agent still \
             deliberating (at most {cap} allowed)."
        ))
    }

    /// The fairness cap holds agent `i` back: its next answer would put it more than the cap
    /// ahead of the live agent with the fewest answers among those still deliberating (not
    /// voted). Returns that lead and the cap. An agent with no answer yet is never held (as
    /// in MassGen), nor one without such a peer: failed and voting agents hold nobody.
    fn lead_over_cap(&self, i: usize) -> Option<(u32, u32)> {
        let cap = self.fairness_cap?;
        let own = self.agents[i].answers;
        if own == 0 || self.single {
            return None;
        }
        let slowest = self
            .agents
            .iter()
            .enumerate()
            .filter(|&(j, a)| j != i && !matches!(a.status, Status::Failed | Status::Voted))
            .map(|(_, a)| a.answers)
            .min()?;
        let lead = (own + 1).saturating_sub(slowest);
        (lead > cap).then_some((lead, cap))
    }

    /// Agent `i` must wait for slower agents before its next turn (see [`Self::due`]).
    pub(super) fn held(&self, i: usize) -> bool {
        self.lead_over_cap(i).is_some()
    }

    /// Every live agent has an answer (what `skip_voting` waits for).
    pub fn all_live_answered(&self) -> bool {
        let mut live = self.live().peekable();
        live.peek().is_some() && live.all(|a| a.answers > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{text, with};
    use super::super::*;
    use crate::coordination::events::AgentErrorKind;

    fn rules() -> Rules {
        super::super::tests::rules(false)
    }

    #[test]
    fn the_global_cap_leaves_only_votes_and_ends_the_wait() {
        let capped = Rules {
            global_cap: Some(2),
            defer: true,
            ..rules()
        };
        let mut s = with(3, capped);
        for i in 0..3 {
            s.begin_turn(i);
        }
        s.record_answer(0, text("one"));
        assert!(s.due().is_empty(), "deferred: waits for the others");
        assert_eq!(s.answer_blocked(1), None);
        s.record_answer(1, text("two"));
        assert!(s.global_cap_reached());
        // Nobody waits for agent3's first answer any more; agent3 may only vote too.
        assert_eq!(s.due(), [0, 1]);
        let why = s.answer_blocked(2).expect("blocked");
        assert!(why.contains("all 2 of its new answers"), "{why}");
    }

    #[test]
    fn the_fairness_cap_holds_the_leader_until_the_slowest_catches_up() {
        let fair = Rules {
            fairness_cap: Some(1),
            ..rules()
        };
        let mut s = with(2, fair);
        s.begin_turn(0);
        s.begin_turn(1);
        s.record_answer(0, text("one"));
        // A second answer would be 2 ahead of agent2 (0 answers): agent1 waits.
        assert!(s.held(0));
        assert!(s.due().is_empty());
        assert!(
            s.answer_blocked(0)
                .expect("held")
                .contains("2 answers ahead")
        );
        s.record_answer(1, text("two"));
        assert!(!s.held(0));
        assert_eq!(s.due(), [0, 1]);
    }

    #[test]
    fn failed_or_voting_agents_hold_nobody_and_nobody_waits_forever() {
        let fair = Rules {
            fairness_cap: Some(1),
            ..rules()
        };
        let mut s = with(3, fair);
        for i in 0..3 {
            s.begin_turn(i);
        }
        s.record_answer(0, text("one"));
        assert!(s.held(0));
        s.fail(2, AgentErrorKind::TurnTimeout, "slow".into(), None);
        assert!(s.held(0), "agent2 is still deliberating");
        s.record_answer(1, text("two"));
        s.begin_turn(1);
        s.record_vote(1, "agent2".into(), "r".into());
        assert!(!s.held(0), "a voting agent holds nobody");
        // Nobody else in a turn: the held agent is due anyway (it may only vote).
        let mut t = with(2, fair);
        t.begin_turn(0);
        t.record_answer(0, text("one"));
        t.fail(1, AgentErrorKind::TurnTimeout, "slow".into(), None);
        assert!(!t.held(0), "a failed agent holds nobody");
        let mut u = with(
            2,
            Rules {
                fairness_cap: Some(0),
                ..rules()
            },
        );
        u.begin_turn(0);
        u.begin_turn(1);
        u.record_answer(0, text("one"));
        u.record_answer(1, text("two"));
        // Lockstep (cap 0): both are held, nobody runs, so both take (vote-only) turns.
        assert!(u.held(0) && u.held(1));
        assert_eq!(u.due(), [0, 1]);
    }

    #[test]
    fn answering_once_waits_for_everybody_then_ends() {
        let once = Rules {
            answer_once: true,
            ..rules()
        };
        let mut s = with(2, once);
        s.begin_turn(0);
        s.begin_turn(1);
        s.record_answer(0, text("one"));
        assert_eq!(s.status(0), Status::Waiting);
        assert!(!s.all_live_answered());
        s.record_answer(1, text("two"));
        assert!(s.due().is_empty());
        assert!(s.all_live_answered());
    }
}
