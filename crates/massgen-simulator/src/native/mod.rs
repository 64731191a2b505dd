//! The native wire formats of the simulator: OpenAI Responses (`POST /v1/responses`),
//! Anthropic Messages (`POST /v1/messages`) and Gemini
//! (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse` and `:generateContent`).
//!
//! Each request is read into the same format-neutral request as Chat Completions, so the
//! model-name grammar (delays, policies, votes, faults, reasoning, usage) and the stats
//! behave identically; only the bytes on the wire differ. Errors use each format's own
//! error shape (Anthropic's `503` fault is its `529 overloaded_error`; Gemini's `429`
//! carries `RetryInfo.retryDelay` in the body).

pub mod anthropic;
pub mod gemini;
pub mod parse;
pub mod responses;
pub mod script;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::App;
use super::behaviour::{self, Behaviour, Fault};
use super::plan::{self, BadRequest, Request};
use super::respond;
use script::Script;

/// The three native formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Responses,
    Anthropic,
    Gemini,
}

/// Handles one native request end to end (parse, stats, faults, plan, respond).
pub(super) async fn handle(
    app: App,
    format: Format,
    parsed: Result<Request, BadRequest>,
    body: &Bytes,
    gemini_model: Option<&str>,
) -> Response {
    let mut req = match parsed {
        Ok(req) => req,
        Err(e) => {
            let model = gemini_model.map(String::from).unwrap_or_else(|| {
                serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| v.get("model")?.as_str().map(String::from))
                    .unwrap_or_default()
            });
            app.stats.begin(behaviour::name_of(&model)).finish();
            return error(format, StatusCode::BAD_REQUEST, &e.message, None);
        }
    };
    let mut guard = app.stats.begin(behaviour::name_of(&req.model));
    let b = match Behaviour::parse(&req.model) {
        Ok(b) => b,
        Err(e) => {
            guard.finish();
            return error(format, StatusCode::BAD_REQUEST, &e.message, None);
        }
    };
    let fault = if b.fault != Fault::None && app.stats.should_fault(&req.model, b.fault_times) {
        guard.mark_faulted();
        b.fault
    } else {
        Fault::None
    };
    if let Some(response) = fault_response(format, &b, fault, req.prompt_tokens) {
        guard.finish();
        return response;
    }
    if fault == Fault::HangHeaders {
        app.shutdown.cancelled().await;
        drop(guard);
        return respond::shutting_down();
    }
    req.json = serde_json::from_slice::<Value>(body)
        .ok()
        .as_ref()
        .and_then(plan::JsonWanted::from_body);
    if let Some(json) = &mut req.json {
        json.mark(&req.model, &req.last_user, |key| {
            app.stats.should_fault(key, Some(1))
        });
    }
    let plan = plan::plan_with(&b, &req, &|key| app.stats.next_draw(key));
    let script = Script::new(&plan, req.prompt_tokens);
    let model = req.model.as_str();
    if req.stream {
        let frames = match format {
            Format::Responses => responses::frames(&script, model, b.usage),
            Format::Anthropic => anthropic::frames(&script, model, b.usage),
            Format::Gemini => gemini::frames(&script, model, b.usage),
        };
        return script::stream(frames, &b, fault, app.shutdown.clone(), guard);
    }
    let full = match format {
        Format::Responses => responses::complete(&script, model, b.usage),
        Format::Anthropic => anthropic::complete(&script, model, b.usage),
        Format::Gemini => gemini::complete(&script, model, b.usage),
    };
    let steps = u32::try_from(script.output_tokens()).unwrap_or(u32::MAX);
    let delay = b.ttft + b.token_delay.saturating_mul(steps.saturating_sub(1));
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = app.shutdown.cancelled() => return respond::shutting_down(),
    }
    match fault {
        Fault::Hang => {
            // Headers never come; a client that gives up counts as cancelled.
            app.shutdown.cancelled().await;
            drop(guard);
            return respond::shutting_down();
        }
        Fault::Drop | Fault::Malformed | Fault::ErrorChunk => {
            // Mid-response faults of a non-stream call: a broken body.
            guard.finish();
            return ([("content-type", "application/json")], "{not json").into_response();
        }
        _ => {}
    }
    if b.usage {
        guard.report_usage(&script.stats_usage());
    }
    guard.finish();
    axum::Json(full).into_response()
}

