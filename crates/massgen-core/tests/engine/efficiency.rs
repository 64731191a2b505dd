//! The rules that keep a session from wasting calls (issue 10): deferred voting, restarts
//! of stale turns, the voting quorum, cost and budgets. Scripted providers, paused time.

use std::time::Duration;

use massgen_core::coordination::*;
use massgen_core::testing::*;

fn opts() -> OrchestratorOptions {
    OrchestratorOptions::default()
}

fn position(run: &Run, pred: impl Fn(&EventKind) -> bool) -> usize {
    run.kinds()
        .iter()
        .position(|k| pred(k))
        .expect("event present")
}

fn turn_started(run: &Run, label: &str, turn: u32) -> usize {
    position(
        run,
        |k| matches!(k, EventKind::TurnStarted { agent, turn: t, .. } if agent.label == label && *t == turn),
    )
}

fn answered(run: &Run, answer_label: &str) -> usize {
    position(
        run,
        |k| matches!(k, EventKind::Answer { answer } if answer.answer_label == answer_label),
    )
}

fn calls(providers: &[&Scripted]) -> usize {
    providers.iter().map(|p| p.requests().len()).sum()
}

#[tokio::test(start_paused = true)]
async fn deferred_voting_makes_every_first_vote_see_every_first_answer() {
    let a = member("a", "Alpha: four.", 1, "agent2");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent2");
    let c = member("c", "Gamma: 2+2 is 4.", 3, "agent2");
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], opts())).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    assert_eq!(s.winner.label, "agent2");
    // 2N+1: three answers, three votes, one presentation; nothing discarded.
    assert_eq!(calls(&[&a, &b, &c]), 7);
    assert!(
        !run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::VoteIgnored { .. }))
    );
    // The early answerers waited for agent3's answer, then everybody saw all three.
    for label in ["agent1", "agent2", "agent3"] {
        assert!(
            turn_started(&run, label, 2) > answered(&run, "agent3.1"),
            "{label}"
        );
    }
    for p in [&a, &b, &c] {
        assert_eq!(vote_enum(&p.requests()[1]), ["agent1", "agent2", "agent3"]);
    }
    assert_eq!(s.duration_ms, 3000);
}

#[tokio::test(start_paused = true)]
async fn without_deferral_the_first_answerer_votes_at_once() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent1");
    let run = run(spec(&[("a", &a), ("b", &b)], immediate())).await;
    assert!(turn_started(&run, "agent1", 2) < answered(&run, "agent2.1"));
    assert_eq!(vote_enum(&a.requests()[1]), ["agent1"]);
}

#[tokio::test(start_paused = true)]
async fn deferred_voting_stops_waiting_for_a_failing_agent() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 3, "agent1");
    let c = Scripted::new("c", |_, _| after(2, vec![Step::Fail(upstream_error(500))]));
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], opts())).await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    assert!(s.agents[2].failed);
    // agent1 still waited for agent2 (working) after agent3 failed at t=2.
    let failed = position(&run, |k| matches!(k, EventKind::AgentFailed { .. }));
    assert!(failed < answered(&run, "agent2.1"));
    assert!(turn_started(&run, "agent1", 2) > answered(&run, "agent2.1"));
    assert_eq!(calls(&[&a, &b, &c]), 3 + 2 + 1);
    assert_eq!(s.duration_ms, 3000);

    // When the failure is the last thing deferral waits for, it releases the others.
    let a = member("a", "Alpha: four.", 1, "agent1");
    let c = Scripted::new("c", |_, _| after(5, vec![Step::Fail(upstream_error(500))]));
    let run = massgen_core::testing::run(spec(&[("a", &a), ("c", &c)], opts())).await;
    let failed = position(&run, |k| matches!(k, EventKind::AgentFailed { .. }));
    assert!(turn_started(&run, "agent1", 2) > failed);
    assert_eq!(run.summary().duration_ms, 5000);
}

#[tokio::test(start_paused = true)]
async fn deferred_voting_waits_for_a_hanging_agent_only_until_its_turn_timeout() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent1");
    let c = Scripted::new("c", |_, _| vec![Step::Hang]);
    let options = OrchestratorOptions {
        agent_turn_timeout: Duration::from_secs(30),
        ..opts()
    };
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], options)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    let err = s.agents[2].error.clone().expect("the hanging agent failed");
    assert_eq!(err.kind, AgentErrorKind::TurnTimeout);
    let failed = position(&run, |k| matches!(k, EventKind::AgentFailed { .. }));
    assert!(turn_started(&run, "agent1", 2) > failed);
    assert!(turn_started(&run, "agent2", 2) > failed);
    assert_eq!(s.duration_ms, 30_000);
    assert_eq!(c.live_streams(), 0);
}

