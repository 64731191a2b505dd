//! Accuracy draws, value-following votes and presentations, and the judge. Every draw is
//! seeded, so the rates below are exact for these seeds; the ranges are what any sound
//! seeding gives with near certainty.
#![allow(clippy::unwrap_used)] // a panic is the test failure

use serde_json::{Value, json};

use super::*;
use crate::behaviour::Behaviour;
use crate::plan::{self, Plan, Reply, Request};
use crate::stats::Stats;

fn request(model: &str, tools: Value, user: &str) -> Request {
    let body = json!({"model": model, "tools": tools, "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": user}]});
    plan::parse_request(body.to_string().as_bytes()).unwrap()
}

/// Plans `req` with `stats` numbering the draws, as the server does.
fn plan_in(stats: &Stats, req: &Request) -> Plan {
    let b = Behaviour::parse(&req.model).unwrap();
    plan::plan_with(&b, req, &|key| stats.next_draw(key))
}

fn workflow(new_answer: bool, labels: &[&str]) -> Value {
    let mut tools = Vec::new();
    if new_answer {
        tools.push(json!({"type": "function", "function": {"name": "new_answer"}}));
    }
    if !labels.is_empty() {
        tools.push(
            json!({"type": "function", "function": {"name": "vote", "parameters":
            {"properties": {"agent_id": {"type": "string", "enum": labels}}}}}),
        );
    }
    Value::Array(tools)
}

/// The text of a plain reply, or the content / agent_id of its one tool call.
fn said(p: &Plan) -> String {
    match &p.reply {
        Reply::Text(t) => t.clone(),
        Reply::Tools(calls) => {
            assert_eq!(calls.len(), 1, "{calls:?}");
            let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            let field = if calls[0].name == "vote" {
                "agent_id"
            } else {
                "content"
            };
            args[field].as_str().unwrap().to_string()
        }
    }
}

/// The value of the `Answer:` line a reply ends with.
fn stated(p: &Plan) -> String {
    let text = said(p);
    let (_, last) = text.rsplit_once('\n').unwrap();
    last.strip_prefix("Answer: ")
        .unwrap_or_else(|| panic!("{text}"))
        .to_string()
}

const Q: &str = "What is 6 times 7? [sim:truth=42]";

#[test]
fn markers_distractors_and_values_are_read() {
    assert_eq!(truth_of("Q [sim:truth= Paris ] more"), Some("Paris"));
    assert_eq!(truth_of("Q [sim:truth= ]"), None);
    assert_eq!(truth_of("Q [sim:truth=open"), None);
    assert_eq!(truth_of("Q"), None);
    assert_eq!(distractor("42"), "43");
    assert_eq!(distractor("-1"), "0");
    assert_eq!(distractor("Paris"), "not Paris");
    assert_eq!(distractor("4.5"), "not 4.5");
    let max = i128::MAX.to_string();
    assert_eq!(distractor(&max), format!("not {max}"));
    let v = value_of("text\nAnswer: 1\n  VERDICT:  CORRECT \ntail").unwrap();
    assert_eq!((v.value.as_str(), v.kind), ("CORRECT", Kind::Verdict));
    assert_eq!(value_of("no value\nAnswer:  "), None);
    assert_eq!(normalise("  The   Eiffel\tTower.  "), "the eiffel tower");
    assert_eq!(normalise("Paris.."), "paris.");
}

#[test]
fn an_accuracy_of_0_7_is_right_about_70_percent_of_2000_identical_requests() {
    let stats = Stats::default();
    let req = request("m:accuracy=0.7", json!([]), Q);
    let right = (0..2000)
        .filter(|_| stated(&plan_in(&stats, &req)) == "42")
        .count();
    let rate = right as f64 / 2000.0;
    assert!((0.66..=0.74).contains(&rate), "{rate}");
    // Every wrong answer is the one distractor.
    let wrong = (0..200)
        .map(|_| stated(&plan_in(&stats, &req)))
        .filter(|v| v != "42")
        .collect::<Vec<_>>();
    assert!(
        !wrong.is_empty() && wrong.iter().all(|v| v == "43"),
        "{wrong:?}"
    );
}

