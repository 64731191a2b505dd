//! Server-sent events as the server writes them: `data:` frames (Chat Completions), named
//! `event:` + `data:` frames (Responses, Anthropic, the session event feed), and the
//! streaming response around them.
//!
//! Written by hand rather than with axum's `Sse`: measured with `cargo bench --bench
//! hot_paths -- sse_` (benches/README.md), an `Event` built with `json_data` costs 4.5 times
//! a frame serialized straight into one buffer (its data writer scans every small write
//! serde makes for line breaks), and 40 chunks through `Sse`'s body 10 times as much. The
//! keep-alive is a timer in each stream, reset by every frame, as `KeepAlive` does.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Serialize;

use crate::server::error::ApiError;

/// `data: <json>\n\n`.
pub fn data(value: &impl Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing our own types and Values cannot fail.
    let _ = serde_json::to_writer(&mut buf, value);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// `event: <kind>\ndata: <json>\n\n`; `kind` is one of the doors' fixed event names.
pub fn named(kind: &str, value: &impl Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    let _ = serde_json::to_writer(&mut buf, value);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

pub const KEEPALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// A 200 `text/event-stream` response over `frames`, unbuffered by proxies.
/// A frame stream that fails ends the response abruptly (the connection closed, or the
/// HTTP/2 stream reset).
pub fn response<E>(frames: impl Stream<Item = Result<Bytes, E>> + Send + 'static) -> Response
where
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(frames))
        .unwrap_or_else(|_| ApiError::Internal.into_response())
}
