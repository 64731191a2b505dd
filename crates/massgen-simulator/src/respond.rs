//! Writers for the three response shapes: OpenAI error JSON, `chat.completion` JSON and
//! `chat.completion.chunk` SSE, including the mid-response faults.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::behaviour::{Behaviour, Fault};
use super::plan::{Plan, Reply};
use super::stats::RequestGuard;

/// Argument fragments are cut at about this many bytes, like OpenAI's small deltas.
const FRAGMENT_BYTES: usize = 8;

/// `{"error":{message,type,param,code}}` with `status`.
pub fn api_error(
    status: StatusCode,
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response {
    (status, axum::Json(error_body(message, kind, param, code))).into_response()
}

fn error_body(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// The error a pre-stream fault answers with, or `None` for faults that happen later.
pub fn fault_response(b: &Behaviour, fault: Fault, prompt_tokens: u64) -> Option<Response> {
    let mut response = match fault {
        Fault::RateLimit => api_error(
            StatusCode::TOO_MANY_REQUESTS,
            "[simulated] Rate limit reached for requests. Please try again later.",
            "requests",
            None,
            Some("rate_limit_exceeded"),
        ),
        Fault::Quota => api_error(
            StatusCode::TOO_MANY_REQUESTS,
            "[simulated] You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            None,
            Some("insufficient_quota"),
        ),
        Fault::ServerError => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "[simulated] The server had an error processing your request.",
            "server_error",
            None,
            None,
        ),
        Fault::Unavailable => api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "[simulated] The engine is currently overloaded, please try again later.",
            "server_error",
            None,
            None,
        ),
        Fault::Context => api_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "[simulated] This model's maximum context length is 8192 tokens. However, your \
                 messages resulted in {} tokens. Please reduce the length of the messages.",
                prompt_tokens + 8192
            ),
            "invalid_request_error",
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        _ => return None,
    };
    let headers = response.headers_mut();
    let default_seconds = (fault == Fault::RateLimit && b.retry_after_ms.is_none()).then_some(1);
    if let Some(s) = b.retry_after_s.or(default_seconds) {
        headers.insert("retry-after", HeaderValue::from(s));
    }
    if let Some(ms) = b.retry_after_ms {
        headers.insert("retry-after-ms", HeaderValue::from(ms));
    }
    Some(response)
}

/// Everything a writer needs besides the plan.
pub struct Ctx {
    pub model: String,
    pub prompt_tokens: u64,
    pub include_usage: bool,
    pub behaviour: Behaviour,
    /// The fault in force for this request (`Fault::None` once `fault_times` is used up).
    pub fault: Fault,
    pub shutdown: CancellationToken,
}

/// One streamed delta; `counted` ones are the "tokens" of `completion_tokens`.
struct Event {
    delta: Value,
    counted: bool,
    reasoning: bool,
}

struct Rendered {
    id: String,
    created: u64,
    events: Vec<Event>,
    finish_reason: &'static str,
    message: Value,
    usage: Value,
}

