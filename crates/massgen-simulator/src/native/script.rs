//! What a simulated answer streams, independent of the wire format, and the writer that
//! paces any format's frames with the behaviour's delays and mid-stream faults.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::behaviour::{Behaviour, Fault};
use crate::plan::{Plan, Reply};
use crate::respond::fragments;
use crate::stats::RequestGuard;
use crate::text::pieces;

/// One planned tool call with its streamed argument fragments.
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub fragments: Vec<String>,
}

/// The answer as pieces; every piece is one "token" of the output count.
pub struct Script {
    pub reasoning: Vec<String>,
    pub text: Vec<String>,
    pub calls: Vec<Call>,
    pub prompt_tokens: u64,
}

impl Script {
    pub fn new(plan: &Plan, prompt_tokens: u64) -> Self {
        let reasoning = plan.reasoning.as_deref().map(pieces).unwrap_or_default();
        let (text, calls) = match &plan.reply {
            Reply::Text(t) => (pieces(t), Vec::new()),
            Reply::Tools(calls) => (
                Vec::new(),
                calls
                    .iter()
                    .map(|c| Call {
                        id: format!("call_{}", short_id()),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        fragments: fragments(&c.arguments)
                            .into_iter()
                            .map(String::from)
                            .collect(),
                    })
                    .collect(),
            ),
        };
        Self {
            reasoning,
            text,
            calls,
            prompt_tokens,
        }
    }

    pub fn reasoning_tokens(&self) -> u64 {
        self.reasoning.len() as u64
    }

    pub fn output_tokens(&self) -> u64 {
        let args: usize = self.calls.iter().map(|c| c.fragments.len()).sum();
        (self.reasoning.len() + self.text.len() + args) as u64
    }

    pub fn full_reasoning(&self) -> String {
        self.reasoning.concat()
    }

    pub fn full_text(&self) -> String {
        self.text.concat()
    }

    /// What `/mock/stats` counts for this answer.
    pub fn stats_usage(&self) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": self.output_tokens()})
    }
}

pub fn short_id() -> String {
    let s = uuid::Uuid::now_v7().simple().to_string();
    s[s.len() - 24..].to_string()
}

/// One SSE frame; `event` adds an `event:` line.
pub fn frame(event: Option<&str>, data: &Value) -> Bytes {
    let json = serde_json::to_string(data).unwrap_or_default();
    match event {
        Some(name) => Bytes::from(format!("event: {name}\ndata: {json}\n\n")),
        None => Bytes::from(format!("data: {json}\r\n\r\n")),
    }
}

/// A format's frames: `head` at the first-token time, `body` paced by `token_ms`
/// (mid-stream faults strike halfway through it), then `tail`.
pub struct Frames {
    pub head: Vec<Bytes>,
    pub body: Vec<Bytes>,
    pub tail: Vec<Bytes>,
    /// Sent by `fault=error_chunk` (the format's in-stream error).
    pub error: Bytes,
    /// Counted in `/mock/stats` when the tail (which reports usage) goes out.
    pub usage: Option<Value>,
}

pub fn stream(
    frames: Frames,
    behaviour: &Behaviour,
    fault: Fault,
    shutdown: CancellationToken,
    mut guard: RequestGuard,
) -> Response {
    let (ttft, gap, batch) = (behaviour.ttft, behaviour.token_delay, behaviour.batch);
    let body = async_stream::stream! {
        if fault == Fault::Hang {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(ttft).await;
        for head in frames.head {
            yield head;
        }
        let half = frames.body.len().div_ceil(2);
        for (i, piece) in frames.body.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(gap).await;
            }
            yield piece;
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
                    yield frames.error.clone();
                    guard.finish();
                    return;
                }
                _ => {}
            }
        }
        if let Some(usage) = &frames.usage {
            guard.report_usage(usage);
        }
        for tail in frames.tail {
            yield tail;
        }
        guard.finish();
    };
    let body = crate::flush::frames(body, batch)
        .take_until(shutdown.cancelled_owned())
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