/// An error in the format's own shape.
fn error(format: Format, status: StatusCode, message: &str, kind: Option<&str>) -> Response {
    let body = match format {
        Format::Responses => json!({"error": {"message": message,
            "type": kind.unwrap_or("invalid_request_error"), "param": null, "code": null}}),
        Format::Anthropic => json!({"type": "error", "error": {
            "type": kind.unwrap_or("invalid_request_error"), "message": message},
            "request_id": "req_simulated"}),
        Format::Gemini => json!({"error": {"code": status.as_u16(), "message": message,
            "status": kind.unwrap_or("INVALID_ARGUMENT")}}),
    };
    (status, axum::Json(body)).into_response()
}

fn fault_response(
    format: Format,
    b: &Behaviour,
    fault: Fault,
    prompt_tokens: u64,
) -> Option<Response> {
    let context = format!(
        "[simulated] prompt is too long: {} tokens > 8192 maximum; the input token count exceeds the maximum number of tokens allowed",
        prompt_tokens + 8192
    );
    let (status, message, kind): (StatusCode, String, &str) = match (format, fault) {
        (Format::Responses, _) => return respond::fault_response(b, fault, prompt_tokens),
        (Format::Anthropic, Fault::RateLimit) => (
            StatusCode::TOO_MANY_REQUESTS,
            "[simulated] Number of request tokens has exceeded your per-minute rate limit".into(),
            "rate_limit_error",
        ),
        (Format::Anthropic, Fault::Quota) => (
            StatusCode::BAD_REQUEST,
            "[simulated] Your credit balance is too low to access the Anthropic API.".into(),
            "invalid_request_error",
        ),
        (Format::Anthropic, Fault::ServerError) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "[simulated] Internal server error".into(),
            "api_error",
        ),
        (Format::Anthropic, Fault::Unavailable) => (
            StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            "[simulated] Overloaded".into(),
            "overloaded_error",
        ),
        (Format::Anthropic, Fault::Context) => {
            (StatusCode::BAD_REQUEST, context, "invalid_request_error")
        }
        (Format::Gemini, Fault::RateLimit) => (
            StatusCode::TOO_MANY_REQUESTS,
            "[simulated] Resource has been exhausted (e.g. check quota).".into(),
            "RESOURCE_EXHAUSTED",
        ),
        (Format::Gemini, Fault::Quota) => (
            StatusCode::TOO_MANY_REQUESTS,
            "[simulated] You exceeded your current quota.".into(),
            "RESOURCE_EXHAUSTED",
        ),
        (Format::Gemini, Fault::ServerError) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "[simulated] An internal error has occurred.".into(),
            "INTERNAL",
        ),
        (Format::Gemini, Fault::Unavailable) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "[simulated] The model is overloaded. Please try again later.".into(),
            "UNAVAILABLE",
        ),
        (Format::Gemini, Fault::Context) => (StatusCode::BAD_REQUEST, context, "INVALID_ARGUMENT"),
        _ => return None,
    };
    let mut response = error(format, status, &message, Some(kind));
    let headers = response.headers_mut();
    let default_seconds = (fault == Fault::RateLimit && b.retry_after_ms.is_none()).then_some(1);
    if format == Format::Gemini && fault == Fault::RateLimit {
        // Gemini's hint is in the body; rewrite it with RetryInfo.
        let seconds = b.retry_after_ms.map_or_else(
            || b.retry_after_s.or(default_seconds).unwrap_or(1) as f64,
            |ms| ms as f64 / 1000.0,
        );
        let body = json!({"error": {"code": 429, "message": message, "status": kind,
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": format!("{seconds}s")}]}});
        return Some((status, axum::Json(body)).into_response());
    }
    if let Some(s) = b.retry_after_s.or(default_seconds) {
        headers.insert("retry-after", HeaderValue::from(s));
    }
    if let Some(ms) = b.retry_after_ms {
        headers.insert("retry-after-ms", HeaderValue::from(ms));
    }
    Some(response)
}
