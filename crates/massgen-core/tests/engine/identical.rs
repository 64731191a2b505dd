//! A `new_answer` identical to a current answer is a vote for its author (issue 26), as an
//! identical proposal of client calls is: no refusal, no retry, no failed agent. Scripted
//! providers in paused time; the root crate's `tests/it/engine_identical.rs` runs it
//! through the real binary and the simulator.

use massgen_core::coordination::*;
use massgen_core::testing::*;

const SAME: &str = "Four: two plus two is four.";
/// What `validate.rs` records as the reason (`SAME_ANSWER_REASON`).
const SAME_ANSWER: &str = "gave the same answer";

/// A deterministic model: whenever it may answer it answers [`SAME`] after `delay` s
/// (never calling `vote` itself); presents.
fn same_model(name: &str, delay: u64) -> Scripted {
    Scripted::new(name, move |req, _| {
        if is_presentation(req) {
            return present(&["Four."]);
        }
        after(delay, answer(SAME))
    })
}

fn calls(providers: &[&Scripted]) -> usize {
    providers.iter().map(|p| p.requests().len()).sum()
}

/// `(voter, target)` of every `vote_ignored` event, in order.
fn ignored(run: &Run) -> Vec<(String, String)> {
    run.kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::VoteIgnored { vote, why } => {
                assert!(why.contains("agent1.1"), "{why}");
                Some((vote.voter.label.clone(), vote.target_label.clone()))
            }
            _ => None,
        })
        .collect()
}

fn assert_nobody_failed(run: &Run) {
    let s = run.summary();
    assert!(s.agents.iter().all(|a| !a.failed), "{:?}", s.agents);
    for label in ["agent1", "agent2", "agent3"] {
        assert!(run.invalid_checks(label).is_empty(), "{label}");
    }
}

#[tokio::test(start_paused = true)]
async fn three_agents_giving_the_same_answer_vote_for_the_first() {
    let a = same_model("a", 1);
    let b = same_model("b", 2);
    let c = same_model("c", 3);
    let run = run(spec(
        &[("a", &a), ("b", &b), ("c", &c)],
        OrchestratorOptions::default(),
    ))
    .await;
    let s = run.summary();
    assert_nobody_failed(&run);
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    assert_eq!(s.winner.label, "agent1");
    // One answer; the repeats were votes for its author.
    let labels: Vec<_> = s.answers.iter().map(|a| a.answer_label.as_str()).collect();
    assert_eq!(labels, ["agent1.1"]);
    // agent2's and agent3's first turns saw no answer: their votes were discarded and each
    // took a fresh turn, which saw agent1.1 and repeated it again: a counted vote.
    assert_eq!(
        ignored(&run),
        [
            ("agent2".to_string(), "agent1".to_string()),
            ("agent3".to_string(), "agent1".to_string())
        ]
    );
    let votes: Vec<_> = s
        .votes
        .iter()
        .map(|v| {
            (
                v.voter.label.as_str(),
                v.target_label.as_str(),
                v.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        votes,
        [
            // agent1 repeated its own answer: a vote for itself.
            ("agent1", "agent1", SAME_ANSWER),
            ("agent2", "agent1", SAME_ANSWER),
            ("agent3", "agent1", SAME_ANSWER)
        ]
    );
    assert_eq!(s.tally[0].votes, 3);
    let vote_events = run
        .kinds()
        .iter()
        .filter(|k| matches!(k, EventKind::Vote { vote } if vote.reason == SAME_ANSWER))
        .count();
    assert_eq!(vote_events, 3);
    // agent1: its answer, its vote, the presentation; the others: the discarded vote and
    // the counted one. No retries.
    assert_eq!(
        [&a, &b, &c].map(|p| p.requests().len()),
        [3, 2, 2],
        "{:?}",
        s.agents
    );
    assert_eq!(calls(&[&a, &b, &c]), 7);
    assert_eq!(s.agents[1].calls, 2);
}

#[tokio::test(start_paused = true)]
async fn repeating_its_own_answer_is_a_vote_for_itself() {
    let a = same_model("a", 1);
    let b = Scripted::new("b", |req, n| match n {
        0 => after(2, answer("Beta: 4, by arithmetic.")),
        _ if is_presentation(req) => present(&["x"]),
        _ => vote("agent2", "mine"),
    });
    let run = run(spec(
        &[("a", &a), ("b", &b)],
        OrchestratorOptions::default(),
    ))
    .await;
    let s = run.summary();
    assert_nobody_failed(&run);
    assert!(
        s.votes.iter().any(|v| v.voter.label == "agent1"
            && v.target_label == "agent1"
            && v.reason == SAME_ANSWER),
        "{:?}",
        s.votes
    );
    assert!(ignored(&run).is_empty());
    assert_eq!(s.consensus_reason, ConsensusReason::Converged);
    // agent1 did not answer twice: its repeat counts in the tally like agent2's vote for
    // itself, and the tie goes to config order.
    assert_eq!(s.agents[0].answers, 1);
    let tally: Vec<_> = s
        .tally
        .iter()
        .map(|t| (t.label.as_str(), t.votes))
        .collect();
    assert_eq!(tally, [("agent1", 1), ("agent2", 1)]);
    assert_eq!(s.winner.label, "agent1");
    // Its answer, its vote, the presentation.
    assert_eq!(a.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_near_duplicate_is_still_refused() {
    let a = same_model("a", 1);
    // SAME's 4 distinct words and one more (Jaccard 4/5): too similar at the balanced
    // level (the default, lenient, has no similarity check).
    let b = Scripted::new("b", |req, n| match n {
        0 => after(2, answer("Four: two plus two is four, surely.")),
        _ if vote_enum(req).is_empty() || n == 1 => answer("Beta: 4, by arithmetic."),
        _ if is_presentation(req) => present(&["x"]),
        _ => vote("agent1", "fine"),
    });
    let options = OrchestratorOptions {
        answer_novelty_requirement: Strictness::Balanced,
        ..OrchestratorOptions::default()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    let s = run.summary();
    assert_eq!(run.invalid_checks("agent2"), ["too_similar_answer"]);
    assert!(!s.agents[1].failed);
    assert!(ignored(&run).is_empty());
    let labels: Vec<_> = s.answers.iter().map(|a| a.answer_label.as_str()).collect();
    assert_eq!(labels, ["agent1.1", "agent2.1"]);
    assert_eq!(s.answers[1].content.as_text(), "Beta: 4, by arithmetic.");
}

#[tokio::test(start_paused = true)]
async fn with_skip_voting_a_repeat_ends_the_wait_like_an_answer() {
    let a = same_model("a", 1);
    let b = same_model("b", 2);
    let c = same_model("c", 3);
    let options = OrchestratorOptions {
        skip_voting: true,
        ..OrchestratorOptions::default()
    };
    let run = run(spec(&[("a", &a), ("b", &b), ("c", &c)], options)).await;
    let s = run.summary();
    assert_nobody_failed(&run);
    assert_eq!(s.consensus_reason, ConsensusReason::AllAnswered);
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(s.answers.len(), 1);
    assert_eq!(s.votes.len(), 2);
    // agent1: its answer and the presentation; it never voted.
    assert_eq!([&a, &b, &c].map(|p| p.requests().len()), [2, 2, 2]);
}