/// agent1 answers at t=1 and votes for itself; agent2 answers at once, and its second turn
/// (a vote turn that sees only its own answer) runs `second`.
fn stale_second_turn(second: fn() -> Vec<Step>) -> (Scripted, Scripted) {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = Scripted::new("b", move |req, n| match n {
        0 => answer("Beta: 4."),
        1 => second(),
        _ if is_presentation(req) => present(&["x"]),
        _ => vote("agent1", "better"),
    });
    (a, b)
}

fn immediate() -> OrchestratorOptions {
    OrchestratorOptions {
        defer_voting_until_all_answered: false,
        ..opts()
    }
}

const PARTIAL: massgen_core::provider::Usage = massgen_core::provider::Usage {
    input_tokens: 7,
    output_tokens: 0,
    total_tokens: 7,
    cached_input_tokens: 0,
    reasoning_tokens: 0,
};

#[tokio::test(start_paused = true)]
async fn a_stale_turn_restarts_at_once_and_keeps_the_usage_reported_so_far() {
    let (a, b) = stale_second_turn(|| {
        // Reports its input, then would vote for its own answer at t=5.
        let mut steps = vec![Step::Chunk(massgen_core::provider::ProviderChunk::Usage(
            PARTIAL,
        ))];
        steps.extend(after(5, vote("agent2", "mine")));
        steps
    });
    let run = run(spec(&[("a", &a), ("b", &b)], immediate())).await;
    let s = run.summary();
    let restarted = run
        .kinds()
        .into_iter()
        .find_map(|k| match k {
            EventKind::TurnRestarted {
                agent,
                turn,
                newest,
            } => Some((agent.label.clone(), *turn, newest.clone())),
            _ => None,
        })
        .expect("a turn_restarted event");
    assert_eq!(restarted, ("agent2".into(), 2, "agent1.1".into()));
    // Cancelled at t=1 when agent1 answered, not finished at t=5 into a discarded vote.
    assert!(
        !run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::VoteIgnored { .. }))
    );
    assert_eq!(s.duration_ms, 1000);
    assert_eq!(b.live_streams(), 0);
    let reqs = b.requests();
    assert!(!shows(&reqs[1], "agent1"));
    assert!(
        shows(&reqs[2], "agent1"),
        "the fresh turn shows the new answer"
    );
    assert!(
        turn_started(&run, "agent2", 3)
            > position(&run, |k| matches!(k, EventKind::TurnRestarted { .. }))
    );
    assert_eq!(s.winner.label, "agent1");
    // The cancelled call counts as a call and a restart; every call of either agent does.
    assert_eq!(s.agents[1].restarts, 1);
    assert_eq!(s.agents[0].restarts, 0);
    assert_eq!(s.agents[1].calls as usize, b.requests().len());
    assert_eq!(s.agents[0].calls as usize, a.requests().len());
    assert_eq!(
        b.requests().len(),
        3,
        "answer, the cancelled vote, the fresh vote"
    );
    // The cancelled call's reported usage counts: one event for it, and in the sums.
    let usage: Vec<_> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Usage { agent, usage, .. } if agent.label == "agent2" => Some(*usage),
            _ => None,
        })
        .collect();
    assert_eq!(usage, [CALL_USAGE, PARTIAL, CALL_USAGE]);
    assert_eq!(
        s.agents[1].usage.input_tokens,
        2 * CALL_USAGE.input_tokens + PARTIAL.input_tokens
    );
    assert_eq!(
        s.usage.input_tokens,
        s.agents[0].usage.input_tokens + s.agents[1].usage.input_tokens
    );
}

#[tokio::test(start_paused = true)]
async fn a_turn_that_has_begun_an_answer_finishes_and_its_answer_counts() {
    let (a, b) = stale_second_turn(|| {
        let mut steps = vec![begins("new_answer")];
        steps.extend(after(5, answer("Beta, better: 2+2=4 because 2+2 is 4.")));
        steps
    });
    let run = run(spec(&[("a", &a), ("b", &b)], immediate())).await;
    assert!(
        !run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::TurnRestarted { .. }))
    );
    let labels: Vec<_> = run
        .summary()
        .answers
        .iter()
        .map(|a| a.answer_label.as_str())
        .collect();
    assert_eq!(labels, ["agent2.1", "agent1.1", "agent2.2"]);
    assert_eq!(run.summary().agents[1].restarts, 0);
    // Its answer, written at t=5 without seeing agent1's, restarted agent1 in turn.
    assert!(answered(&run, "agent2.2") > answered(&run, "agent1.1"));
}

