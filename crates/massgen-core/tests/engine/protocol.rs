//! The coordination engine against scripted providers, in paused time.

use std::time::Duration;

use massgen_core::coordination::*;
use massgen_core::provider::{FinishReason, Message, ProviderErrorKind, Role, Usage};
use massgen_core::testing::*;
use tokio_util::sync::CancellationToken;

fn opts() -> OrchestratorOptions {
    OrchestratorOptions::default()
}

/// Without deferred voting: an agent that answered takes its next turn at once (the tests
/// that use it are about what happens while others are still answering).
/// One agent through the coordination protocol (a panel of one is otherwise a plain
/// call: tests/engine/plain.rs).
fn coordinating() -> OrchestratorOptions {
    OrchestratorOptions {
        single_agent_coordination: true,
        ..opts()
    }
}

fn immediate() -> OrchestratorOptions {
    OrchestratorOptions {
        defer_voting_until_all_answered: false,
        ..opts()
    }
}

fn tally_of(s: &SessionSummary) -> Vec<(String, u32)> {
    s.tally.iter().map(|t| (t.label.clone(), t.votes)).collect()
}

fn position(run: &Run, pred: impl Fn(&EventKind) -> bool) -> usize {
    run.kinds()
        .iter()
        .position(|k| pred(k))
        .expect("event present")
}

#[tokio::test(start_paused = true)]
async fn three_agents_converge() {
    let a = member("a", "Four, since two plus two is four.", 1, "agent2");
    let b = member("b", "The answer is 4 (basic arithmetic).", 2, "agent1");
    let c = member("c", "2+2 equals 4 in base ten.", 3, "agent2");
    let run = run(spec(&[("gpt", &a), ("claude", &b), ("gemini", &c)], opts())).await;
    let s = run.summary();

    assert_eq!(s.winner.label, "agent2");
    assert_eq!(s.winner.agent_id, "claude");
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    assert_eq!(
        tally_of(s),
        vec![
            ("agent1".into(), 1),
            ("agent2".into(), 2),
            ("agent3".into(), 0)
        ]
    );
    assert_eq!(s.final_answer, "Final answer");
    assert_eq!(s.presentation, PresentationMode::Presented);
    assert_eq!(s.finish_reason, FinishReason::Stop);
    let labels: Vec<_> = s.answers.iter().map(|a| a.answer_label.as_str()).collect();
    assert_eq!(labels, ["agent1.1", "agent2.1", "agent3.1"]);
    assert_eq!(s.votes.len(), 3);
    assert!(s.agents.iter().all(|a| a.answers == 1 && !a.failed));
    assert_eq!(s.duration_ms, 3000);

    // Numbering, timestamps and order.
    for (i, e) in run.events.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
        assert_eq!(e.at_ms, FIXED_MS);
        assert_eq!(&*e.session_id, "sess_test");
    }
    assert!(matches!(run.kinds()[0], EventKind::SessionStarted { agents } if agents.len() == 3));
    assert!(matches!(
        run.kinds().last(),
        Some(EventKind::SessionCompleted { .. })
    ));
    let consensus = position(&run, |k| matches!(k, EventKind::Consensus { .. }));
    let started = position(&run, |k| matches!(k, EventKind::PresentationStarted { .. }));
    let delta = position(&run, |k| matches!(k, EventKind::FinalDelta { .. }));
    let last_answer = run
        .kinds()
        .iter()
        .rposition(|k| matches!(k, EventKind::Answer { .. }))
        .expect("answers");
    assert!(last_answer < consensus && consensus < started && started < delta);
    let deltas: Vec<_> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::FinalDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["Final ", "answer"]);
    // The presenter was the winner.
    assert!(b.requests().iter().any(is_presentation));
    assert!(!a.requests().iter().any(is_presentation));
}