#[test]
fn different_seeds_draw_different_sequences_and_a_seed_repeats_its_own() {
    let sequence = |model: &str| {
        let stats = Stats::default();
        let req = request(model, json!([]), Q);
        (0..64)
            .map(|_| stated(&plan_in(&stats, &req)))
            .collect::<Vec<_>>()
    };
    let (a, b) = (
        sequence("m:accuracy=0.5,seed=1"),
        sequence("m:accuracy=0.5,seed=2"),
    );
    assert_ne!(a, b);
    assert_eq!(a, sequence("m:accuracy=0.5,seed=1"));
    let draws = |seed| (0..64).map(|n| draw(seed, "m", Q, n)).collect::<Vec<_>>();
    assert_ne!(draws(0), draws(1));
    assert!(draws(0).iter().all(|u| (0.0..1.0).contains(u)));
}

#[test]
fn five_identical_requests_draw_five_times() {
    let stats = Stats::default();
    let req = request("m:accuracy=0.5", json!([]), Q);
    let values: Vec<String> = (0..5).map(|_| stated(&plan_in(&stats, &req))).collect();
    assert!(values.iter().any(|v| v == "42"), "{values:?}");
    assert!(values.iter().any(|v| v == "43"), "{values:?}");
    assert_eq!(stats.next_draw(&counter_key(&req.model, Q)), 5);
    // Without a counter every request makes the pair's first draw: the same value.
    let b = Behaviour::parse(&req.model).unwrap();
    let first = stated(&plan::plan(&b, &req));
    assert!((0..5).all(|_| stated(&plan::plan(&b, &req)) == first));
}

#[test]
fn accuracy_1_is_always_right_and_0_always_wrong() {
    let stats = Stats::default();
    let coordination = "<original_message>Capital of France? [sim:truth=Paris]</original_message>";
    for _ in 0..50 {
        let right = plan_in(&stats, &request("m:accuracy=1", json!([]), Q));
        assert_eq!(stated(&right), "42");
        let wrong = plan_in(&stats, &request("m:accuracy=0", json!([]), Q));
        assert_eq!(stated(&wrong), "43");
        // A coordination turn's `new_answer`, after the usual simulated text.
        let p = plan_in(
            &stats,
            &request("m:accuracy=0", workflow(true, &[]), coordination),
        );
        assert!(said(&p).starts_with("[simulated] "), "{}", said(&p));
        assert_eq!(stated(&p), "not Paris");
    }
}

#[test]
fn without_accuracy_or_marker_answers_are_unchanged() {
    let stats = Stats::default();
    for (model, user) in [("m", Q), ("m:accuracy=1", "What is 6 times 7?")] {
        let p = plan_in(&stats, &request(model, json!([]), user));
        let usual = crate::text::final_answer(&format!("{model}\n{user}"), user, 30);
        assert_eq!(said(&p), usual);
    }
    // No draw was made for either.
    assert_eq!(
        stats.next_draw(&counter_key("m:accuracy=1", "What is 6 times 7?")),
        0
    );
    // Structured output stays JSON.
    let body = json!({"model": "m:accuracy=1", "messages": [{"role": "user", "content": Q}],
        "response_format": {"type": "json_object"}});
    let req = plan::parse_request(body.to_string().as_bytes()).unwrap();
    let text = said(&plan_in(&stats, &req));
    assert!(serde_json::from_str::<Value>(&text).is_ok(), "{text}");
}