#[tokio::test(start_paused = true)]
async fn first_answer_turns_are_never_cancelled() {
    // Without deferral agent1 answers at t=1 while agent2 still writes its first answer:
    // that turn was offered no vote, so it can only answer, and it goes on.
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 3, "agent1");
    let run = run(spec(&[("a", &a), ("b", &b)], immediate())).await;
    assert!(
        !run.kinds().iter().any(
            |k| matches!(k, EventKind::TurnRestarted { agent, .. } if agent.label == "agent2")
        )
    );
    assert_eq!(run.summary().answers.len(), 2);
}

/// Answers at t=1, 2, 3 (deferred), then votes taking `vote_after` seconds each, every
/// vote for agent2 unless `split`.
fn voting_panel(vote_after: [u64; 3], split: bool) -> [Scripted; 3] {
    let one = |name: &'static str, text: &'static str, at: u64, vote_at: u64, to: &'static str| {
        Scripted::new(name, move |req, _| {
            if is_presentation(req) {
                return present(&["Final"]);
            }
            if vote_enum(req).is_empty() {
                return after(at, answer(text));
            }
            after(vote_at, vote(to, "best"))
        })
    };
    [
        one("a", "Alpha: four.", 1, vote_after[0], "agent2"),
        one(
            "b",
            "Beta: 4 (arithmetic).",
            2,
            vote_after[1],
            if split { "agent1" } else { "agent2" },
        ),
        one("c", "Gamma: 2+2 is 4.", 3, vote_after[2], "agent2"),
    ]
}

fn with_quorum(quorum: Quorum) -> OrchestratorOptions {
    OrchestratorOptions {
        voting_quorum: quorum,
        ..opts()
    }
}

#[tokio::test(start_paused = true)]
async fn a_majority_ends_the_vote_and_cuts_the_slow_voter() {
    let [a, b, c] = voting_panel([1, 2, 10], false);
    let run = run(spec(
        &[("a", &a), ("b", &b), ("c", &c)],
        with_quorum(Quorum::Majority),
    ))
    .await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Quorum);
    assert_eq!(s.winner.label, "agent2");
    let cut: Vec<_> = s.cut.iter().map(|a| a.label.as_str()).collect();
    assert_eq!(cut, ["agent3"]);
    assert!(run.kinds().iter().any(|k| matches!(
        k,
        EventKind::Consensus { reason: ConsensusReason::Quorum, cut, .. } if cut.len() == 1
    )));
    // Answers end at t=3, the second vote at t=5; agent3's vote (t=13) is not awaited.
    assert_eq!(s.duration_ms, 5000);
    assert_eq!(c.live_streams(), 0);
    assert_eq!(s.votes.len(), 2);

    // An integer quorum works the same way.
    let [a, b, c] = voting_panel([1, 2, 10], false);
    let run = massgen_core::testing::run(spec(
        &[("a", &a), ("b", &b), ("c", &c)],
        with_quorum(Quorum::Votes(2)),
    ))
    .await;
    assert_eq!(run.summary().consensus_reason, ConsensusReason::Quorum);
    assert_eq!(run.summary().duration_ms, 5000);
}

#[tokio::test(start_paused = true)]
async fn a_quorum_not_reached_waits_for_every_vote() {
    // agent1 and agent3 vote agent2, agent2 votes agent1: the majority (2) is only there
    // once agent3 votes, which is also the last vote.
    let [a, b, c] = voting_panel([1, 2, 10], true);
    let run = run(spec(
        &[("a", &a), ("b", &b), ("c", &c)],
        with_quorum(Quorum::Majority),
    ))
    .await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    assert!(s.cut.is_empty());
    assert_eq!(s.votes.len(), 3);
    assert_eq!(s.duration_ms, 13_000);

    // `all` (the default) never stops early.
    let [a, b, c] = voting_panel([1, 2, 10], false);
    let run = massgen_core::testing::run(spec(&[("a", &a), ("b", &b), ("c", &c)], opts())).await;
    assert_eq!(run.summary().consensus_reason, ConsensusReason::Converged);
    assert_eq!(run.summary().duration_ms, 13_000);
}

