//! One session across four wire formats: the real binary with a panel of a Chat
//! Completions agent, an OpenAI Responses agent (`openai`), an Anthropic agent (`claude`)
//! and a Gemini agent, all on the real simulator over loopback.

use serde_json::Value;

use crate::support::{
    Setup, assert_usage_is_the_simulators, chat, mock_stats, parse_sse, question,
};

fn setup(models: [&str; 4]) -> Setup {
    let [cc, gpt, claude, gemini] = models;
    Setup::with_panel(
        |url| {
            format!(
        "agents:
  - id: cc
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", model: \"{cc}\"}}
  - id: gpt
    backend: {{type: openai, base_url: \"{url}/v1\", api_key: sim, model: \"{gpt}\", reasoning: {{effort: low}}}}
  - id: claude
    backend: {{type: claude, base_url: \"{url}/v1\", api_key: sim, model: \"{claude}\", max_tokens: 4096}}
  - id: gemini
    backend: {{type: gemini, base_url: \"{url}/v1beta\", api_key: sim, model: \"{gemini}\", temperature: 0.3}}
retry:
  max_attempts: 3
  initial_backoff_ms: 10
  max_backoff_ms: 50
"
    )
        },
        &[],
    )
}

fn assert_usage_matches(usage: &Value, stats: &Value) {
    assert_usage_is_the_simulators(usage, stats);
    assert!(stats["completion_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn four_wire_formats_one_streamed_session() {
    let s = setup([
        "cc:ttft_ms=10,token_ms=1",
        "gpt:ttft_ms=20,token_ms=1,reasoning=on",
        "claude:ttft_ms=30,token_ms=1,reasoning=on",
        "gem:ttft_ms=40,token_ms=1,reasoning=on",
    ]);
    let response = chat(&s.server.url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    let sse = parse_sse(&response.text().await.unwrap());
    assert!(sse.done);
    let answer = sse.content();
    assert!(
        answer.starts_with("[simulated final answer]"),
        "{answer:?}\n{}",
        sse.reasoning()
    );
    let deliberation = sse.reasoning();
    for label in ["agent1", "agent2", "agent3", "agent4"] {
        assert!(
            deliberation.contains(&format!("[{label}] answered")),
            "{label} missing:\n{deliberation}"
        );
    }
    assert!(deliberation.contains("consensus"), "{deliberation}");
    let usage = &sse.events.last().unwrap()["usage"];
    let stats = mock_stats(&s.mock).await;
    assert_usage_matches(usage, &stats);
    // Every family was really called, and nothing failed or was left hanging.
    for name in ["cc", "gpt", "claude", "gem"] {
        let model = &stats["by_model"][name];
        assert!(model["completed"].as_u64().unwrap() >= 2, "{name}: {stats}");
        assert_eq!(model["faulted"], 0, "{name}: {stats}");
    }
    assert_eq!(stats["active"], 0, "{stats}");
}

#[tokio::test]
async fn native_retries_and_invalid_turn_replays_keep_usage_exact() {
    // claude: one 429 (retried after retry-after-ms); gemini: one 503 (retried with
    // backoff); gpt: always an invalid vote, so its turns are replayed with the tool
    // results until it drops out.
    let s = setup([
        "cc:ttft_ms=10,token_ms=1",
        "gpt:ttft_ms=10,token_ms=1,policy=bad_vote",
        "claude:ttft_ms=10,token_ms=1,fault=429,fault_times=1,retry_after_ms=20",
        "gem:ttft_ms=10,token_ms=1,fault=503,fault_times=1",
    ]);
    let response = chat(&s.server.url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer.starts_with("[simulated final answer]"), "{body}");
    let stats = mock_stats(&s.mock).await;
    assert_usage_matches(&body["usage"], &stats);
    assert_eq!(stats["by_model"]["claude"]["faulted"], 1, "{stats}");
    assert_eq!(stats["by_model"]["gem"]["faulted"], 1, "{stats}");
    let agents = body["massgen_metadata"]["agents"].as_array().unwrap();
    let gpt = agents.iter().find(|a| a["agent_id"] == "gpt").unwrap();
    assert_eq!(gpt["failed"], true, "{gpt}");
    assert_eq!(gpt["error"]["kind"], "invalid_turns", "{gpt}");
    assert!(gpt["usage"]["input_tokens"].as_u64().unwrap() > 0, "{gpt}");
    // The replays reached the simulator: more gpt requests than turns started.
    assert!(
        stats["by_model"]["gpt"]["requests"].as_u64().unwrap() >= 3,
        "{stats}"
    );
}

#[tokio::test]
async fn native_upstream_errors_reach_the_metadata_with_their_kind_and_status() {
    // Context overflow from three families, each in its own error shape; the Chat
    // Completions agent carries the session.
    let s = setup([
        "cc:ttft_ms=10,token_ms=1",
        "gpt:fault=context",
        "claude:fault=context",
        "gem:fault=context",
    ]);
    let response = chat(&s.server.url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let agents = body["massgen_metadata"]["agents"].as_array().unwrap();
    for (id, provider) in [
        ("gpt", "openai"),
        ("claude", "claude"),
        ("gemini", "gemini"),
    ] {
        let agent = agents.iter().find(|a| a["agent_id"] == id).unwrap();
        let error = &agent["error"];
        assert_eq!(error["kind"], "upstream", "{agent}");
        assert_eq!(error["upstream_kind"], "context_length", "{agent}");
        assert_eq!(error["status"], 400, "{agent}");
        assert_eq!(error["provider"], provider, "{agent}");
    }
    let stats = mock_stats(&s.mock).await;
    // Context errors are not retried: one request each.
    for name in ["gpt", "claude", "gem"] {
        assert_eq!(stats["by_model"][name]["requests"], 1, "{name}: {stats}");
    }
    assert_usage_matches(&body["usage"], &stats);
}