#[tokio::test(start_paused = true)]
async fn a_new_answer_clears_votes_and_restarts_agents() {
    // agent3 answers late; once its answer is shown, everybody prefers it.
    let c = Scripted::new("c", |req, n| {
        if is_presentation(req) {
            return present(&["C wins"]);
        }
        if n == 0 {
            return after(10, answer("Gamma: the sum is four, exactly."));
        }
        vote("agent3", "most precise")
    });
    let prefers_c = |fallback: &'static str| {
        move |req: &massgen_core::provider::ProviderRequest, _: usize| {
            if vote_enum(req).is_empty() {
                return after(1, answer(fallback));
            }
            let to = if shows(req, "agent3") {
                "agent3"
            } else {
                "agent1"
            };
            vote(to, "pick")
        }
    };
    let a2 = Scripted::new("a", prefers_c("Alpha says four."));
    let b2 = Scripted::new("b", {
        let f = prefers_c("Beta computes 4.");
        move |req: &massgen_core::provider::ProviderRequest, n| {
            if n == 0 {
                return after(2, answer("Beta computes 4."));
            }
            f(req, n)
        }
    });
    let run = run(spec(&[("a", &a2), ("b", &b2), ("c", &c)], immediate())).await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent3");
    assert_eq!(
        tally_of(s),
        vec![
            ("agent1".into(), 0),
            ("agent2".into(), 0),
            ("agent3".into(), 3)
        ]
    );
    // Votes for agent1 were cast and counted before agent3 answered, then cleared.
    let early_votes = run
        .kinds()
        .iter()
        .filter(|k| matches!(k, EventKind::Vote { vote } if vote.target_label == "agent1"))
        .count();
    assert!(early_votes >= 2, "{early_votes}");
    // After agent3's answer, agent1 got a fresh turn that shows it.
    let last = a2.requests().last().cloned().expect("requests");
    assert!(shows(&last, "agent3"));
    assert_eq!(vote_enum(&last), ["agent1", "agent2", "agent3"]);
    // The restart happened without a discarded vote: agent1 was waiting.
    assert!(
        !run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::VoteIgnored { .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn votes_cleared_by_a_new_answer_do_not_count_at_timeout() {
    let a = Scripted::new("a", |req, n| match n {
        0 => after(1, answer("Alpha: four.")),
        1 => vote("agent1", "mine"),
        _ if is_presentation(req) => present(&["x"]),
        // The turn after agent2's answer never ends.
        _ => vec![Step::Hang],
    });
    let b = member("b", "Beta: 4.", 5, "agent2");
    let options = OrchestratorOptions {
        session_timeout: Duration::from_secs(60),
        ..immediate()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Timeout);
    assert_eq!(
        tally_of(s),
        vec![("agent1".into(), 0), ("agent2".into(), 1)]
    );
    assert_eq!(s.winner.label, "agent2");
    assert!(shows(&a.requests()[2], "agent2"));
}

#[tokio::test(start_paused = true)]
async fn a_vote_against_an_old_answer_set_is_ignored_and_retried() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = Scripted::new("b", |req, n| match n {
        0 => answer("Beta: 4."),
        // Started at t=0 seeing only its own answer; it begins a `new_answer` (so agent1's
        // answer at t=1 does not cancel it) but ends at t=5 with a vote instead.
        1 => {
            let mut steps = vec![begins("new_answer")];
            steps.extend(after(5, vote("agent2", "mine")));
            steps
        }
        _ if is_presentation(req) => present(&["x"]),
        _ => vote("agent1", "better"),
    });
    let run = run(spec(&[("a", &a), ("b", &b)], immediate())).await;
    let s = run.summary();
    let ignored: Vec<_> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::VoteIgnored { vote, .. } => Some(vote.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ignored.len(), 1);
    assert_eq!(ignored[0].voter.label, "agent2");
    assert_eq!(ignored[0].target_label, "agent2");
    let reqs = b.requests();
    assert!(!shows(&reqs[1], "agent1"));
    assert!(
        shows(&reqs[2], "agent1"),
        "the fresh turn shows the new answer"
    );
    assert!(run.kinds().iter().any(|k| matches!(
        k,
        EventKind::TurnStarted { agent, turn: 3, answers_seen } if agent.label == "agent2"
            && answers_seen == &["agent1.1".to_string(), "agent2.1".to_string()]
    )));
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(
        tally_of(s),
        vec![("agent1".into(), 2), ("agent2".into(), 0)]
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_attempts_are_retried_then_fail_the_agent() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = Scripted::new("b", |_, n| match n {
        0 => text_then(&["I think it is 4."], Vec::new()),
        1 => text_then(&[], vec![tool_call("new_answer", "{not json")]),
        _ => text_then(
            &[],
            vec![tool_call("vote", r#"{"agent_id":"agent1","reason":"r"}"#)],
        ),
    });
    let run = run(spec(&[("a", &a), ("b", &b)], opts())).await;
    assert_eq!(
        run.invalid_checks("agent2"),
        [
            "no_workflow_tool",
            "invalid_arguments",
            "vote_without_answers"
        ]
    );
    let reqs = b.requests();
    assert_eq!(reqs.len(), 3);
    // Attempt 2 carries the reminder after the streamed text.
    let m = &reqs[1].messages;
    assert_eq!(m.len(), 4);
    assert_eq!(m[2], Message::assistant("I think it is 4."));
    assert_eq!(m[3].role, Role::User);
    // Only `new_answer` is on offer while no answer exists.
    assert!(m[3].content.contains("`new_answer`") && !m[3].content.contains("vote"));
    // Attempt 3 carries the assistant's call and the tool-result error.
    let m = &reqs[2].messages;
    assert_eq!(m.len(), 6);
    assert_eq!(m[4].tool_calls.len(), 1);
    assert_eq!(m[5].role, Role::Tool);
    assert_eq!(m[5].tool_call_id.as_deref(), Some("call_new_answer"));
    assert!(m[5].content.contains("not valid JSON"), "{}", m[5].content);
    let failed = run
        .kinds()
        .into_iter()
        .find_map(|k| match k {
            EventKind::AgentFailed { error } => Some(error.clone()),
            _ => None,
        })
        .expect("agent failed");
    assert_eq!(failed.agent.label, "agent2");
    assert_eq!(failed.kind, AgentErrorKind::InvalidTurns);
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    assert!(s.agents[1].failed);
}

#[tokio::test(start_paused = true)]
async fn ties_go_to_config_order() {
    let p1 = member("1", "one: four", 1, "agent3");
    let p2 = member("2", "two: 4", 2, "agent2");
    let p3 = member("3", "three: IV", 3, "agent3");
    let p4 = member("4", "four: 2+2=4", 4, "agent2");
    let run = run(spec(
        &[("p1", &p1), ("p2", &p2), ("p3", &p3), ("p4", &p4)],
        opts(),
    ))
    .await;
    let s = run.summary();
    assert_eq!(
        tally_of(s),
        vec![
            ("agent1".into(), 0),
            ("agent2".into(), 2),
            ("agent3".into(), 2),
            ("agent4".into(), 0)
        ]
    );
    assert_eq!(s.winner.label, "agent2");
}

#[tokio::test(start_paused = true)]
async fn one_failing_agent_leaves_a_completed_session() {
    let a = member("a", "Alpha: four.", 1, "agent2");
    let b = member("b", "Beta: 4.", 2, "agent2");
    let c = Scripted::new("c", |_, _| vec![Step::Fail(upstream_error(503))]);
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], opts())).await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent2");
    let err = s.agents[2].error.clone().expect("error recorded");
    assert!(s.agents[2].failed);
    assert_eq!(err.kind, AgentErrorKind::Upstream);
    assert_eq!(err.status, Some(503));
    assert_eq!(err.provider.as_deref(), Some("scripted"));
    assert_eq!(err.upstream_kind, Some(ProviderErrorKind::Server));
    assert_eq!(c.requests().len(), 1, "a failed agent gets no more turns");
}

#[tokio::test(start_paused = true)]
async fn all_agents_failing_fails_the_session() {
    let a = Scripted::new("a", |_, _| vec![Step::Fail(upstream_error(500))]);
    let b = Scripted::new("b", |_, _| after(1, vec![Step::Fail(upstream_error(502))]));
    let run = run(spec(&[("a", &a), ("b", &b)], opts())).await;
    let e = run.error();
    assert_eq!(e.kind, SessionErrorKind::UpstreamFailed);
    let statuses: Vec<_> = e.agent_errors.iter().map(|e| e.status).collect();
    assert_eq!(statuses, [Some(500), Some(502)]);
    assert!(matches!(
        run.kinds().last(),
        Some(EventKind::SessionFailed { error }) if error == e
    ));
}

#[tokio::test(start_paused = true)]
async fn invalid_turns_only_fail_with_no_usable_agent() {
    let a = Scripted::new("a", |_, _| text_then(&["no tools here"], Vec::new()));
    let run = run(spec(&[("a", &a)], coordinating())).await;
    assert_eq!(run.error().kind, SessionErrorKind::NoUsableAgent);
    assert_eq!(a.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn too_few_agents_for_min_live_agents_fails_at_once() {
    let a = member("a", "x", 0, "agent1");
    let options = OrchestratorOptions {
        min_live_agents: 2,
        ..coordinating()
    };
    let run = run(spec(&[("a", &a)], options)).await;
    assert_eq!(run.error().kind, SessionErrorKind::NoUsableAgent);
    assert!(a.requests().is_empty());
    assert_eq!(run.events.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn session_timeout_presents_the_best_answer() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = Scripted::new("b", |_, _| vec![Step::Hang]);
    let options = OrchestratorOptions {
        session_timeout: Duration::from_secs(60),
        ..immediate()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Timeout);
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(s.final_answer, "Final answer");
    assert_eq!(s.duration_ms, 60_000);
    assert_eq!(b.live_streams(), 0, "the hanging call was dropped");
    assert_eq!(tally_of(s), vec![("agent1".into(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn session_timeout_without_answers_fails() {
    let a = Scripted::new("a", |_, _| vec![Step::Hang]);
    let options = OrchestratorOptions {
        session_timeout: Duration::from_secs(60),
        ..opts()
    };
    let run = run(spec(&[("a", &a), ("b", &a.clone())], options)).await;
    assert_eq!(run.error().kind, SessionErrorKind::Timeout);
    assert_eq!(a.live_streams(), 0);
}

#[tokio::test(start_paused = true)]
async fn agent_turn_timeout_fails_the_slow_agent() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = Scripted::new("b", |_, _| vec![Step::Hang]);
    let options = OrchestratorOptions {
        agent_turn_timeout: Duration::from_secs(30),
        ..opts()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    let err = s.agents[1].error.clone().expect("slow agent failed");
    assert_eq!(err.kind, AgentErrorKind::TurnTimeout);
    assert_eq!(s.duration_ms, 30_000);
    assert_eq!(b.live_streams(), 0);
}

/// agent1 answers "a b c d e f" at t=1; agent2's first turn (ending at t=2) tries
/// `second`, then a distinct answer. Returns agent2's failed checks and first answer.
async fn novelty_case(novelty: Strictness, second: &'static str) -> (Vec<String>, String) {
    let a = member("a", "a b c d e f", 1, "agent1");
    let b = Scripted::new("b", move |req, n| match n {
        0 => after(2, answer(second)),
        _ if vote_enum(req).is_empty() || n == 1 => answer("something else entirely"),
        _ if is_presentation(req) => present(&["x"]),
        _ => vote("agent1", "fine"),
    });
    let options = OrchestratorOptions {
        answer_novelty_requirement: novelty,
        ..opts()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let first = run
        .summary()
        .answers
        .iter()
        .find(|a| a.answer_label == "agent2.1")
        .map(|a| a.content.as_text())
        .expect("agent2 answered");
    (run.invalid_checks("agent2"), first)
}

/// An identical answer is never refused (issue 26): it is a vote for agent1, here discarded
/// because agent2's first turn saw no answer, so agent2 takes a fresh turn
/// (`identical.rs` follows the votes).
#[tokio::test(start_paused = true)]
async fn identical_answers_are_votes_at_every_level() {
    for novelty in [
        Strictness::Lenient,
        Strictness::Balanced,
        Strictness::Strict,
    ] {
        let (checks, first) = novelty_case(novelty, "  a b c d e f \n").await;
        assert!(checks.is_empty(), "{novelty:?}: {checks:?}");
        assert_eq!(first, "something else entirely");
    }
}

#[tokio::test(start_paused = true)]
async fn similar_answers_follow_the_novelty_requirement() {
    // Jaccard 5/7 = 0.71: too similar for balanced, fine for lenient.
    let (checks, _) = novelty_case(Strictness::Balanced, "A b c d e, G!").await;
    assert_eq!(checks, ["too_similar_answer"]);
    let (checks, first) = novelty_case(Strictness::Lenient, "A b c d e, G!").await;
    assert!(checks.is_empty());
    assert_eq!(first, "A b c d e, G!");
    // Jaccard 4/7 = 0.57: too similar only for strict.
    let (checks, _) = novelty_case(Strictness::Balanced, "a b c d x").await;
    assert!(checks.is_empty());
    let (checks, _) = novelty_case(Strictness::Strict, "a b c d x").await;
    assert_eq!(checks, ["too_similar_answer"]);
}

#[tokio::test(start_paused = true)]
async fn the_answer_limit_offers_only_vote() {
    let a = Scripted::new("a", |req, n| match n {
        0 => after(1, answer("Alpha: four.")),
        // Tries to answer again although only `vote` is offered.
        1 => answer("Alpha again, differently."),
        _ if is_presentation(req) => present(&["x"]),
        _ if vote_enum(req).iter().any(|l| l == "agent2") => vote("agent2", "ok"),
        _ => vote("agent1", "ok"),
    });
    let b = member("b", "Beta: 4.", 2, "agent2");
    let options = OrchestratorOptions {
        max_new_answers_per_agent: Some(1),
        ..immediate()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let reqs = a.requests();
    assert_eq!(tool_names(&reqs[0]), ["new_answer"]);
    assert_eq!(tool_names(&reqs[1]), ["vote"]);
    assert_eq!(vote_enum(&reqs[1]), ["agent1"]);
    assert_eq!(run.invalid_checks("agent1"), ["answer_limit_reached"]);
    let s = run.summary();
    assert_eq!(s.agents[0].answers, 1);
    assert_eq!(s.winner.label, "agent2");
}

#[tokio::test(start_paused = true)]
async fn prompts_use_the_delimiters_and_offer_the_right_tools() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 100, "agent1");
    let c = member("c", "Gamma: 4!", 2, "agent1");
    let mut spec = spec(&[("a", &a), ("b", &b), ("c", &c)], immediate());
    spec.input.history = vec![
        Message::user("Hi"),
        Message::assistant("Hello."),
        Message::tool_result("call_9", "42"),
    ];
    spec.input.extra_system = Some("Client system text.".into());
    spec.agents[0].system_message = Some("You are terse.".into());
    let run = run(spec).await;
    assert!(run.result.is_ok());

    let first = &a.requests()[0];
    assert_eq!(
        user_text(first),
        "<conversation>\nuser: Hi\nassistant: Hello.\ntool (call_9): 42\n</conversation>\n\
         <original_message>\nWhat is 2+2?\n</original_message>\n\
         <current_answers>\nNo answers exist yet.\n</current_answers>"
    );
    assert_eq!(tool_names(first), ["new_answer"]);
    let system = system_text(first);
    assert!(system.starts_with("You are terse.\n\nClient system text.\n\nYou are agent1,"));
    assert!(system.contains("Tue, 14 Nov 2023 22:13:20 GMT"), "{system}");
    assert!(first.tool_choice == Some(massgen_core::provider::ToolChoice::Auto));

    // agent2 is still working on its first answer; agent3 answered at t=2. agent1's later
    // turn sees agent1 and agent3 only, its own answer last.
    let seen = a
        .requests()
        .into_iter()
        .find(|r| vote_enum(r) == ["agent1", "agent3"])
        .expect("a turn with answers from agent1 and agent3");
    assert_eq!(tool_names(&seen), ["new_answer", "vote"]);
    assert!(user_text(&seen).ends_with(
        "<current_answers>\n<answer label=\"agent3\">\nGamma: 4!\n</answer>\n\
         <answer label=\"agent1\">\nAlpha: four.\n</answer>\n</current_answers>"
    ));

    // Presentation: no tools, own label, votes.
    let p = a
        .requests()
        .into_iter()
        .find(is_presentation)
        .expect("agent1 presented");
    let u = user_text(&p);
    assert!(u.contains("Your own answer is the one labelled agent1."));
    assert!(u.contains("<votes>\nagent1 voted for agent1: agent1 is best\n"));
    assert!(u.ends_with("</votes>"));
    assert!(system_text(&p).starts_with("You are terse.\n\nClient system text.\n\n"));
}

#[tokio::test(start_paused = true)]
async fn a_single_agent_answers_once_and_presents() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let run = run(spec(&[("a", &a)], coordinating())).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::SingleAgent);
    assert_eq!(s.final_answer, "Final answer");
    let reqs = a.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(tool_names(&reqs[0]), ["new_answer"]);
    assert!(!system_text(&reqs[0]).contains("vote"));
    assert!(is_presentation(&reqs[1]));
}

#[tokio::test(start_paused = true)]
async fn skip_coordination_rounds_uses_the_first_agent_alone() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 1, "agent1");
    let options = OrchestratorOptions {
        skip_coordination_rounds: true,
        min_live_agents: 2,
        ..coordinating()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.consensus_reason, ConsensusReason::SingleAgent);
    assert_eq!(s.winner.agent_id, "a");
    assert!(b.requests().is_empty());
    assert_eq!(tool_names(&a.requests()[0]), ["new_answer"]);
}

#[tokio::test(start_paused = true)]
async fn skip_final_presentation_returns_the_stored_answer() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = member("b", "Beta: 4.", 2, "agent1");
    let options = OrchestratorOptions {
        skip_final_presentation: true,
        ..opts()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(s.presentation, PresentationMode::Skipped);
    assert_eq!(s.final_answer, "Alpha: four.");
    assert!(!a.requests().iter().any(is_presentation));
    assert!(
        !run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::PresentationStarted { .. }))
    );
    assert!(
        run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::FinalDelta { text } if text == "Alpha: four."))
    );
}

fn failing_presenter(partial: &'static [&'static str]) -> Scripted {
    Scripted::new("a", move |req, _| {
        if is_presentation(req) {
            let mut steps: Vec<Step> = partial
                .iter()
                .map(|t| Step::Chunk(massgen_core::provider::ProviderChunk::Text(t.to_string())))
                .collect();
            steps.push(Step::Fail(upstream_error(500)));
            return steps;
        }
        if vote_enum(req).is_empty() {
            return answer("Alpha: four.");
        }
        vote("agent1", "only one")
    })
}

