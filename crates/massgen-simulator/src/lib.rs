//! A simulated model server whose behaviour is chosen by the model name. It speaks Chat
//! Completions here and the OpenAI Responses, Anthropic Messages and Gemini formats in
//! [`native`], all with the same behaviours and stats.
//!
//! Used by `massgen serve --demo`, black-box tests and benchmarks. The `model` string of a
//! request is `<name>[:key=value[,key=value…]]` (grammar in [`behaviour`]); every text it
//! writes is marked `[simulated]`, and every response carries `x-massgen-simulated: true`.
//! It serves HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port ([`listen`]), with
//! `TCP_NODELAY` and each streamed event its own write ([`flush`]) as a provider streams,
//! and counts the model calls of each HTTP version in its stats.
//! A forced `tool_choice` is obeyed in every format ([`forced`]): the reply is a call of
//! that tool with arguments valid for its schema ([`instance`]).
//! With `accuracy=P` a model answers a question carrying `[sim:truth=V]` right with
//! probability P, and `policy=judge` grades a candidate answer against a reference
//! ([`truth`]): evaluations can be tested offline against known accuracies.
//!
//! Standalone: it depends on no other massgen crate, so it can stand in for any upstream
//! without sharing a line of the code under test.

pub mod behaviour;
pub mod flush;
pub mod forced;
pub mod instance;
pub mod listen;
pub mod native;
pub mod plan;
pub mod respond;
pub mod stats;
pub mod text;
pub mod truth;

use std::future::Future;
use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use behaviour::{Behaviour, Fault};
use stats::Stats;

/// Largest request body the simulator reads (axum's default is 2 MB). A prompt carries the
/// question plus the other agents' answers and the system prompt, and massgen admits
/// questions up to its `--max-body-bytes` (10 MiB by default): with 2 MB every upstream call
/// of a big-question session failed (the demo answered 502). 64 MiB leaves room for raised
/// server limits while still bounding what a stray client can make the simulator buffer.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Names listed by `GET /v1/models`; any other name works too.
const EXAMPLE_MODELS: &[&str] = &["sim-a", "sim-b", "sim-c"];

#[derive(Clone, Default)]
struct App {
    stats: Arc<Stats>,
    /// Cancelled on shutdown so that hanging responses end and graceful shutdown completes.
    shutdown: CancellationToken,
}

/// The simulator's routes, with fresh counters.
pub fn router() -> Router {
    router_with(App::default())
}

fn router_with(app: App) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1beta/models/{target}", post(gemini))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            count_version,
        ))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/mock/stats", get(stats))
        .route("/mock/reset", post(reset))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(mark_simulated))
        .with_state(app)
}

/// Serves the simulator on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = App::default();
    let token = app.shutdown.clone();
    let stats = Arc::clone(&app.stats);
    let accepted = move || stats.count_connection();
    listen::serve_connections(listener, router_with(app), accepted, async move {
        shutdown.await;
        token.cancel();
    })
    .await;
    Ok(())
}

/// Counts a model call under its HTTP version, so a test can tell which one a client spoke.
async fn count_version(State(app): State<App>, request: Request, next: Next) -> Response {
    app.stats.count_version(&format!("{:?}", request.version()));
    next.run(request).await
}

async fn mark_simulated(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert("x-massgen-simulated", HeaderValue::from_static("true"));
    response
}

