//! The engine's protocol options of MassGen 0.1.46–0.1.97 (issue 14): the final-answer
//! strategies, the panel's answer cap, `skip_voting`, the fairness lead cap and the answer
//! order rotated per voter. Scripted providers, paused time.

use massgen_core::coordination::*;
use massgen_core::provider::ProviderRequest;
use massgen_core::testing::*;

fn immediate() -> OrchestratorOptions {
    OrchestratorOptions {
        defer_voting_until_all_answered: false,
        ..OrchestratorOptions::default()
    }
}

fn with_strategy(strategy: FinalAnswerStrategy, skip: bool) -> OrchestratorOptions {
    OrchestratorOptions {
        final_answer_strategy: Some(strategy),
        skip_final_presentation: skip,
        ..OrchestratorOptions::default()
    }
}

fn presentations(p: &Scripted) -> Vec<ProviderRequest> {
    p.requests().into_iter().filter(is_presentation).collect()
}

/// Labels of the `answer` events, in order.
fn answer_labels(run: &Run) -> Vec<String> {
    run.kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Answer { answer } => Some(answer.answer_label.clone()),
            _ => None,
        })
        .collect()
}

/// The order of the answers in a request's prompt, by label.
fn shown_order(req: &ProviderRequest) -> Vec<String> {
    let text = user_text(req);
    let mut found: Vec<(usize, String)> = (1..=9)
        .map(|n| format!("agent{n}"))
        .filter_map(|l| {
            text.find(&format!("<answer label=\"{l}\">"))
                .map(|at| (at, l))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, l)| l).collect()
}

#[tokio::test(start_paused = true)]
async fn winner_reuse_returns_the_stored_answer_without_a_call() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 2, "agent1");
    let options = with_strategy(FinalAnswerStrategy::WinnerReuse, false);
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.presentation, PresentationMode::Skipped);
    assert_eq!(s.final_answer, "Alpha: four.");
    assert!(presentations(&a).is_empty() && presentations(&b).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_named_strategy_overrides_skip_final_presentation() {
    // MassGen keeps the presenter for winner_present / synthesize even under
    // skip_final_presentation; without a strategy that flag means winner_reuse.
    for strategy in [
        FinalAnswerStrategy::WinnerPresent,
        FinalAnswerStrategy::Synthesize,
    ] {
        let a = member("a", "Alpha: four.", 1, "agent1");
        let b = member("b", "Beta: 4.", 2, "agent1");
        let run = run(spec(&[("a", &a), ("b", &b)], with_strategy(strategy, true))).await;
        assert_eq!(run.summary().presentation, PresentationMode::Presented);
        assert_eq!(run.summary().final_answer, "Final answer");
        assert_eq!(presentations(&a).len(), 1, "{strategy:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn synthesize_gives_the_presenter_every_answer_and_vote_to_combine() {
    let a = member("a", "Alpha: four, by counting.", 1, "agent2");
    let b = member("b", "Beta: 4, by addition.", 2, "agent2");
    let c = member("c", "Gamma: 4 in base ten.", 3, "agent1");
    let options = with_strategy(FinalAnswerStrategy::Synthesize, false);
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], options)).await;
    assert_eq!(run.summary().winner.label, "agent2");
    let [req] = presentations(&b).try_into().expect("one presentation call");
    let system = system_text(&req);
    assert!(
        system.contains("bring in the strongest parts of the other answers"),
        "{system}"
    );
    let user = user_text(&req);
    for text in ["Alpha: four", "Beta: 4", "Gamma: 4"] {
        assert!(user.contains(text), "{user}");
    }
    assert!(user.contains("Your own answer is the one labelled agent2."));
    assert!(user.contains("agent3 voted for agent1: agent1 is best"));
    // winner_present keeps today's instructions.
    let a = member("a", "Alpha.", 1, "agent1");
    let b = member("b", "Beta.", 2, "agent1");
    run_plain(&a, &b).await;
    let system = system_text(&presentations(&a)[0]);
    assert!(system.contains("your answer was chosen"), "{system}");
    assert!(!system.contains("strongest"), "{system}");
}

async fn run_plain(a: &Scripted, b: &Scripted) -> Run {
    run(spec(&[("a", a), ("b", b)], OrchestratorOptions::default())).await
}

#[tokio::test(start_paused = true)]
async fn skip_voting_ends_once_everybody_answered() {
    let a = member("a", "Alpha: four.", 3, "agent1");
    let b = member("b", "Beta: 4.", 1, "agent1");
    let options = OrchestratorOptions {
        skip_voting: true,
        skip_final_presentation: true,
        ..OrchestratorOptions::default()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::AllAnswered);
    assert!(s.votes.is_empty());
    // No votes: the first agent (config order) with an answer wins; its answer as is.
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(s.final_answer, "Alpha: four.");
    assert_eq!(a.requests().len(), 1);
    assert_eq!(b.requests().len(), 1, "agent2 waited instead of voting");
    assert_eq!(s.duration_ms, 3000);
}