#[tokio::test(start_paused = true)]
async fn a_failed_presentation_falls_back_to_the_stored_answer() {
    let a = failing_presenter(&[]);
    let run = run(spec(&[("a", &a)], coordinating())).await;
    let s = run.summary();
    assert_eq!(s.presentation, PresentationMode::Fallback);
    assert_eq!(s.final_answer, "Alpha: four.");
    assert!(run.kinds().iter().any(
        |k| matches!(k, EventKind::PresentationFailed { agent, .. } if agent.label == "agent1")
    ));

    // Text already streamed stays; a note and the whole stored answer follow it.
    let a = failing_presenter(&["Part"]);
    let run = massgen_core::testing::run(spec(&[("a", &a)], coordinating())).await;
    let s = run.summary();
    assert_eq!(s.presentation, PresentationMode::Fallback);
    assert!(s.final_answer.starts_with("Part\n\n"));
    assert!(s.final_answer.ends_with("\n\nAlpha: four."));
    let streamed: String = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::FinalDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, s.final_answer);
}

#[tokio::test(start_paused = true)]
async fn usage_sums_every_call_exactly() {
    let a = member("a", "Alpha: four.", 1, "agent2");
    let b = member("b", "Beta: 4.", 2, "agent2");
    let run = run(spec(&[("a", &a), ("b", &b)], opts())).await;
    let s = run.summary();
    let calls = (a.requests().len() + b.requests().len()) as u64;
    let usage_events: Vec<_> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Usage { phase, usage, .. } => Some((*phase, *usage)),
            _ => None,
        })
        .collect();
    assert_eq!(usage_events.len() as u64, calls);
    assert_eq!(
        usage_events
            .iter()
            .filter(|(p, _)| *p == CallPhase::Presentation)
            .count(),
        1
    );
    let expected = Usage {
        input_tokens: 10 * calls,
        output_tokens: 5 * calls,
        total_tokens: 15 * calls,
        cached_input_tokens: calls,
        reasoning_tokens: 2 * calls,
    };
    assert_eq!(s.usage, expected);
    let mut per_agent = Usage::default();
    for agent in &s.agents {
        per_agent.add(&agent.usage);
    }
    assert_eq!(per_agent, expected);
    assert_eq!(
        s.agents[1].usage.input_tokens,
        10 * b.requests().len() as u64
    );
}

