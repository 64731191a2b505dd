//! The request fields and response metadata of issue 10 through the real binary and the
//! simulator: `massgen.voting_quorum`, cost in USD, budgets.

use serde_json::{Value, json};

use crate::support::{Setup, chat, get, get_json, panel_yaml, post, priced_panel, sample};

/// agent3 is slow: its vote comes long after the other two.
const STAGGERED: [&str; 3] = [
    "alpha:ttft_ms=20,token_ms=1,vote=agent1",
    "beta:ttft_ms=40,token_ms=1,vote=agent1",
    "gamma:ttft_ms=600,token_ms=1,vote=agent1",
];

fn ask(massgen: Value) -> Value {
    json!({
        "model": "massgen",
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "massgen": massgen,
    })
}

#[tokio::test]
async fn a_request_can_ask_for_a_majority_quorum() {
    let s = Setup::with_panel(|url| panel_yaml(url, &STAGGERED, ""), &[]);
    let body: Value = chat(
        &s.server.url,
        None,
        &ask(json!({"voting_quorum": "majority"})),
    )
    .await
    .json()
    .await
    .unwrap();
    let meta = &body["massgen_metadata"];
    assert_eq!(meta["consensus_reason"], "quorum", "{meta}");
    assert_eq!(meta["winner"]["label"], "agent1");
    assert_eq!(meta["cut_agents"][0]["label"], "agent3", "{meta}");
    let reasoning = body["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap();
    assert!(
        reasoning.contains("[massgen] quorum: agent1 wins (agent1=2); cut: agent3"),
        "{reasoning}"
    );

    // Without it the panel's default (all) waits for every vote.
    let body: Value = chat(&s.server.url, None, &ask(json!({})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["massgen_metadata"]["consensus_reason"], "converged");
    assert_eq!(body["massgen_metadata"]["cut_agents"], json!([]));

    let bad = chat(&s.server.url, None, &ask(json!({"voting_quorum": "most"}))).await;
    assert_eq!(bad.status(), 400);
    let error: Value = bad.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_value");
    assert_eq!(error["error"]["param"], "massgen.voting_quorum");
}

/// Without deferral agent1's vote turn (from about 0.25 s to 0.45 s) sees only its own
/// answer; agent2's answer at about 0.35 s makes it stale.
const RESTARTING: [&str; 2] = [
    "alpha:ttft_ms=200,token_ms=1,vote=agent1",
    "beta:ttft_ms=300,token_ms=1,vote=agent1",
];

/// The same question on every door, each response's `massgen_metadata`.
async fn on_every_door(url: &str) -> Vec<(&'static str, Value)> {
    let question = "Why is the sky blue?";
    let bodies = [
        (
            "/v1/chat/completions",
            json!({"model": "massgen", "messages": [{"role": "user", "content": question}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "massgen", "input": question}),
        ),
        (
            "/v1/messages",
            json!({"model": "massgen", "max_tokens": 1000, "messages": [{"role": "user", "content": question}]}),
        ),
    ];
    let mut out = Vec::new();
    for (path, body) in bodies {
        let response = post(url, path, None, &body).await;
        assert_eq!(response.status(), 200, "{path}");
        let body: Value = response.json().await.unwrap();
        out.push((path, body["massgen_metadata"].clone()));
    }
    out
}

#[tokio::test]
async fn a_stale_turn_restart_is_counted_alike_on_every_door_in_the_record_and_metrics() {
    let s = Setup::with_panel(
        |url| {
            panel_yaml(
                url,
                &RESTARTING,
                "orchestrator:\n  defer_voting_until_all_answered: false\n",
            )
        },
        &[],
    );
    let metas = on_every_door(&s.server.url).await;
    for (door, meta) in &metas {
        let agents = meta["agents"].as_array().unwrap();
        let (a1, a2) = (&agents[0], &agents[1]);
        assert_eq!(a1["label"], "agent1", "{door}: {meta}");
        assert_eq!(a1["restarts"], 1, "{door}: {meta}");
        assert_eq!(a2["restarts"], 0, "{door}: {meta}");
        // agent1: its answer, the cancelled vote, the fresh vote and the presentation.
        assert_eq!(a1["calls"], 4, "{door}: {meta}");
        assert_eq!(a2["calls"], 2, "{door}: {meta}");
        assert_eq!(meta["winner"]["label"], "agent1");
        let id = meta["session_id"].as_str().unwrap();
        let record = get_json(&format!("{}/v1/sessions/{id}", s.server.url)).await;
        assert_eq!(record["agents"][0]["restarts"], 1, "{door}: {record}");
    }
    let text = get(&format!("{}/metrics", s.server.url), None)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        sample(
            &text,
            "massgen_upstream_calls_cancelled_total",
            &[("reason", "restart")]
        ),
        Some(3.0),
        "{text}"
    );
}

/// `panel_yaml` with the same `pricing` on every agent.
fn cost_of(usage: &Value) -> f64 {
    let n = |k: &str| usage[k].as_u64().unwrap() as f64;
    let cached = n("cached_input_tokens");
    ((n("input_tokens") - cached) * 2.0 + cached * 0.5 + n("output_tokens") * 8.0) / 1e6
}

#[tokio::test]
async fn cost_in_usd_per_agent_and_session_alike_on_every_door_in_the_record_and_metrics() {
    let s = Setup::with_panel(|url| priced_panel(url, &STAGGERED, ""), &[]);
    let mut spent = 0.0;
    for (door, meta) in on_every_door(&s.server.url).await {
        let mut total = 0.0;
        for agent in meta["agents"].as_array().unwrap() {
            let cost = agent["cost_usd"].as_f64().unwrap();
            assert!(
                (cost - cost_of(&agent["usage"])).abs() < 1e-12,
                "{door}: {agent}"
            );
            total += cost;
        }
        let session = meta["cost_usd"].as_f64().unwrap();
        assert!(
            session > 0.0 && (session - total).abs() < 1e-12,
            "{door}: {meta}"
        );
        spent += session;
        let id = meta["session_id"].as_str().unwrap();
        let record = get_json(&format!("{}/v1/sessions/{id}", s.server.url)).await;
        let recorded = record["cost_usd"].as_f64().unwrap();
        assert!((recorded - session).abs() < 1e-12, "{door}: {record}");
    }

    // A model chosen by the request is priced from the list (unknown here: null, not 0)
    // and is not a label value of the cost metric.
    let mut by_request = ask(json!({}));
    by_request["model"] = json!("massgen/model:other-sim");
    let body: Value = chat(&s.server.url, None, &by_request)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["massgen_metadata"]["cost_usd"], Value::Null);
    assert_eq!(
        body["massgen_metadata"]["agents"][0]["cost_usd"],
        Value::Null
    );

    let metrics = get(&format!("{}/metrics", s.server.url), None)
        .await
        .text()
        .await
        .unwrap();
    let family = "massgen_cost_usd_total";
    let by_model: f64 = STAGGERED
        .iter()
        .map(|m| {
            sample(
                &metrics,
                family,
                &[("agent_backend", "chatcompletion"), ("model", m)],
            )
        })
        .map(|v| v.unwrap_or_else(|| panic!("no {family} line in:\n{metrics}")))
        .sum();
    assert!((by_model - spent).abs() < 1e-9, "{by_model} vs {spent}");
    assert!(!metrics.contains("other-sim"), "{metrics}");
}

#[tokio::test]
async fn a_spent_budget_presents_the_best_answer_so_far_on_every_door() {
    // The first answer alone costs more than a millionth of a dollar at these prices.
    let s = Setup::with_panel(
        |url| priced_panel(url, &STAGGERED, ""),
        &["--max-session-cost-usd", "0.000001"],
    );
    for (door, meta) in on_every_door(&s.server.url).await {
        assert_eq!(meta["consensus_reason"], "budget", "{door}: {meta}");
        assert_eq!(meta["budget_exhausted"], true, "{door}");
        assert_eq!(meta["max_cost_usd"], 0.000001, "{door}");
        assert_eq!(meta["presentation"], "skipped", "{door}");
        assert_eq!(
            meta["winner"]["label"], "agent1",
            "{door}: the first to answer"
        );
        assert!(
            meta["cost_usd"].as_f64().unwrap() >= 0.000001,
            "{door}: {meta}"
        );
        let id = meta["session_id"].as_str().unwrap();
        let record = get_json(&format!("{}/v1/sessions/{id}", s.server.url)).await;
        assert_eq!(
            record["budget_exhausted"]["max_cost_usd"], 0.000001,
            "{record}"
        );
    }
    // A request may lower the server's limit, never raise it.
    let body: Value = chat(&s.server.url, None, &ask(json!({"max_cost_usd": 5})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["massgen_metadata"]["max_cost_usd"], 0.000001);
    let bad = chat(&s.server.url, None, &ask(json!({"max_cost_usd": -1}))).await;
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn a_limit_on_a_panel_without_prices_is_refused_not_ignored() {
    let s = Setup::with_panel(|url| panel_yaml(url, &STAGGERED, ""), &[]);
    let response = chat(&s.server.url, None, &ask(json!({"max_cost_usd": 1}))).await;
    assert_eq!(response.status(), 503);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("has no price") && message.contains("backend.pricing"),
        "{message}"
    );
}