#[tokio::test(start_paused = true)]
async fn cost_prices_cached_input_and_reasoning_and_is_unknown_without_a_price() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent1");
    // Every scripted call reports CALL_USAGE: 10 input (1 cached), 5 output (2 reasoning).
    let price = massgen_core::provider::Price {
        input_per_million: 3_000_000.0,
        output_per_million: 10_000_000.0,
        cached_input_per_million: 1_000_000.0,
    };
    let per_call = 9.0 * 3.0 + 1.0 * 1.0 + 5.0 * 10.0;
    let mut both = spec(&[("a", &a), ("b", &b)], opts());
    both.agents[0].price = Some(price);
    both.agents[1].price = Some(price);
    let run = run(both).await;
    let s = run.summary();
    let calls = (a.requests().len() + b.requests().len()) as f64;
    for k in run.kinds() {
        if let EventKind::Usage { cost_usd, .. } = k {
            assert_eq!(*cost_usd, Some(per_call));
        }
    }
    assert_eq!(s.cost_usd, Some(per_call * calls));
    assert_eq!(
        s.agents[1].cost_usd,
        Some(per_call * b.requests().len() as f64)
    );

    // agent2's model has no price: its cost and the session's are unknown, never 0.
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent1");
    let mut one = spec(&[("a", &a), ("b", &b)], opts());
    one.agents[0].price = Some(price);
    let run = massgen_core::testing::run(one).await;
    let s = run.summary();
    assert_eq!(
        s.agents[0].cost_usd,
        Some(per_call * a.requests().len() as f64)
    );
    assert_eq!(s.agents[1].cost_usd, None);
    assert_eq!(s.cost_usd, None);
}

/// 1 USD per token: every scripted call (CALL_USAGE, 15 tokens) costs 15 USD.
const DOLLAR_A_TOKEN: massgen_core::provider::Price = massgen_core::provider::Price {
    input_per_million: 1_000_000.0,
    output_per_million: 1_000_000.0,
    cached_input_per_million: 1_000_000.0,
};

fn budgeted(agents: &[(&str, &Scripted)], max_cost_usd: f64) -> SessionSpec {
    let mut s = spec(
        agents,
        OrchestratorOptions {
            max_cost_usd: Some(max_cost_usd),
            ..opts()
        },
    );
    for a in &mut s.agents {
        a.price = Some(DOLLAR_A_TOKEN);
    }
    s
}

#[tokio::test(start_paused = true)]
async fn a_spent_budget_starts_no_turn_and_returns_the_best_answer_so_far() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent1");
    // The two first answers spend 30 USD: no vote turn, no presentation call.
    let run = run(budgeted(&[("a", &a), ("b", &b)], 30.0)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Budget);
    assert_eq!(calls(&[&a, &b]), 2);
    assert_eq!(s.presentation, PresentationMode::Skipped);
    assert_eq!(s.final_answer, "Alpha: four.");
    assert_eq!(s.cost_usd, Some(30.0));
    assert_eq!(s.max_cost_usd, Some(30.0));
    assert!(run.kinds().iter().any(|k| matches!(
        k,
        EventKind::BudgetExhausted { spent_usd, max_cost_usd } if *spent_usd == 30.0 && *max_cost_usd == 30.0
    )));
    assert_eq!(s.duration_ms, 2000);

    // A budget not reached changes nothing.
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 2, "agent1");
    let run = massgen_core::testing::run(budgeted(&[("a", &a), ("b", &b)], 1000.0)).await;
    assert_eq!(run.summary().consensus_reason, ConsensusReason::Converged);
    assert_eq!(run.summary().presentation, PresentationMode::Presented);
}

#[tokio::test(start_paused = true)]
async fn a_budget_spent_after_one_answer_cuts_the_running_turns() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4 (arithmetic).", 5, "agent1");
    let run = run(budgeted(&[("a", &a), ("b", &b)], 10.0)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Budget);
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(
        s.cut.iter().map(|c| c.label.as_str()).collect::<Vec<_>>(),
        ["agent2"]
    );
    assert_eq!(
        s.duration_ms, 1000,
        "agent2's slow answer was not waited for"
    );
    assert_eq!(b.live_streams(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_budget_spent_before_any_answer_fails_the_session() {
    // Each agent's first call writes text without a tool (invalid) and costs 15 USD.
    let rambler = |name: &str| {
        Scripted::new(name, |_, n| match n {
            0 => text_then(&["Let me think."], Vec::new()),
            _ => after(1, answer("Four.")),
        })
    };
    let (a, b) = (rambler("a"), rambler("b"));
    let run = run(budgeted(&[("a", &a), ("b", &b)], 20.0)).await;
    let e = run.error();
    assert_eq!(e.kind, SessionErrorKind::BudgetExhausted);
    assert!(
        e.message.contains("before any agent answered"),
        "{}",
        e.message
    );
    assert_eq!(e.cost_usd, Some(30.0));
    // Both invalid attempts end at t=0; the second one's cost ends the session before
    // either retry reaches its upstream.
    assert_eq!(calls(&[&a, &b]), 2);
    assert_eq!(a.live_streams() + b.live_streams(), 0);
}
