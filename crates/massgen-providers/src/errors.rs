//! What every wire format shares about upstream errors: the neutral facts of an error
//! body, status → kind, context-length recognition, retryability, message truncation.

use crate::{ProviderError, ProviderErrorKind};

/// Longest piece of an upstream body we copy into an error message.
pub(crate) const MAX_MESSAGE_CHARS: usize = 500;

/// What an upstream said about a failure, whatever its dialect.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ErrorInfo {
    pub message: String,
    pub error_type: Option<String>,
    pub code: Option<String>,
    /// An HTTP status the body itself names (Groq `status_code`, OpenRouter numeric `code`).
    pub status: Option<u16>,
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
    error.retry_can_help()
}

pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
