//! Images through the real binary: a panel with one seeing agent per wire format and one
//! agent that cannot see images, on the simulator served in this process behind a layer
//! that records every upstream body, so each wire format's native image form is checked
//! as the upstream received it.

use std::sync::{Arc, Mutex};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use serde_json::{Value, json};

use crate::support::native::PNG_BASE64;
use crate::support::{Proc, get_json, parse_sse, post, serve, write};

/// `(path, body)` of every upstream request.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

async fn record(State(seen): State<Seen>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    seen.lock()
        .unwrap()
        .push((parts.uri.path().to_string(), json));
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

struct Panel {
    server: Proc,
    seen: Seen,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Panel {
    /// The bodies the upstream received for models whose name starts with `name` (Gemini's
    /// model is in the path, one percent-encoded segment: `:` is `%3A`).
    fn bodies_of(&self, name: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, body)| {
                body["model"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("{name}:")))
                    || path.starts_with(&format!("/v1beta/models/{name}%3A"))
            })
            .map(|(_, body)| body.clone())
            .collect()
    }
}

/// Four seeing agents (Chat Completions, Responses, Anthropic, Gemini) and a blind one.
async fn panel() -> Panel {
    let seen: Seen = Arc::default();
    let router = massgen_simulator::router()
        .layer(middleware::from_fn_with_state(Arc::clone(&seen), record));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    let dir = tempfile::tempdir().unwrap();
    let fast = "ttft_ms=5,token_ms=1";
    let config = write(
        dir.path(),
        "team.yaml",
        &format!(
            "agents:
  - id: cc
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", model: \"cc:{fast}\", vision: true}}
  - id: gpt
    backend: {{type: openai, base_url: \"{url}/v1\", api_key: sim, model: \"gpt:{fast}\", vision: true}}
  - id: claude
    backend: {{type: claude, base_url: \"{url}/v1\", api_key: sim, model: \"claude:{fast}\", vision: true}}
  - id: gemini
    backend: {{type: gemini, base_url: \"{url}/v1beta\", api_key: sim, model: \"gem:{fast}\", vision: true}}
  - id: blind
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", model: \"blind:{fast}\"}}
"
        ),
    );
    let config = config.display().to_string();
    let server = tokio::task::spawn_blocking(move || serve(&["--config", &config]))
        .await
        .unwrap();
    Panel {
        server,
        seen,
        _dir: dir,
        _stop: stop,
    }
}

fn data_url() -> String {
    format!("data:image/png;base64,{PNG_BASE64}")
}

/// Every seeing agent's requests carry both images in its wire format's own form; the
/// blind agent's carry none and say so; the deliberation and the record name who saw them.
async fn assert_images_reached_the_panel(p: &Panel, metadata: &Value, deliberation: &str) {
    assert!(
        deliberation.contains(
            "[massgen] 2 images shown to agent1, agent2, agent3, agent4; agent5 cannot see images"
        ),
        "{deliberation}"
    );
    let https = "https://example.com/cat.jpg";
    let cc = p.bodies_of("cc");
    assert!(!cc.is_empty());
    for body in &cc {
        let parts = body["messages"][1]["content"].as_array().unwrap();
        assert_eq!(parts[0]["type"], "text");
        assert_eq!(parts[1]["image_url"]["url"], data_url());
        assert_eq!(parts[2]["image_url"]["url"], https);
    }
    for name in ["gpt", "claude", "gem"] {
        assert!(!p.bodies_of(name).is_empty(), "{name} was called");
    }
    for body in &p.bodies_of("gpt") {
        let user = body["input"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["role"] == "user")
            .unwrap();
        let parts = user["content"].as_array().unwrap();
        assert_eq!(parts[1]["type"], "input_image");
        assert_eq!(parts[1]["image_url"], data_url());
        assert_eq!(parts[2]["image_url"], https);
    }
    for body in &p.bodies_of("claude") {
        let blocks = body["messages"][0]["content"].as_array().unwrap();
        assert_eq!(
            blocks[1]["source"],
            json!({"type": "base64", "media_type": "image/png", "data": PNG_BASE64})
        );
        assert_eq!(blocks[2]["source"], json!({"type": "url", "url": https}));
    }
    for body in &p.bodies_of("gem") {
        let parts = body["contents"][0]["parts"].as_array().unwrap();
        assert_eq!(
            parts[1]["inlineData"],
            json!({"mimeType": "image/png", "data": PNG_BASE64})
        );
        assert_eq!(
            parts[2]["fileData"],
            json!({"mimeType": "image/jpeg", "fileUri": https})
        );
    }
    let blind = p.bodies_of("blind");
    assert!(!blind.is_empty());
    for body in &blind {
        let user = &body["messages"][1]["content"];
        let text = user.as_str().expect("text only");
        assert!(text.contains("Your model cannot see images"), "{text}");
        assert!(text.contains("[image 1] [image 2]"), "{text}");
    }
    let id = metadata["session_id"].as_str().unwrap();
    let record = get_json(&format!("{}/v1/sessions/{id}", p.server.url)).await;
    assert_eq!(record["images"]["count"], 2, "{record}");
    assert_eq!(record["images"]["not_seen_by"][0]["agent_id"], "blind");
    assert_eq!(
        record["images"]["seen_by"].as_array().map(Vec::len),
        Some(4)
    );
}

#[tokio::test]
async fn chat_completions_images_reach_every_wire_format() {
    let p = panel().await;
    let body = json!({"model": "massgen", "stream": true, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What are these?"},
        {"type": "image_url", "image_url": {"url": data_url()}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}}
    ]}]});
    let response = post(&p.server.url, "/v1/chat/completions", None, &body).await;
    assert_eq!(response.status(), 200);
    let sse = parse_sse(&response.text().await.unwrap());
    let metadata = sse
        .events
        .iter()
        .find_map(|e| e.get("massgen_metadata"))
        .cloned()
        .expect("metadata chunk");
    assert_images_reached_the_panel(&p, &metadata, &sse.reasoning()).await;
    // OpenAI's `detail` reaches the OpenAI formats.
    let cc = p.bodies_of("cc");
    assert_eq!(
        cc[0]["messages"][1]["content"][2]["image_url"]["detail"],
        "low"
    );
}

#[tokio::test]
async fn chat_completions_refuses_bad_images_in_its_error_shape() {
    let p = panel().await;
    let ask = |content: Value| json!({"model": "massgen", "messages": [{"role": "user", "content": content}]});
    let big = format!(
        "data:image/png;base64,{}",
        "A".repeat(5 * 1024 * 1024 / 3 * 4 + 8)
    );
    let cases = [
        (json!([{"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]), "invalid_image_url", "https"),
        (json!([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]), "invalid_image_url", "https"),
        (json!([{"type": "image_url", "image_url": {"url": big}}]), "image_too_large", "5242880 bytes"),
        (json!([{"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lGODlh"}}]), "unsupported_image_type", "image/png"),
        (json!((0..21).map(|_| json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})).collect::<Vec<_>>()), "too_many_images", "at most 20"),
    ];
    for (content, code, names) in cases {
        let response = post(&p.server.url, "/v1/chat/completions", None, &ask(content)).await;
        assert_eq!(response.status(), 400, "{code}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{message}");
    }
    assert!(p.seen.lock().unwrap().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn responses_and_messages_images_reach_every_wire_format() {
    let https = "https://example.com/cat.jpg";
    let doors = [
        (
            "/v1/responses",
            json!({"model": "massgen", "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "What are these?"},
                {"type": "input_image", "image_url": data_url()},
                {"type": "input_image", "image_url": https, "detail": "low"}]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "massgen", "max_tokens": 1000, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What are these?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}},
                {"type": "image", "source": {"type": "url", "url": https}}]}]}),
        ),
    ];
    for (path, body) in doors {
        let p = panel().await;
        let response = post(&p.server.url, path, None, &body).await;
        assert_eq!(response.status(), 200, "{path}");
        let body: Value = response.json().await.unwrap();
        // The deliberation is in the door's own reasoning items or thinking blocks.
        let everything = body.to_string();
        assert_images_reached_the_panel(&p, &body["massgen_metadata"], &everything).await;
    }
}

#[tokio::test]
async fn responses_and_messages_refuse_bad_images_in_their_error_shapes() {
    let p = panel().await;
    let response = post(
        &p.server.url,
        "/v1/responses",
        None,
        &json!({"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://example.com/a.png"}]}]}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_image_url", "{body}");
    assert_eq!(body["error"]["param"], "input[0].content[0]", "{body}");
    let response = post(
        &p.server.url,
        "/v1/messages",
        None,
        &json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                "data": "A".repeat(5 * 1024 * 1024 / 3 * 4 + 8)}}]}]}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("5242880 bytes"), "{message}");
    assert!(p.seen.lock().unwrap().is_empty(), "nothing went upstream");
}