fn render(ctx: &Ctx, plan: &Plan) -> Rendered {
    let mut events = Vec::new();
    let tools = matches!(plan.reply, Reply::Tools(_));
    let mut message = json!({"role": "assistant", "content": null, "refusal": null});
    // OpenAI merges the role into the first tool-call delta; otherwise it goes alone first.
    let merge_role = tools && plan.reasoning.is_none();
    if !merge_role {
        let content = if tools { Value::Null } else { json!("") };
        events.push(event(
            json!({"role": "assistant", "content": content}),
            false,
        ));
    }
    if let Some(r) = &plan.reasoning {
        message["reasoning_content"] = json!(r);
        for piece in super::text::pieces(r) {
            let mut e = event(json!({"reasoning_content": piece}), true);
            e.reasoning = true;
            events.push(e);
        }
    }
    match &plan.reply {
        Reply::Text(t) => {
            message["content"] = json!(t);
            for piece in super::text::pieces(t) {
                events.push(event(json!({"content": piece}), true));
            }
        }
        Reply::Tools(calls) => {
            let mut list = Vec::new();
            for (index, call) in calls.iter().enumerate() {
                let id = format!("call_{}", short_id());
                list.push(json!({"id": id, "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}}));
                let head = json!([{"index": index, "id": id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}}]);
                let delta = if merge_role && index == 0 {
                    json!({"role": "assistant", "content": null, "tool_calls": head})
                } else {
                    json!({"tool_calls": head})
                };
                events.push(event(delta, false));
                for frag in fragments(&call.arguments) {
                    let delta = json!({"tool_calls": [{"index": index,
                        "function": {"arguments": frag}}]});
                    events.push(event(delta, true));
                }
            }
            message["tool_calls"] = Value::Array(list);
        }
    }
    let completion = events.iter().filter(|e| e.counted).count() as u64;
    let reasoning = events.iter().filter(|e| e.reasoning).count() as u64;
    let usage = json!({
        "prompt_tokens": ctx.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": ctx.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    });
    Rendered {
        id: format!("chatcmpl-sim{}", short_id()),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        events,
        finish_reason: if tools { "tool_calls" } else { "stop" },
        message,
        usage,
    }
}

fn event(delta: Value, counted: bool) -> Event {
    Event {
        delta,
        counted,
        reasoning: false,
    }
}

fn short_id() -> String {
    // The tail of a v7 uuid is random; the head is a timestamp shared by close calls.
    let s = uuid::Uuid::now_v7().simple().to_string();
    s[s.len() - 24..].to_string()
}

/// Splits `s` into pieces of about `FRAGMENT_BYTES` bytes, never inside a character.
pub fn fragments(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if i + c.len_utf8() - start >= FRAGMENT_BYTES {
            out.push(&s[start..i + c.len_utf8()]);
            start = i + c.len_utf8();
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Top-level keys in OpenAI's order (serde_json's `Value` would sort them).
#[derive(Clone, Serialize)]
struct Envelope {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    system_fingerprint: Option<String>,
    choices: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Value>,
}

fn sse(v: &impl Serialize) -> Bytes {
    let json = serde_json::to_string(v).unwrap_or_default();
    Bytes::from(format!("data: {json}\n\n"))
}

fn mid_stream_error() -> Value {
    error_body(
        "[simulated] The model produced an error mid-stream.",
        "server_error",
        None,
        Some("simulated_error"),
    )
}

/// The SSE response. Headers go out at once; the body waits `ttft` before the first chunk.
pub fn stream(ctx: Ctx, plan: &Plan, mut guard: RequestGuard) -> Response {
    let r = render(&ctx, plan);
    let envelope = Envelope {
        id: r.id,
        object: "chat.completion.chunk",
        created: r.created,
        model: ctx.model,
        system_fingerprint: None,
        choices: json!([]),
        usage: None,
    };
    let reported_usage = r.usage.clone();
    let usage_chunk = (ctx.include_usage && ctx.behaviour.usage).then(|| {
        sse(&Envelope {
            usage: Some(r.usage.clone()),
            ..envelope.clone()
        })
    });
    let chunk = move |delta: Value, finish: Option<&str>| {
        sse(&Envelope {
            choices: json!([{"index": 0, "delta": delta, "logprobs": null,
                "finish_reason": finish}]),
            ..envelope.clone()
        })
    };
    let (fault, ttft, gap) = (ctx.fault, ctx.behaviour.ttft, ctx.behaviour.token_delay);
    let batch = ctx.behaviour.batch;
    let events = r.events;
    let finish_reason = r.finish_reason;
    let done = Bytes::from_static(b"data: [DONE]\n\n");
    let body = async_stream::stream! {
        if fault == Fault::Hang {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(ttft).await;
        let half = events.len().div_ceil(2);
        for (i, e) in events.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(gap).await;
            }
            yield chunk(e.delta, None);
            if i + 1 != half {
                continue;
            }
            match fault {
                Fault::Drop => {
                    guard.finish();
                    return;
                }
                Fault::Malformed => yield Bytes::from_static(b"data: {not json\n\n"),
                Fault::ErrorChunk => {
                    yield sse(&mid_stream_error());
                    guard.finish();
                    yield done;
                    return;
                }
                _ => {}
            }
        }
        yield chunk(json!({}), Some(finish_reason));
        if let Some(u) = usage_chunk {
            guard.report_usage(&reported_usage);
            yield u;
        }
        guard.finish();
        yield done;
    };
    // On shutdown every open stream ends, so graceful shutdown cannot wait on `hang`.
    let body = super::flush::frames(body, batch)
        .take_until(ctx.shutdown.cancelled_owned())
        .map(Ok::<_, Infallible>);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The non-stream response, after the time the stream would have taken.
pub async fn complete(ctx: Ctx, plan: &Plan, mut guard: RequestGuard) -> Response {
    let r = render(&ctx, plan);
    let b = &ctx.behaviour;
    let reported_usage = r.usage.clone();
    let steps = u32::try_from(r.events.len().saturating_sub(1)).unwrap_or(u32::MAX);
    let delay = b.ttft + b.token_delay.saturating_mul(steps);
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = ctx.shutdown.cancelled() => return shutting_down(),
    }
    let json_body =
        |bytes: Body| ([(header::CONTENT_TYPE, "application/json")], bytes).into_response();
    let full = Envelope {
        id: r.id,
        object: "chat.completion",
        created: r.created,
        model: ctx.model,
        system_fingerprint: None,
        choices: json!([{"index": 0, "message": r.message, "logprobs": null,
            "finish_reason": r.finish_reason}]),
        usage: b.usage.then(|| r.usage.clone()),
    };
    let text = serde_json::to_string(&full).unwrap_or_default();
    match ctx.fault {
        Fault::Hang => {
            let shutdown = ctx.shutdown.clone();
            let body = futures::stream::once(async move {
                let _guard = guard;
                shutdown.cancelled().await;
                Ok::<_, Infallible>(Bytes::new())
            });
            json_body(Body::from_stream(body))
        }
        Fault::Drop => {
            guard.finish();
            let cut = (0..=text.len() / 2)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            json_body(Body::from(text[..cut].to_string()))
        }
        Fault::Malformed => {
            guard.finish();
            json_body(Body::from("{not json"))
        }
        Fault::ErrorChunk => {
            guard.finish();
            json_body(Body::from(mid_stream_error().to_string()))
        }
        _ => {
            if b.usage {
                guard.report_usage(&reported_usage);
            }
            guard.finish();
            json_body(Body::from(text))
        }
    }
}

pub fn shutting_down() -> Response {
    api_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "[simulated] The simulator is shutting down.",
        "server_error",
        None,
        None,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    #[test]
    fn fragments_respect_char_boundaries_and_rejoin() {
        let s = r#"{"content":"héllo wörld — ünïcode"}"#;
        let f = fragments(s);
        assert!(f.len() > 3);
        assert_eq!(f.concat(), s);
        assert!(f.iter().all(|p| p.len() <= FRAGMENT_BYTES + 3));
        assert_eq!(fragments("12345678ab"), vec!["12345678", "ab"]);
        assert!(fragments("").is_empty());
    }
}