#[tokio::test(start_paused = true)]
async fn skip_voting_with_synthesize_combines_without_naming_a_winner() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 2, "agent1");
    let options = OrchestratorOptions {
        skip_voting: true,
        final_answer_strategy: Some(FinalAnswerStrategy::Synthesize),
        ..immediate()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    assert_eq!(run.summary().consensus_reason, ConsensusReason::AllAnswered);
    let req = &presentations(&a)[0];
    assert!(system_text(req).contains("combines the strongest relevant parts of all"));
    assert!(!user_text(req).contains("Your own answer"));
    assert!(user_text(req).contains("No votes were cast."));
}

#[tokio::test(start_paused = true)]
async fn the_quick_synthesis_skips_the_vote_round_as_massgen_does() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 2, "agent1");
    let options = OrchestratorOptions {
        final_answer_strategy: Some(FinalAnswerStrategy::Synthesize),
        max_new_answers_per_agent: Some(1),
        ..immediate()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    assert_eq!(run.summary().consensus_reason, ConsensusReason::AllAnswered);
    assert!(a.requests().iter().all(|r| vote_enum(r).is_empty()));
}

#[tokio::test(start_paused = true)]
async fn each_voter_sees_the_answers_rotated_and_votes_stay_correct() {
    let a = member("a", "Alpha: four.", 1, "agent2");
    let b = member("b", "Beta: 4.", 2, "agent2");
    let c = member("c", "Gamma: 4.", 3, "agent2");
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], immediate())).await;
    let voting = |p: &Scripted| {
        p.requests()
            .into_iter()
            .rfind(|r| vote_enum(r).len() == 3)
            .expect("a turn with every answer")
    };
    let (ra, rb, rc) = (voting(&a), voting(&b), voting(&c));
    assert_eq!(shown_order(&ra), ["agent2", "agent3", "agent1"]);
    assert_eq!(shown_order(&rb), ["agent3", "agent1", "agent2"]);
    assert_eq!(shown_order(&rc), ["agent1", "agent2", "agent3"]);
    // The vote tool keeps config order; labels still name their own text.
    for r in [&ra, &rb, &rc] {
        assert_eq!(vote_enum(r), ["agent1", "agent2", "agent3"]);
        assert!(user_text(r).contains("<answer label=\"agent2\">\nBeta: 4.\n</answer>"));
    }
    let s = run.summary();
    assert_eq!(s.winner.label, "agent2");
    assert_eq!(
        s.tally.iter().map(|t| t.votes).collect::<Vec<_>>(),
        [0, 3, 0]
    );
}

#[tokio::test(start_paused = true)]
async fn the_global_answer_cap_leaves_only_votes() {
    // Three answers would be written; the panel may write two. agent3's first-answer turn
    // is cut when the second answer lands, and it votes instead.
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 2, "agent1");
    let c = member("c", "Gamma: 4.", 10, "agent1");
    let options = OrchestratorOptions {
        max_new_answers_global: Some(2),
        ..OrchestratorOptions::default()
    };
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], options)).await;
    let s = run.summary();
    assert_eq!(answer_labels(&run), ["agent1.1", "agent2.1"]);
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    assert_eq!(s.votes.len(), 3);
    let reqs = c.requests();
    assert_eq!(tool_names(&reqs[0]), ["new_answer"]);
    assert_eq!(tool_names(&reqs[1]), ["vote"]);
    assert!(s.duration_ms < 10_000, "agent3's answer was not awaited");
    assert_eq!(s.agents[2].restarts, 1);
}

