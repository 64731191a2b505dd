//! The use case in-process ([`crate::support::app`]): an `App` over scripted agents, asked
//! for sessions as an edge asks, in paused time. What the application decides is tested
//! here; what only the binary shows (HTTP, processes, real clients) stays black-box.

use std::time::Duration;

use massgen::app::{Caller, KeyId, Owner, Refusal};
use massgen::config::{ProductionSettings, ServerSettings};
use massgen_core::coordination::{ConsensusReason, EventKind, OrchestratorOptions};
use massgen_core::provider::Price;

use crate::support::app::{answer, app, ask, panel, run};
use crate::support::engine::member;

fn key(name: &str) -> Caller {
    Caller {
        key: Some(KeyId::new(0, Owner::of_key(name))),
    }
}

fn settings(production: ProductionSettings) -> ServerSettings {
    ServerSettings {
        production,
        ..ServerSettings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_runs_in_process_to_its_answer() {
    let agents = [
        ("a", member("a", "Four.", 1, "agent1")),
        ("b", member("b", "4", 2, "agent1")),
    ];
    let app = app(
        panel(&agents, OrchestratorOptions::default(), None),
        &agents,
        ServerSettings::default(),
    );
    let events = run(&app, ask(Caller::default(), "2+2?")).await.unwrap();
    assert_eq!(answer(&events), Some("Final answer"));
    // The record has the end, read as the HTTP edge reads it.
    let id = events[0].session_id.clone();
    let record = app.records().get(&id, &Caller::default()).unwrap();
    assert_eq!(record.summary().status, "completed");
}

#[tokio::test(start_paused = true)]
async fn a_sessions_places_are_held_to_its_end_whatever_its_reader_does() {
    let agents = [
        ("a", member("a", "Slow.", 30, "agent1")),
        ("b", member("b", "Slower.", 40, "agent1")),
    ];
    let app = app(
        panel(&agents, OrchestratorOptions::default(), None),
        &agents,
        settings(ProductionSettings {
            max_concurrent_sessions: Some(1),
            ..ProductionSettings::default()
        }),
    );
    // Opened and never read: it still runs, on its own clock.
    let first = app.open(ask(Caller::default(), "q")).await.unwrap();
    let refused = app.open(ask(Caller::default(), "q")).await.err();
    assert!(
        matches!(refused, Some(Refusal::TooManySessions { max: 1 })),
        "{refused:?}"
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    // Ended (its record says so) and its place given back, though nothing read it.
    let id = first.id.clone();
    let record = app.records().get(&id, &Caller::default()).unwrap();
    assert_eq!(record.summary().status, "completed");
    assert!(app.open(ask(Caller::default(), "q")).await.is_ok());
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn one_keys_part_of_the_sessions_leaves_room_for_others() {
    let agents = [("a", member("a", "Slow.", 30, "agent1"))];
    let app = app(
        panel(&agents, OrchestratorOptions::default(), None),
        &agents,
        settings(ProductionSettings {
            max_concurrent_sessions: Some(4),
            max_sessions_per_key: Some(1),
            ..ProductionSettings::default()
        }),
    );
    let held = app.open(ask(key("k-a"), "q")).await.unwrap();
    let again = app.open(ask(key("k-a"), "q")).await.err();
    assert!(matches!(
        again,
        Some(Refusal::TooManyKeySessions { max: 1 })
    ));
    let other = app.open(ask(key("k-b"), "q")).await;
    assert!(other.is_ok());
    drop((held, other));
}

#[tokio::test(start_paused = true)]
async fn a_keys_day_reserves_at_least_a_sessions_first_round() {
    // Two agents at $1,000 per million tokens in and out: a first round is counted at their
    // prompts and 4,096 output tokens each, about $9, whatever the request's own limit.
    let price = Price {
        input_per_million: 1000.0,
        output_per_million: 1000.0,
        cached_input_per_million: 1000.0,
    };
    let agents = [
        ("a", member("a", "Slow.", 30, "agent1")),
        ("b", member("b", "Slower.", 40, "agent1")),
    ];
    let app = app(
        panel(&agents, OrchestratorOptions::default(), Some(price)),
        &agents,
        settings(ProductionSettings {
            max_key_cost_usd_per_day: Some(12.0),
            ..ProductionSettings::default()
        }),
    );
    let tiny = || {
        let mut a = ask(key("k-a"), "q");
        a.overrides.max_cost_usd = Some(0.000_001);
        a
    };
    let first = app.open(tiny()).await.unwrap();
    // The first reserved its round; what is left cannot hold another.
    let Err(Refusal::QuotaSpent(refused)) = app.open(tiny()).await else {
        panic!("the second session was not refused");
    };
    assert!(refused.first_round_usd > 8.0, "{refused:?}");
    assert!(
        refused.reserved_usd >= refused.first_round_usd,
        "{refused:?}"
    );
    assert!(refused.may_free_up());
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_ends_the_deliberation_with_the_answers_it_has() {
    // Answers after 2 s, votes after 60 s: a 20 s deadline ends it at 15 s with the answers.
    let voter = |name: &'static str, delay: u64| {
        massgen_core::testing::Scripted::new(name, move |req, _| {
            use massgen_core::testing::*;
            if is_presentation(req) {
                return present(&["Final ", "answer"]);
            }
            match vote_enum(req).first() {
                None => after(delay, answer("An answer.")),
                Some(label) => after(60, vote(label, "best")),
            }
        })
    };
    let agents = [("a", voter("a", 2)), ("b", voter("b", 3))];
    let app = app(
        panel(&agents, OrchestratorOptions::default(), None),
        &agents,
        ServerSettings::default(),
    );
    let mut timed = ask(Caller::default(), "q");
    timed.overrides.deadline = Some(Duration::from_secs(20));
    let events = run(&app, timed).await.unwrap();
    let reason = events.iter().find_map(|e| match &e.kind {
        EventKind::SessionCompleted { summary } => Some(summary.consensus_reason),
        _ => None,
    });
    assert_eq!(reason, Some(ConsensusReason::Timeout));
}