async fn models(State(app): State<App>) -> Json<serde_json::Value> {
    let seen = app.stats.snapshot().by_model.into_keys();
    let mut names: Vec<String> = EXAMPLE_MODELS.iter().map(|s| s.to_string()).collect();
    names.extend(seen.filter(|n| !n.is_empty() && !EXAMPLE_MODELS.contains(&n.as_str())));
    let data: Vec<_> = names
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "massgen-simulator"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn stats(State(app): State<App>) -> Json<stats::Snapshot> {
    Json(app.stats.snapshot())
}

async fn reset(State(app): State<App>) -> Json<stats::Snapshot> {
    app.stats.reset();
    Json(app.stats.snapshot())
}

async fn chat(State(app): State<App>, body: Bytes) -> Response {
    let mut req = match plan::parse_request(&body) {
        Ok(req) => req,
        Err(e) => {
            let model = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("model")?.as_str().map(String::from))
                .unwrap_or_default();
            app.stats.begin(behaviour::name_of(&model)).finish();
            return bad_request(&e.message, e.param, None);
        }
    };
    let mut guard = app.stats.begin(behaviour::name_of(&req.model));
    let b = match Behaviour::parse(&req.model) {
        Ok(b) => b,
        Err(e) => {
            guard.finish();
            return bad_request(&e.message, Some("model"), Some(e.code));
        }
    };
    let fault = if b.fault != Fault::None && app.stats.should_fault(&req.model, b.fault_times) {
        guard.mark_faulted();
        b.fault
    } else {
        Fault::None
    };
    if let Some(response) = respond::fault_response(&b, fault, req.prompt_tokens) {
        guard.finish();
        return response;
    }
    if fault == Fault::HangHeaders {
        // Never answers; the guard counts a cancel when the client gives up.
        app.shutdown.cancelled().await;
        drop(guard);
        return respond::shutting_down();
    }
    if let Some(json) = &mut req.json {
        json.mark(&req.model, &req.last_user, |key| {
            app.stats.should_fault(key, Some(1))
        });
    }
    let plan = plan::plan_with(&b, &req, &|key| app.stats.next_draw(key));
    let ctx = respond::Ctx {
        model: req.model.clone(),
        prompt_tokens: req.prompt_tokens,
        include_usage: req.include_usage,
        behaviour: b,
        fault,
        shutdown: app.shutdown.clone(),
    };
    if req.stream {
        respond::stream(ctx, &plan, guard)
    } else {
        respond::complete(ctx, &plan, guard).await
    }
}

async fn responses(State(app): State<App>, body: Bytes) -> Response {
    let parsed = native::parse::responses(&body);
    native::handle(app, native::Format::Responses, parsed, &body, None).await
}

async fn messages(State(app): State<App>, body: Bytes) -> Response {
    let parsed = native::parse::anthropic(&body);
    native::handle(app, native::Format::Anthropic, parsed, &body, None).await
}

/// `{model}:streamGenerateContent` (SSE with `alt=sse`) or `{model}:generateContent`.
async fn gemini(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let (model, action) = target.rsplit_once(':').unwrap_or((target.as_str(), ""));
    let stream = match action {
        "streamGenerateContent" if query.get("alt").map(String::as_str) == Some("sse") => true,
        "generateContent" => false,
        _ => {
            return respond::api_error(
                StatusCode::NOT_FOUND,
                "[simulated] use {model}:streamGenerateContent?alt=sse or {model}:generateContent",
                "not_found",
                None,
                None,
            );
        }
    };
    let parsed = native::parse::gemini(model, stream, &body);
    native::handle(app, native::Format::Gemini, parsed, &body, Some(model)).await
}

