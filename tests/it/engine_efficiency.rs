//! The rules that keep a session from wasting calls (issue 10): deferred voting, restarts
//! of stale turns, the voting quorum, cost and budgets. Scripted providers, paused time.

use std::time::Duration;

use massgen_core::coordination::*;

use crate::support::engine::*;

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
    let options = OrchestratorOptions {
        defer_voting_until_all_answered: false,
        ..opts()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
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
    let run = crate::support::engine::run(spec(&[("a", &a), ("c", &c)], opts())).await;
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
