//! Anthropic error bodies (HTTP and in-stream `event: error`) as [`ProviderError`]s.

use http::HeaderMap;

use super::wire::{ErrorBodyWire, ErrorWire};
use crate::errors::{self as common, ErrorInfo};
use crate::transport::header_retry_after;
use crate::{ProviderError, ProviderErrorKind};

fn info(wire: ErrorWire) -> ErrorInfo {
    ErrorInfo {
        message: common::truncate(&wire.message.unwrap_or_default()),
        error_type: wire.error_type,
        code: None,
        status: None,
    }
}

fn parse_body(body: &str) -> ErrorInfo {
    match serde_json::from_str::<ErrorBodyWire>(body) {
        Ok(ErrorBodyWire { error: Some(wire) }) => info(wire),
        _ => ErrorInfo {
            message: common::truncate(body.trim()),
            ..ErrorInfo::default()
        },
    }
}

/// A non-2xx response: 529 `overloaded_error` is a (retryable) server error, a
/// `prompt is too long` 400 a context-length error; `retry-after` is honoured.
pub(crate) fn http_error(
    provider: &str,
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> ProviderError {
    let mut info = parse_body(body);
    if info.message.is_empty() {
        info.message = format!("HTTP {status}");
    }
    let mut kind = common::classify_status(status, &info);
    if info.error_type.as_deref() == Some("overloaded_error") {
        kind = ProviderErrorKind::Server;
    }
    ProviderError {
        kind,
        provider: provider.to_owned(),
        status: Some(status),
        message: info.message,
        error_type: info.error_type,
        code: info.code,
        retry_after: header_retry_after(headers),
    }
}

/// An `event: error` inside an HTTP 200 stream (e.g. `overloaded_error`).
pub(crate) fn stream_error(provider: &str, wire: ErrorWire) -> ProviderError {
    common::stream_error(provider, info(wire))
}