#[tokio::test(start_paused = true)]
async fn an_answer_past_the_global_cap_is_refused_and_the_agent_votes() {
    let a = Scripted::new("a", |req, n| match n {
        0 => after(1, answer("Alpha: four.")),
        // Answers again although the panel's one answer is written and only vote offered.
        1 => answer("Alpha again, differently."),
        _ if is_presentation(req) => present(&["x"]),
        _ => vote("agent1", "ok"),
    });
    let b = member("b", "Beta.", 5, "agent1");
    let options = OrchestratorOptions {
        max_new_answers_global: Some(1),
        ..immediate()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    assert_eq!(run.invalid_checks("agent1"), ["answer_limit_reached"]);
    assert_eq!(answer_labels(&run), ["agent1.1"]);
    assert_eq!(run.summary().consensus_reason, ConsensusReason::Converged);
}

/// agent1 answers twice in a row (1 s each) and then votes; agent2's first answer takes
/// 10 s (or fails then), after which it votes for agent1.
fn fast_and_slow(slow_fails: bool) -> (Scripted, Scripted) {
    let a = Scripted::new("a", |req, n| match n {
        _ if is_presentation(req) => present(&["x"]),
        0 => after(1, answer("Alpha: four, first draft.")),
        1 => after(1, answer("Alpha: a second, quite different draft.")),
        _ => vote("agent1", "mine"),
    });
    let b = Scripted::new("b", move |req, n| match n {
        _ if is_presentation(req) => present(&["x"]),
        0 if slow_fails => vec![
            Step::Sleep(std::time::Duration::from_secs(10)),
            Step::Fail(upstream_error(503)),
        ],
        0 => after(10, answer("Beta: 4.")),
        _ => vote("agent1", "fine"),
    });
    (a, b)
}

fn fair(cap: Option<u32>) -> OrchestratorOptions {
    OrchestratorOptions {
        fairness_lead_cap: cap,
        ..immediate()
    }
}

#[tokio::test(start_paused = true)]
async fn the_fairness_cap_holds_the_leader_until_the_slowest_answers() {
    // Without fairness agent1's second answer comes at 2 s, before agent2's first.
    let (a, b) = fast_and_slow(false);
    let run_free = run(spec(&[("a", &a), ("b", &b)], fair(None))).await;
    assert_eq!(
        answer_labels(&run_free),
        ["agent1.1", "agent1.2", "agent2.1"]
    );
    // With a lead cap of 1 it waits for agent2's first answer.
    let (a, b) = fast_and_slow(false);
    let run = run(spec(&[("a", &a), ("b", &b)], fair(Some(1)))).await;
    assert_eq!(answer_labels(&run), ["agent1.1", "agent2.1", "agent1.2"]);
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(s.duration_ms, 11_000);
}

#[tokio::test(start_paused = true)]
async fn a_failed_slow_agent_releases_the_held_one() {
    let (a, b) = fast_and_slow(true);
    let run = run(spec(&[("a", &a), ("b", &b)], fair(Some(1)))).await;
    let s = run.summary();
    assert_eq!(answer_labels(&run), ["agent1.1", "agent1.2"]);
    assert!(s.agents[1].failed);
    // Held from 1 s until agent2 failed at 10 s, then one more turn (1 s) and a vote.
    assert_eq!(s.duration_ms, 11_000);
}

#[tokio::test(start_paused = true)]
async fn lockstep_fairness_cannot_stall_the_session() {
    // Cap 0: after the first answers both agents are held; with nobody else to wait for
    // they take turns that may only vote.
    let a = member("a", "Alpha: four.", 1, "agent2");
    let b = member("b", "Beta: 4.", 2, "agent2");
    let run = run(spec(&[("a", &a), ("b", &b)], fair(Some(0)))).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    assert_eq!(s.winner.label, "agent2");
    let second = &a.requests()[1];
    assert_eq!(tool_names(second), ["vote"]);
}

// ---- max_orchestration_restarts: post-evaluation ----

fn is_evaluation(req: &ProviderRequest) -> bool {
    tool_names(req).iter().any(|t| t == "restart_orchestration")
}

fn restart_call(reason: &str) -> Vec<Step> {
    let args = serde_json::json!({"reason": reason, "instructions": "Name both of them."});
    let mut steps = vec![tool_call("restart_orchestration", &args.to_string())];
    steps.push(Step::Chunk(massgen_core::provider::ProviderChunk::Usage(
        CALL_USAGE,
    )));
    steps
}

fn submit_call() -> Vec<Step> {
    let mut steps = vec![tool_call("submit", r#"{"confirmed":true}"#)];
    steps.push(Step::Chunk(massgen_core::provider::ProviderChunk::Usage(
        CALL_USAGE,
    )));
    steps
}

/// A panel member that answers `first` in the first attempt and `second` once it was told
/// about an earlier attempt, votes for agent1, and as a reviewer always asks for a restart
/// when `restarts` (else submits).
fn reviewer(
    name: &str,
    first: &'static str,
    (second, second_delay): (&'static str, u64),
    delay: u64,
    restarts: bool,
) -> Scripted {
    Scripted::new(name, move |req, _| {
        if is_presentation(req) {
            return present(&["Final"]);
        }
        if is_evaluation(req) {
            return if restarts {
                restart_call("It names only John.")
            } else {
                submit_call()
            };
        }
        if vote_enum(req).is_empty() {
            return if user_text(req).starts_with("<previous_attempt>") {
                after(second_delay, answer(second))
            } else {
                after(delay, answer(first))
            };
        }
        vote("agent1", "fine")
    })
}

fn restarts(n: u32) -> OrchestratorOptions {
    OrchestratorOptions {
        max_orchestration_restarts: n,
        ..OrchestratorOptions::default()
    }
}

fn post_evaluations(run: &Run) -> Vec<bool> {
    run.kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::PostEvaluation { restart, .. } => Some(*restart),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn post_evaluation_restarts_once_with_the_critique_and_counts_its_cost() {
    let a = reviewer("a", "John.", ("John and Paul.", 1), 1, true);
    let b = reviewer("b", "Lennon.", ("Lennon and McCartney.", 2), 2, true);
    let run = run(spec(&[("a", &a), ("b", &b)], restarts(1))).await;
    let s = run.summary();
    // Bounded by the value: one restart, then the second winner is not asked again.
    assert_eq!(post_evaluations(&run), [true]);
    assert_eq!(a.requests().iter().filter(|r| is_evaluation(r)).count(), 1);
    // The second attempt saw the critique and the earlier answer, and its answers are
    // the session's.
    let second = a
        .requests()
        .into_iter()
        .find(|r| user_text(r).starts_with("<previous_attempt>"))
        .expect("a turn of the second attempt");
    let told = user_text(&second);
    assert!(told.contains("It names only John.") && told.contains("Name both of them."));
    assert!(told.contains("John."), "{told}");
    let texts: Vec<String> = s.answers.iter().map(|a| a.content.as_text()).collect();
    assert_eq!(texts, ["John and Paul.", "Lennon and McCartney."]);
    assert_eq!(s.final_answer, "Final");
    // Its tokens are in the usage, under their own phase.
    let phases: Vec<CallPhase> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Usage { phase, .. } => Some(*phase),
            _ => None,
        })
        .collect();
    assert_eq!(
        phases
            .iter()
            .filter(|p| **p == CallPhase::PostEvaluation)
            .count(),
        1
    );
    assert_eq!(
        s.usage.total_tokens,
        CALL_USAGE.total_tokens * phases.len() as u64
    );
    // Two attempts of 2 answers + 2 votes, one evaluation, one presentation.
    assert_eq!(s.agents[0].calls + s.agents[1].calls, 10);
}

#[tokio::test(start_paused = true)]
async fn an_approved_answer_is_presented_and_restarts_are_off_by_default() {
    let a = reviewer("a", "John.", ("John and Paul.", 1), 1, false);
    let b = reviewer("b", "Lennon.", ("Lennon and McCartney.", 2), 2, false);
    let run_on = run(spec(&[("a", &a), ("b", &b)], restarts(2))).await;
    assert_eq!(post_evaluations(&run_on), [false]);
    assert_eq!(run_on.summary().answers.len(), 2);
    assert_eq!(run_on.summary().final_answer, "Final");

    let a = reviewer("a", "John.", ("John and Paul.", 1), 1, true);
    let b = reviewer("b", "Lennon.", ("Lennon and McCartney.", 2), 2, true);
    let run_off = run(spec(
        &[("a", &a), ("b", &b)],
        OrchestratorOptions::default(),
    ))
    .await;
    assert!(post_evaluations(&run_off).is_empty());
    assert!(!a.requests().iter().any(is_evaluation));
}

#[tokio::test(start_paused = true)]
async fn a_restart_that_runs_out_of_time_returns_the_earlier_winner() {
    // The second attempt's answers take 100 s; the session has 20 s.
    let options = OrchestratorOptions {
        session_timeout: std::time::Duration::from_secs(20),
        skip_final_presentation: true,
        ..restarts(1)
    };
    let late_a = reviewer("a", "John.", ("late", 100), 1, true);
    let late_b = reviewer("b", "Lennon.", ("late", 100), 2, true);
    let run = run(spec(&[("a", &late_a), ("b", &late_b)], options)).await;
    let s = run.summary();
    assert_eq!(post_evaluations(&run), [true]);
    assert_eq!(s.consensus_reason, ConsensusReason::Timeout);
    assert_eq!(s.final_answer, "John.");
    assert_eq!(s.duration_ms, 20_000);
}

#[tokio::test(start_paused = true)]
async fn no_evaluation_once_the_budget_is_spent() {
    let a = reviewer("a", "John.", ("John and Paul.", 1), 1, true);
    let b = reviewer("b", "Lennon.", ("Lennon and McCartney.", 2), 2, true);
    let mut spec = spec(
        &[("a", &a), ("b", &b)],
        OrchestratorOptions {
            max_cost_usd: Some(0.000_001),
            ..restarts(1)
        },
    );
    let price = massgen_core::provider::Price {
        input_per_million: 1.0,
        output_per_million: 1.0,
        cached_input_per_million: 0.0,
    };
    for agent in &mut spec.agents {
        agent.price = Some(price);
    }
    let run = run(spec).await;
    assert!(post_evaluations(&run).is_empty());
    assert!(!a.requests().iter().any(is_evaluation));
}
