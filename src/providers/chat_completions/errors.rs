//! Turning upstream error bodies (HTTP or in-stream) into [`ProviderError`]s.

use std::time::Duration;

use serde_json::Value;

use super::wire::{ErrorBodyWire, ErrorField, ErrorWire};
use crate::providers::{ProviderError, ProviderErrorKind};

/// Longest piece of an upstream body we copy into an error message.
const MAX_MESSAGE_CHARS: usize = 500;

/// What an upstream said about a failure, whatever its dialect.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ErrorInfo {
    pub message: String,
    pub error_type: Option<String>,
    pub code: Option<String>,
    /// An HTTP status the body itself names (Groq `status_code`, OpenRouter numeric `code`).
    pub status: Option<u16>,
}

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

/// The error an upstream reported inside an HTTP 200 stream.
pub(crate) fn stream_error(provider: &str, info: ErrorInfo) -> ProviderError {
    let kind = if is_context_length(&info) {
        ProviderErrorKind::ContextLength
    } else {
        ProviderErrorKind::Stream
    };
    let message = if info.message.is_empty() {
        "upstream reported an error in the stream".to_owned()
    } else {
        info.message
    };
    ProviderError {
        kind,
        provider: provider.to_owned(),
        status: info.status,
        message,
        error_type: info.error_type,
        code: info.code,
        retry_after: None,
    }
}

/// Maps an HTTP status (and what the body says) to an error kind.
pub(crate) fn classify_status(status: u16, info: &ErrorInfo) -> ProviderErrorKind {
    use ProviderErrorKind::*;
    let says =
        |word: &str| info.code.as_deref() == Some(word) || info.error_type.as_deref() == Some(word);
    match status {
        401 | 403 => Authentication,
        429 => RateLimited,
        _ if says("insufficient_quota") => RateLimited,
        408 => Timeout,
        500..=599 => Server,
        400..=499 if is_context_length(info) => ContextLength,
        400..=499 => InvalidRequest,
        _ => InvalidResponse,
    }
}

/// Whether an error says the prompt did not fit the context window. Providers word it
/// differently (OpenAI, vLLM, Anthropic, Gemini, Groq…), hence the phrase list.
pub(crate) fn is_context_length(info: &ErrorInfo) -> bool {
    const PHRASES: &[&str] = &[
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "prompt is too long",
        "exceeds the maximum number of tokens",
        "input token count",
    ];
    if info.code.as_deref() == Some("context_length_exceeded") {
        return true;
    }
    let message = info.message.to_ascii_lowercase();
    PHRASES.iter().any(|phrase| message.contains(phrase))
}

/// Whether a new attempt may succeed, given the error and that no byte of a successful
/// response has arrived yet. A quota error is a 429 that no wait will fix.
pub(crate) fn retryable_before_first_byte(error: &ProviderError) -> bool {
    if error.code.as_deref() == Some("insufficient_quota")
        || error.error_type.as_deref() == Some("insufficient_quota")
    {
        return false;
    }
    error.kind.is_retryable() || error.kind == ProviderErrorKind::Timeout
}

fn code_string(code: &Value) -> Option<String> {
    match code {
        Value::String(text) if !text.is_empty() => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