#[test]
fn a_forced_new_answer_draws_once() {
    let stats = Stats::default();
    let user = format!(
        "<original_message>{Q}</original_message>\n<current_answers>\n\
         <answer label=\"agent1\">\nAnswer: 43\n</answer>\n</current_answers>"
    );
    let body = json!({"model": "m:accuracy=1", "tools": workflow(true, &["agent1"]),
        "tool_choice": {"type": "function", "function": {"name": "new_answer"}},
        "messages": [{"role": "user", "content": user}]});
    let req = plan::parse_request(body.to_string().as_bytes()).unwrap();
    let p = plan_in(&stats, &req);
    assert!(matches!(&p.reply, Reply::Tools(c) if c[0].name == "new_answer"));
    assert_eq!(stated(&p), "42");
    assert_eq!(stats.next_draw(&counter_key(&req.model, Q)), 1);
}

fn answers(blocks: &[(&str, &str)], tail: &str) -> String {
    let mut out = format!("<original_message>{Q}</original_message>\n<current_answers>\n");
    for (label, text) in blocks {
        out.push_str(&format!("<answer label=\"{label}\">\n{text}\n</answer>\n"));
    }
    out + "</current_answers>" + tail
}

#[test]
fn votes_go_to_the_majority_value() {
    let stats = Stats::default();
    let prompt = answers(
        &[
            ("agent1", "[simulated] x\nAnswer: 43"),
            ("agent2", "[simulated] y\nAnswer: 42"),
            ("agent3", "[simulated] z\nAnswer: 42."),
        ],
        "",
    );
    let labels = ["agent1", "agent2", "agent3"];
    // Vote without a draw, whatever the accuracy.
    for model in ["m:accuracy=0", "m:accuracy=1,vote=last"] {
        let p = plan_in(&stats, &request(model, workflow(true, &labels), &prompt));
        assert_eq!(said(&p), "agent2", "{model}");
    }
    assert_eq!(stats.next_draw(&counter_key("m:accuracy=0", Q)), 0);
    // Without accuracy: the usual choice.
    let p = plan_in(
        &stats,
        &request("m:vote=last", workflow(true, &labels), &prompt),
    );
    assert_eq!(said(&p), "agent3");
    // A tie goes to the value shown first; answers without a value do not count.
    let tie = answers(
        &[
            ("agent1", "no value"),
            ("agent2", "Answer: 43"),
            ("agent3", "Answer: 42"),
        ],
        "",
    );
    let p = plan_in(
        &stats,
        &request("m:accuracy=1", workflow(true, &labels), &tie),
    );
    assert_eq!(said(&p), "agent2");
    // Only offered labels are voted for.
    let p = plan_in(
        &stats,
        &request("m:accuracy=1", workflow(true, &["agent1", "agent3"]), &tie),
    );
    assert_eq!(said(&p), "agent3");
    // No value anywhere: the usual choice.
    let none = answers(&[("agent1", "a"), ("agent2", "b")], "");
    let p = plan_in(
        &stats,
        &request(
            "m:accuracy=1,vote=last",
            workflow(true, &labels[..2]),
            &none,
        ),
    );
    assert_eq!(said(&p), "agent2");
    // The misbehaving policies keep misbehaving.
    let p = plan_in(
        &stats,
        &request(
            "m:accuracy=1,policy=bad_vote",
            workflow(true, &labels),
            &prompt,
        ),
    );
    assert_eq!(said(&p), "agent99");
}

#[test]
fn a_presentation_restates_its_own_answer_without_a_draw() {
    let stats = Stats::default();
    let blocks = [
        ("agent1", "[simulated] a\nAnswer: 42"),
        ("agent2", "[simulated] b\nAnswer: 43"),
        ("agent3", "[simulated] c\nAnswer: 42"),
    ];
    let own = answers(
        &blocks,
        "\nYour own answer is the one labelled agent2.\n<votes>\n</votes>",
    );
    for model in ["m:accuracy=1", "m:accuracy=0"] {
        let text = said(&plan_in(&stats, &request(model, json!(null), &own)));
        assert!(text.starts_with("[simulated final answer] "), "{text}");
        assert!(text.ends_with("\nAnswer: 43"), "{text}");
        assert_eq!(stats.next_draw(&counter_key(model, Q)), 0);
    }
    // No own answer named: the most common value.
    let text = said(&plan_in(
        &stats,
        &request("m:accuracy=0", json!(null), &answers(&blocks, "")),
    ));
    assert!(text.ends_with("\nAnswer: 42"), "{text}");
    // A judges' presentation restates a verdict.
    let verdicts = answers(
        &[("agent1", "[simulated judge] x\nVERDICT: CORRECT")],
        "\nYour own answer is the one labelled agent1.",
    );
    let text = said(&plan_in(
        &stats,
        &request("j:policy=judge", json!(null), &verdicts),
    ));
    assert!(text.ends_with("\nVERDICT: CORRECT"), "{text}");
    // Without accuracy: unchanged.
    let text = said(&plan_in(&stats, &request("m", json!(null), &own)));
    assert!(!text.contains("Answer:"), "{text}");
}

