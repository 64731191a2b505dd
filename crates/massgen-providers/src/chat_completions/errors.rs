//! Turning upstream error bodies (HTTP or in-stream) into [`ProviderError`]s.

use std::time::Duration;

use serde_json::Value;

use super::wire::{ErrorBodyWire, ErrorField, ErrorWire};
use crate::ProviderError;
pub(crate) use crate::errors::{ErrorInfo, classify_status, stream_error, truncate};

impl ErrorInfo {
    pub fn from_field(field: ErrorField) -> Self {
        match field {
            ErrorField::Detail(wire) => Self::from_wire(wire),
            ErrorField::Text(message) => Self {
                message: truncate(&message),
                ..Self::default()
            },
        }
    }

    fn from_wire(wire: ErrorWire) -> Self {
        let code = wire.code.as_ref().and_then(code_string);
        let code_status = wire
            .code
            .as_ref()
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| (400..600).contains(n));
        let mut message = wire.message.unwrap_or_default();
        // OpenRouter's message is a generic "Provider returned error"; the routed
        // provider's words are in metadata.raw.
        if let Some(raw) = wire.metadata.and_then(|m| m.raw) {
            let raw = match raw {
                Value::String(text) => text,
                Value::Null => String::new(),
                other => other.to_string(),
            };
            if !raw.is_empty() {
                message = if message.is_empty() {
                    raw
                } else {
                    format!("{message}: {raw}")
                };
            }
        }
        Self {
            message: truncate(&message),
            error_type: wire.error_type,
            code,
            status: wire.status_code.or(code_status),
        }
    }
}

/// Reads an error response body; anything that is not a known JSON error shape becomes
/// a message holding the (truncated) text.
pub(crate) fn parse_error_body(body: &str) -> ErrorInfo {
    if let Ok(parsed) = serde_json::from_str::<ErrorBodyWire>(body) {
        if let Some(field) = parsed.error {
            return ErrorInfo::from_field(field);
        }
        let flat_error = parsed.object.as_deref() == Some("error") || parsed.flat.message.is_some();
        if flat_error {
            return ErrorInfo::from_wire(parsed.flat);
        }
    }
    ErrorInfo {
        message: truncate(body.trim()),
        ..ErrorInfo::default()
    }
}

/// The error of a non-2xx HTTP response.
pub(crate) fn http_error(
    provider: &str,
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
) -> ProviderError {
    let mut info = parse_error_body(body);
    if info.message.is_empty() {
        info.message = match http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
        {
            Some(reason) => format!("HTTP {status} {reason}"),
            None => format!("HTTP {status}"),
        };
    }
    let kind = classify_status(status, &info);
    ProviderError {
        kind,
        provider: provider.to_owned(),
        status: Some(status),
        message: info.message,
        error_type: info.error_type,
        code: info.code,
        retry_after,
    }
}

fn code_string(code: &Value) -> Option<String> {
    match code {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProviderErrorKind;
    use crate::errors::{MAX_MESSAGE_CHARS, retryable_before_first_byte};

    #[test]
    fn openai_body() {
        let info = parse_error_body(
            r#"{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
        );
        assert_eq!(info.message, "bad key");
        assert_eq!(info.error_type.as_deref(), Some("invalid_request_error"));
        assert_eq!(info.code.as_deref(), Some("invalid_api_key"));
        assert_eq!(info.status, None);
    }

    #[test]
    fn openrouter_numeric_code_and_raw() {
        let info = parse_error_body(
            r#"{"error":{"code":429,"message":"Provider returned error","metadata":{"raw":"slow down"}}}"#,
        );
        assert_eq!(info.code.as_deref(), Some("429"));
        assert_eq!(info.status, Some(429));
        assert_eq!(info.message, "Provider returned error: slow down");
    }

    #[test]
    fn vllm_flat_body() {
        let info = parse_error_body(
            r#"{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}"#,
        );
        assert_eq!(info.code.as_deref(), Some("400"));
        assert_eq!(info.error_type.as_deref(), Some("BadRequestError"));
        assert_eq!(
            classify_status(400, &info),
            ProviderErrorKind::ContextLength
        );
    }

    #[test]
    fn non_json_body_is_truncated_text() {
        let long = "x".repeat(2000);
        let info = parse_error_body(&long);
        assert_eq!(info.message.chars().count(), MAX_MESSAGE_CHARS + 1);
        let html = parse_error_body("<html>502 Bad Gateway</html>\n");
        assert_eq!(html.message, "<html>502 Bad Gateway</html>");
    }

    #[test]
    fn status_mapping() {
        let plain = ErrorInfo::default();
        let kind = |status| classify_status(status, &plain);
        assert_eq!(kind(401), ProviderErrorKind::Authentication);
        assert_eq!(kind(403), ProviderErrorKind::Authentication);
        assert_eq!(kind(429), ProviderErrorKind::RateLimited);
        assert_eq!(kind(400), ProviderErrorKind::InvalidRequest);
        assert_eq!(kind(404), ProviderErrorKind::InvalidRequest);
        assert_eq!(kind(422), ProviderErrorKind::InvalidRequest);
        assert_eq!(kind(408), ProviderErrorKind::Timeout);
        assert_eq!(kind(500), ProviderErrorKind::Server);
        assert_eq!(kind(529), ProviderErrorKind::Server);
        let quota = ErrorInfo {
            code: Some("insufficient_quota".into()),
            ..ErrorInfo::default()
        };
        assert_eq!(
            classify_status(403, &quota),
            ProviderErrorKind::Authentication
        );
        assert_eq!(classify_status(400, &quota), ProviderErrorKind::RateLimited);
        let too_long = ErrorInfo {
            message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
            ..ErrorInfo::default()
        };
        assert_eq!(
            classify_status(400, &too_long),
            ProviderErrorKind::ContextLength
        );
        assert_eq!(classify_status(500, &too_long), ProviderErrorKind::Server);
    }

    #[test]
    fn empty_body_gets_status_text() {
        let error = http_error("groq", 503, "", None);
        assert_eq!(error.message, "HTTP 503 Service Unavailable");
        assert_eq!(error.kind, ProviderErrorKind::Server);
    }

    #[test]
    fn insufficient_quota_is_not_retried() {
        let quota = http_error(
            "openai",
            429,
            r#"{"error":{"message":"quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            None,
        );
        assert_eq!(quota.kind, ProviderErrorKind::RateLimited);
        assert!(!retryable_before_first_byte(&quota));
        let limited = http_error("openai", 429, "{}", None);
        assert!(retryable_before_first_byte(&limited));
    }
}
