//! The state's rules, without a runtime.

use super::*;

fn member(id: &str) -> Member {
    Member {
        id: id.into(),
        provider: "p".into(),
        model: "m".into(),
        price: None,
    }
}

pub(super) fn rules(defer: bool) -> Rules {
    Rules {
        min_live: 1,
        answer_cap: None,
        global_cap: None,
        fairness_cap: None,
        answer_once: false,
        defer,
        quorum: Quorum::All,
        budget: None,
    }
}

pub(super) fn with(n: usize, rules: Rules) -> SessionState {
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

pub(super) fn text(t: &str) -> AnswerContent {
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
    assert_eq!(s.answer_blocked(0), None);
    s.record_answer(0, text("one"));
    assert!(s.due().is_empty());
    assert_eq!(s.status(0), Status::Waiting);
    assert_eq!(
        s.answer_blocked(0).as_deref(),
        Some("You have used all 1 of your new answers.")
    );
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

#[test]
fn answering_once_ends_when_every_live_agent_answered_or_voted() {
    let once = Rules {
        answer_once: true,
        ..rules(false)
    };
    let mut s = with(3, once);
    for i in 0..3 {
        s.begin_turn(i);
    }
    s.record_answer(0, text("one"));
    // agent2 repeated agent1's answer in a turn that saw it: a counted vote.
    s.begin_turn(1);
    assert!(matches!(vote(&mut s, 1, "agent1"), VoteOutcome::Counted(_)));
    assert!(
        !s.all_live_answered_or_voted(),
        "agent3 is still in its turn"
    );
    s.fail(2, AgentErrorKind::TurnTimeout, "slow".into(), None);
    assert!(!s.all_live_answered());
    assert!(s.all_live_answered_or_voted());
    // A new answer clears the vote: its voter needs a turn again, and the end waits.
    let mut t = with(3, once);
    for i in 0..3 {
        t.begin_turn(i);
    }
    t.record_answer(0, text("one"));
    t.begin_turn(1);
    vote(&mut t, 1, "agent1");
    t.record_answer(2, text("three"));
    assert!(!t.all_live_answered_or_voted());
    assert_eq!(t.due(), [1]);
}
