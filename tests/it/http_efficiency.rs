//! The request fields and response metadata of issue 10 through the real binary and the
//! simulator: `massgen.voting_quorum`, cost in USD, budgets.

use serde_json::{Value, json};

use crate::support::{Setup, chat, panel_yaml};

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