struct ProbeClock {
    live: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    count: Box<dyn Fn() -> usize + Send + Sync>,
}

impl Clock for ProbeClock {
    fn now(&self) -> std::time::SystemTime {
        self.live.lock().unwrap().push((self.count)());
        std::time::SystemTime::UNIX_EPOCH
    }
}

#[tokio::test(start_paused = true)]
async fn cancellation_drops_running_calls() {
    let a = Scripted::new("a", |_, _| vec![Step::Hang]);
    let b = Scripted::new("b", |_, _| vec![Step::Hang]);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let started = tokio::time::Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    // The clock stamps every event: it notes how many calls are alive at each one.
    let (probe_a, probe_b) = (a.clone(), b.clone());
    let live = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let clock = ProbeClock {
        live: live.clone(),
        count: Box::new(move || probe_a.live_streams() + probe_b.live_streams()),
    };
    let session = run_session(
        spec(&[("a", &a), ("b", &b)], opts()),
        tx,
        cancel,
        std::sync::Arc::new(clock),
    );
    let canceller = async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(a.live_streams() + b.live_streams(), 2);
        trigger.cancel();
    };
    let (result, ()) = tokio::join!(session, canceller);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(
        result.map(|_| ()).map_err(|e| e.kind),
        Err(SessionErrorKind::Cancelled)
    );
    let mut last = None;
    while let Ok(e) = rx.try_recv() {
        last = Some(e.kind);
    }
    assert!(matches!(
        last,
        Some(EventKind::SessionFailed { error }) if error.kind == SessionErrorKind::Cancelled
    ));
    assert_eq!(
        live.lock().unwrap().last(),
        Some(&0),
        "calls dropped before the last event"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_receiver_cancels_the_session() {
    let a = Scripted::new("a", |_, _| vec![Step::Hang]);
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let session = run_session(
        spec(&[("a", &a)], coordinating()),
        tx,
        CancellationToken::new(),
        std::sync::Arc::new(FixedClock),
    );
    let probe = a.clone();
    let (result, ()) = tokio::join!(session, async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(probe.live_streams(), 1);
        drop(rx);
    });
    assert_eq!(
        result.map(|_| ()).map_err(|e| e.kind),
        Err(SessionErrorKind::Cancelled)
    );
    assert_eq!(a.live_streams(), 0);
}

