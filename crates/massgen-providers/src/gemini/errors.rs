//! Google error bodies as [`ProviderError`]s.
//!
//! Gemini answers a bad key with 400 `INVALID_ARGUMENT` + `ErrorInfo.reason:
//! API_KEY_INVALID` (an authentication error here, not a bad request), and puts the retry
//! hint of a 429 in the body (`RetryInfo.retryDelay: "34.4s"`), not in a header.

use std::time::Duration;

use http::HeaderMap;
use serde_json::Value;

use super::wire::{ErrorBodyWire, ErrorWire};
use crate::errors::{self as common, ErrorInfo};
use crate::transport::header_retry_after;
use crate::{ProviderError, ProviderErrorKind};

struct Parsed {
    info: ErrorInfo,
    retry_delay: Option<Duration>,
}

fn parse(wire: ErrorWire) -> Parsed {
    let details = wire.details.unwrap_or_default();
    let reason = details
        .iter()
        .find_map(|d| d.get("reason").and_then(Value::as_str))
        .map(str::to_owned);
    let retry_delay = details
        .iter()
        .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
        .and_then(parse_delay);
    Parsed {
        info: ErrorInfo {
            message: common::truncate(&wire.message.unwrap_or_default()),
            error_type: wire.status,
            code: reason,
            status: wire.code,
        },
        retry_delay,
    }
}

/// `"34.4s"` (a protobuf Duration in JSON).
fn parse_delay(text: &str) -> Option<Duration> {
    let seconds: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

fn parse_body(body: &str) -> Option<ErrorWire> {
    // `{"error":…}`, or a one-element array of it (non-SSE streamGenerateContent).
    let value: Value = serde_json::from_str(body).ok()?;
    let object = match value {
        Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        other => other,
    };
    serde_json::from_value::<ErrorBodyWire>(object).ok()?.error
}

fn kind(status: u16, info: &ErrorInfo) -> ProviderErrorKind {
    let says =
        |what: &str| info.code.as_deref() == Some(what) || info.error_type.as_deref() == Some(what);
    if says("API_KEY_INVALID") || says("UNAUTHENTICATED") || says("PERMISSION_DENIED") {
        ProviderErrorKind::Authentication
    } else if says("RESOURCE_EXHAUSTED") {
        ProviderErrorKind::RateLimited
    } else {
        common::classify_status(status, info)
    }
}

pub(crate) fn http_error(
    provider: &str,
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> ProviderError {
    let (mut info, retry_delay) = match parse_body(body) {
        Some(wire) => {
            let parsed = parse(wire);
            (parsed.info, parsed.retry_delay)
        }
        None => (
            ErrorInfo {
                message: common::truncate(body.trim()),
                ..ErrorInfo::default()
            },
            None,
        ),
    };
    if info.message.is_empty() {
        info.message = format!("HTTP {status}");
    }
    ProviderError {
        kind: kind(status, &info),
        provider: provider.to_owned(),
        status: Some(status),
        message: info.message,
        error_type: info.error_type,
        code: info.code,
        retry_after: header_retry_after(headers).or(retry_delay),
    }
}

/// An `error` object inside an HTTP 200 stream.
pub(crate) fn stream_error(provider: &str, wire: ErrorWire) -> ProviderError {
    let parsed = parse(wire);
    common::stream_error(provider, parsed.info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_forms() {
        assert_eq!(parse_delay("34.4s"), Some(Duration::from_millis(34_400)));
        assert_eq!(parse_delay("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_delay("soon"), None);
        assert_eq!(parse_delay("-1s"), None);
    }
}
