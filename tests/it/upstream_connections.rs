//! Plain HTTP/1.1 upstreams (`http://`, massgen's own client): calls reuse their
//! connections, in every wire format, whether the format ends its stream with a last event
//! (`[DONE]`, `message_stop`, `response.completed`) or with the body's end (Gemini).

use serde_json::Value;

use crate::support::{Setup, chat, mock_stats, question};

#[tokio::test]
async fn sessions_one_after_another_reuse_their_upstream_connections() {
    let s = Setup::with_panel(
        |url| {
            format!(
                "agents:
  - id: cc
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", model: \"cc:ttft_ms=5,token_ms=1\"}}
  - id: gpt
    backend: {{type: openai, base_url: \"{url}/v1\", api_key: sim, model: \"gpt:ttft_ms=5,token_ms=1\"}}
  - id: claude
    backend: {{type: claude, base_url: \"{url}/v1\", api_key: sim, model: \"claude:ttft_ms=5,token_ms=1\"}}
  - id: gemini
    backend: {{type: gemini, base_url: \"{url}/v1beta\", api_key: sim, model: \"gem:ttft_ms=5,token_ms=1\"}}
retry:
  max_attempts: 1
"
            )
        },
        &[],
    );
    for _ in 0..4 {
        let response = chat(&s.server.url, None, &question(false)).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let agents = body["massgen_metadata"]["agents"]
            .as_array()
            .unwrap()
            .clone();
        assert!(agents.iter().all(|a| a["failed"] == false), "{body}");
    }
    let stats = mock_stats(&s.mock).await;
    let calls = stats["requests"].as_u64().unwrap();
    let connections = stats["connections"].as_u64().unwrap();
    assert!(calls >= 20, "{stats}");
    // Four agents call at once: four connections would do. A closed connection per call
    // (a body not read to its end) would make one per call.
    assert!(
        connections <= 8,
        "{connections} connections for {calls} calls: {stats}"
    );
}