#[tokio::test(start_paused = true)]
async fn agent_text_is_streamed_when_asked() {
    let a = Scripted::new("a", |req, _| {
        if is_presentation(req) {
            return present(&["done"]);
        }
        text_then(&["thinking ", "aloud"], vec![tool_call("new_answer", "{}")])
    });
    let mut spec = spec(&[("a", &a)], coordinating());
    spec.stream_agent_text = true;
    let run = run(spec).await;
    let kinds = run.kinds();
    let deltas: Vec<_> = kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::AgentDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["thinking ", "aloud"]);
    let answer = position(&run, |k| matches!(k, EventKind::Answer { .. }));
    let delta = position(&run, |k| matches!(k, EventKind::AgentDelta { .. }));
    assert!(delta < answer);
    // `new_answer` without content takes the streamed text.
    assert_eq!(run.summary().answers[0].content.as_text(), "thinking aloud");
}

#[tokio::test(start_paused = true)]
async fn cancellation_wins_over_a_client_that_stopped_reading() {
    let a = member("a", "Alpha: four.", 1, "agent1");
    // Room for one event only, and nobody reads: the session blocks on its second event.
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let session = run_session(
        spec(&[("a", &a)], coordinating()),
        tx,
        cancel,
        std::sync::Arc::new(FixedClock),
    );
    let canceller = async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        trigger.cancel();
    };
    let joined = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(session, canceller).0
    })
    .await
    .expect("the session ended after the cancellation");
    assert_eq!(
        joined.map(|_| ()).map_err(|e| e.kind),
        Err(SessionErrorKind::Cancelled)
    );
}