fn graded(reference: &str, candidate: &str) -> String {
    format!(
        "Grade it.\n<reference_answer>{reference}</reference_answer>\n\
         <candidate_answer>{candidate}</candidate_answer>"
    )
}

#[test]
fn the_judge_compares_normalised_values() {
    let stats = Stats::default();
    let verdict =
        |model: &str, user: &str| said(&plan_in(&stats, &request(model, json!([]), user)));
    let right = graded("Paris", "[simulated] long text\nAnswer:  paris. ");
    let wrong = graded("Paris", "[simulated] long text\nAnswer: not Paris");
    let whole = graded(" The  Eiffel Tower.", "the eiffel tower");
    assert_eq!(
        verdict("j:policy=judge", &right),
        "[simulated judge] the candidate matches the reference\nVERDICT: CORRECT"
    );
    assert!(verdict("j:policy=judge", &wrong).ends_with("\nVERDICT: INCORRECT"));
    assert!(verdict("j:policy=judge", &whole).ends_with("\nVERDICT: CORRECT"));
    // With accuracy 0 always the wrong verdict, with 1 always the right one.
    for _ in 0..20 {
        assert!(verdict("j:policy=judge,accuracy=0", &right).ends_with("VERDICT: INCORRECT"));
        assert!(verdict("j:policy=judge,accuracy=0", &wrong).ends_with("VERDICT: CORRECT"));
        assert!(verdict("j:policy=judge,accuracy=1", &wrong).ends_with("VERDICT: INCORRECT"));
    }
    // A coin-flip judge gives both verdicts on one question.
    let flips: Vec<String> = (0..20)
        .map(|_| verdict("j:policy=judge,accuracy=0.5", &right))
        .collect();
    assert!(flips.iter().any(|v| v.ends_with(" CORRECT")), "{flips:?}");
    assert!(flips.iter().any(|v| v.ends_with(" INCORRECT")), "{flips:?}");
    // Missing tags.
    assert_eq!(
        verdict(
            "j:policy=judge",
            "Grade <reference_answer>x</reference_answer>"
        ),
        "[simulated judge] no reference or candidate answer\nVERDICT: INCORRECT"
    );
}

#[test]
fn the_judge_answers_and_votes_in_a_coordination() {
    let stats = Stats::default();
    let question = graded("42", "Answer: 42");
    let turn = format!("<original_message>{question}</original_message>");
    let p = plan_in(
        &stats,
        &request("j:policy=judge", workflow(true, &[]), &turn),
    );
    assert!(matches!(&p.reply, Reply::Tools(c) if c[0].name == "new_answer"));
    assert!(said(&p).ends_with("\nVERDICT: CORRECT"), "{}", said(&p));
    let shown = format!(
        "{turn}\n<current_answers>\n<answer label=\"agent1\">\nVERDICT: INCORRECT\n</answer>\n\
         <answer label=\"agent2\">\nVERDICT: CORRECT\n</answer>\n\
         <answer label=\"agent3\">\nVERDICT: CORRECT\n</answer>\n</current_answers>"
    );
    let labels = ["agent1", "agent2", "agent3"];
    let p = plan_in(
        &stats,
        &request("j:policy=judge", workflow(true, &labels), &shown),
    );
    assert_eq!(said(&p), "agent2");
}
