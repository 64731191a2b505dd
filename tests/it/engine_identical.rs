//! A `new_answer` identical to a current answer is a vote for its author (issue 26): a panel
//! of one deterministic simulator model through the real binary. The engine's side, with
//! scripted providers, is `crates/massgen-core/tests/engine/identical.rs`.

use serde_json::Value;

use crate::support::{Setup, chat, mock_stats, panel_yaml, question};

/// Three agents of one deterministic simulator model write the same first answer.
#[tokio::test]
async fn a_panel_of_one_simulated_model_finishes_without_retries() {
    let same = ["sim-a:ttft_ms=5,token_ms=1"; 3];
    let s = Setup::with_panel(|url| panel_yaml(url, &same, ""), &[]);
    let response = chat(&s.server.url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let meta = &body["massgen_metadata"];
    let agents = meta["agents"].as_array().unwrap();
    assert!(agents.iter().all(|a| a["failed"] == false), "{meta}");
    assert_eq!(meta["consensus_reason"], "converged", "{meta}");
    assert_eq!(meta["answers"].as_array().unwrap().len(), 1, "{meta}");
    // Whoever finished first answered (the three are equally fast); the other two repeated
    // it in turns that saw no answer (discarded votes), then all three voted and the author
    // presented: 1 + 2 + 2 + 1 + 1.
    assert_eq!(mock_stats(&s.mock).await["requests"], 7, "{meta}");
    let winner = meta["winner"]["label"].as_str().unwrap();
    let reasoning = body["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap_or_default();
    for label in ["agent1", "agent2", "agent3"]
        .into_iter()
        .filter(|l| *l != winner)
    {
        assert!(
            reasoning.contains(&format!("[{label}] vote for {winner} ignored")),
            "{reasoning}"
        );
    }
    assert!(!reasoning.contains("invalid turn"), "{reasoning}");
}