fn bad_request(message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    respond::api_error(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        param,
        code,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod nonstream_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A prompt twice axum's default body limit, its question one long "word" (the worst
    /// case for quoting it), gets a short `new_answer` through the HTTP server.
    #[tokio::test]
    async fn a_4_mb_prompt_gets_an_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(super::serve(listener, std::future::pending()));
        let question = "x".repeat(4 * 1024 * 1024);
        let body = serde_json::json!({
            "model": "sim-a:ttft_ms=0,token_ms=0",
            "messages": [{"role": "system", "content": "You are an agent."}, {"role": "user",
                "content": format!("<original_message>{question}</original_message>")}],
            "tools": [{"type": "function", "function": {"name": "new_answer"}}],
        })
        .to_string();
        assert!(body.len() > 2 * 1024 * 1024);
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(body.as_bytes()).await.unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        let (_, json) = response.split_once("\r\n\r\n").unwrap();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "new_answer", "{v}");
        let args: serde_json::Value =
            serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        let content = args["content"].as_str().unwrap();
        assert!(content.starts_with("[simulated] "), "{content}");
        assert!(content.len() < 1000, "{} bytes", content.len());
        // ceil((17 + 18 + 4 MiB + 19) / 4): every character counted once.
        assert_eq!(v["usage"]["prompt_tokens"], 1_048_590);
        server.abort();
    }

    /// POSTs `body` to a running simulator over HTTP/1.1: the status and the JSON answer.
    async fn post(
        addr: std::net::SocketAddr,
        path: &str,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let body = body.to_string();
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(body.as_bytes()).await.unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).await.unwrap();
        let (head, json) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(json).unwrap())
    }

    async fn start() -> (
        std::net::SocketAddr,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (
            addr,
            tokio::spawn(super::serve(listener, std::future::pending())),
        )
    }

    const QUESTION: &str = "What is 6 times 7? [sim:truth=42]";

    /// Chat Completions: an answer ends with its `Answer:` line, identical requests draw
    /// anew (the server numbers the draws), and a bad `accuracy` is a 400 naming it.
    #[tokio::test]
    async fn chat_completions_answers_with_the_accuracy_asked_for() {
        let (addr, server) = start().await;
        let chat = |model: &str| {
            serde_json::json!({"model": model,
                "messages": [{"role": "user", "content": QUESTION}]})
        };
        let content = |v: &serde_json::Value| {
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let (status, v) = post(
            addr,
            "/v1/chat/completions",
            &chat("sim-a:ttft_ms=0,token_ms=0,accuracy=1"),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let text = content(&v);
        assert!(text.starts_with("[simulated final answer] "), "{text}");
        assert!(text.ends_with("\nAnswer: 42"), "{text}");
        let mut values = Vec::new();
        for _ in 0..5 {
            let body = chat("sim-a:ttft_ms=0,token_ms=0,accuracy=0.5");
            let (_, v) = post(addr, "/v1/chat/completions", &body).await;
            values.push(content(&v).rsplit_once('\n').unwrap().1.to_string());
        }
        assert!(values.contains(&"Answer: 42".to_string()), "{values:?}");
        assert!(values.contains(&"Answer: 43".to_string()), "{values:?}");
        let (status, v) = post(addr, "/v1/chat/completions", &chat("sim-a:accuracy=1.5")).await;
        assert_eq!(status, 400, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("`accuracy=1.5`"), "{message}");
        server.abort();
    }

    /// Anthropic Messages (a native format) answers the same way, and refuses a bad `seed`.
    #[tokio::test]
    async fn anthropic_messages_answer_with_the_accuracy_asked_for() {
        let (addr, server) = start().await;
        let messages = |model: &str| {
            serde_json::json!({"model": model, "max_tokens": 100,
                "messages": [{"role": "user", "content": QUESTION}]})
        };
        let text = |v: &serde_json::Value| v["content"][0]["text"].as_str().unwrap().to_string();
        let (status, v) = post(
            addr,
            "/v1/messages",
            &messages("sim-b:ttft_ms=0,token_ms=0,accuracy=0"),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert!(text(&v).ends_with("\nAnswer: 43"), "{v}");
        let mut values = Vec::new();
        for _ in 0..5 {
            let body = messages("sim-b:ttft_ms=0,token_ms=0,accuracy=0.5,seed=7");
            let (_, v) = post(addr, "/v1/messages", &body).await;
            values.push(text(&v).rsplit_once('\n').unwrap().1.to_string());
        }
        assert!(values.contains(&"Answer: 42".to_string()), "{values:?}");
        assert!(values.contains(&"Answer: 43".to_string()), "{values:?}");
        let (status, v) = post(addr, "/v1/messages", &messages("sim-b:seed=-1")).await;
        assert_eq!(status, 400, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("`seed=-1`"), "{message}");
        server.abort();
    }
}
