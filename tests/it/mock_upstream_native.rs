//! The simulator's native wire formats (Responses, Anthropic Messages, Gemini) over real
//! loopback HTTP: the same model-name behaviour, each format's own shapes, exact usage.

use serde_json::{Value, json};

use crate::support::{mock_stats_at, simulator_in_process};

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// `data:` payloads of an SSE body (either framing).
fn payloads(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn vote_schema() -> Value {
    json!({"type": "object", "properties": {"agent_id": {"type": "string",
        "enum": ["agent1", "agent3"]}, "reason": {"type": "string"}}})
}

#[tokio::test]
async fn responses_stream_votes_with_exact_usage() {
    let (base, _stop, _) = simulator_in_process().await;
    // "sys!" + "abcdefgh" = 12 chars -> 3 prompt tokens.
    let body = json!({"model": "r:vote=last,ttft_ms=0,token_ms=0", "stream": true,
        "instructions": "sys!", "input": [{"role": "user", "content": "abcdefgh"}],
        "tools": [{"type": "function", "name": "vote", "parameters": vote_schema()}]});
    let response = post(&format!("{base}/v1/responses"), &body).await;
    assert_eq!(response.status(), 200);
    let events = payloads(&response.text().await.unwrap());
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "response.created");
    assert_eq!(*kinds.last().unwrap(), "response.completed");
    let args: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap()["agent_id"],
        "agent3"
    );
    let usage = &events.last().unwrap()["response"]["usage"];
    assert_eq!(usage["input_tokens"], 3);
    let s = mock_stats_at(&base).await;
    assert_eq!(s["prompt_tokens"], 3);
    assert_eq!(s["completion_tokens"], usage["output_tokens"]);
}

#[tokio::test]
async fn anthropic_stream_thinking_text_and_faults() {
    let (base, _stop, _) = simulator_in_process().await;
    let body = json!({"model": "a:reasoning=on,ttft_ms=0,token_ms=0,words=5", "max_tokens": 100,
        "stream": true, "system": "s", "messages": [{"role": "user", "content": "Q?"}]});
    let response = post(&format!("{base}/v1/messages"), &body).await;
    let events = payloads(&response.text().await.unwrap());
    let signature = events
        .iter()
        .find(|e| e["delta"]["type"] == "signature_delta")
        .unwrap();
    assert!(!signature["delta"]["signature"].as_str().unwrap().is_empty());
    let text: String = events
        .iter()
        .filter(|e| e["delta"]["type"] == "text_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    assert!(text.starts_with("[simulated final answer]"), "{text}");
    let delta = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(events.last().unwrap()["type"], "message_stop");
    // 503 is Anthropic's 529 overloaded_error; a missing max_tokens is a 400.
    let overloaded = json!({"model": "a:fault=503", "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}]});
    let response = post(&format!("{base}/v1/messages"), &overloaded).await;
    assert_eq!(response.status().as_u16(), 529);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "overloaded_error");
    let missing = json!({"model": "a", "messages": []});
    let response = post(&format!("{base}/v1/messages"), &missing).await;
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(response.json::<Value>().await.unwrap()["type"], "error");
}

#[tokio::test]
async fn gemini_stream_non_stream_and_retry_info() {
    let (base, _stop, _) = simulator_in_process().await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Q?"}]}],
        "tools": [{"functionDeclarations": [
            {"name": "new_answer", "parameters": {"type": "object"}},
            {"name": "vote", "parameters": vote_schema()}]}]});
    let url = format!(
        "{base}/v1beta/models/g:ttft_ms=0,token_ms=0,policy=double_vote:streamGenerateContent?alt=sse"
    );
    let text = post(&url, &body).await.text().await.unwrap();
    assert!(text.contains("\r\n\r\n"), "Gemini framing");
    let chunks = payloads(&text);
    let calls: Vec<&Value> = chunks
        .iter()
        .flat_map(|c| c["candidates"][0]["content"]["parts"].as_array().unwrap())
        .filter(|p| p.get("functionCall").is_some())
        .collect();
    assert_eq!(calls.len(), 2, "both calls in one chunk");
    assert!(calls[0]["thoughtSignature"].is_string());
    assert_eq!(
        chunks.last().unwrap()["candidates"][0]["finishReason"],
        "STOP"
    );
    assert!(chunks.iter().all(|c| c["usageMetadata"].is_object()));

    let url = format!("{base}/v1beta/models/g:ttft_ms=0,token_ms=0:generateContent");
    let full: Value = post(&url, &body).await.json().await.unwrap();
    assert!(full["candidates"][0]["content"]["parts"][0]["functionCall"].is_object());

    let url =
        format!("{base}/v1beta/models/g:fault=429,retry_after=3:streamGenerateContent?alt=sse");
    let response = post(&url, &body).await;
    assert_eq!(response.status().as_u16(), 429);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(error["error"]["details"][0]["retryDelay"], "3s");

    let wrong = format!("{base}/v1beta/models/g:countTokens");
    assert_eq!(post(&wrong, &body).await.status().as_u16(), 404);
}
