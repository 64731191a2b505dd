//! Every error a client can see, with its HTTP status, whether a retry can help, and
//! OpenAI's error shape (`{"error":{"message","type","param","code"}}`), which the Chat
//! Completions and Responses doors and the other routes use; the Messages door renders the
//! same errors in Anthropic's shape.

use std::borrow::Cow;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use massgen_core::coordination::{AgentErrorKind, SessionError, SessionErrorKind};
use massgen_core::provider::ProviderErrorKind;
use serde_json::json;

use crate::app::spend::QuotaSpent;

mod upstream;

/// Tells clients (the OpenAI and Anthropic SDKs, Claude Code) whether retrying can help.
pub const SHOULD_RETRY: &str = "x-should-retry";

/// What a subscriber limit counts: one session's readers, or one key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriberScope {
    Session,
    Key,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// 400: a request we cannot use.
    InvalidRequest {
        message: String,
        /// The field at fault: a name, or a JSON path (`messages[2].content`).
        param: Option<Cow<'static, str>>,
        code: &'static str,
    },
    /// 404: `massgen/<name>` that the server does not have.
    ConfigNotFound {
        name: String,
        available: Vec<String>,
    },
    /// 404: `GET /v1/models/{id}` for an id `GET /v1/models` does not list.
    ModelNotFound { id: String, available: Vec<String> },
    /// 503: `massgen/<name>` exists but failed to load.
    ConfigUnavailable { name: String, reason: String },
    /// 503: the server has no default configuration.
    NoDefaultConfig { available: Vec<String> },
    /// 404: no such route.
    RouteNotFound { method: String, path: String },
    /// 405.
    MethodNotAllowed,
    /// 413: body over the limit.
    PayloadTooLarge { limit: usize },
    /// 408: the request body did not arrive in time.
    BodyTimeout { within: Duration },
    /// 415: a `Content-Encoding` on the request body (the server reads plain bodies only).
    UnsupportedEncoding { encoding: String },
    /// 415: a POST whose body is not declared `application/json`.
    UnsupportedContentType { got: String },
    /// 403: a browser page of an origin the server does not serve or allow, or a `Host`
    /// the server does not answer to (DNS rebinding); `code` says which.
    Forbidden { message: String, code: &'static str },
    /// The session failed (502 / 503 / 504 / 429).
    Session(SessionError),
    /// 500: a bug; the message is generic on purpose.
    Internal,
    /// 401: API keys are configured and the request has none or a wrong one.
    Unauthorized { message: String },
    /// 429: this key sent too many requests.
    RateLimited { retry_after: Duration },
    /// 429: the server already runs its maximum of sessions.
    TooManySessions { max: usize },
    /// 429: the key already runs its `--max-sessions-per-key`.
    TooManyKeySessions { max: usize },
    /// 429: a session's or a key's `/events` readers are at their limit.
    TooManySubscribers { per: SubscriberScope, max: usize },
    /// 429: the key spent its `--max-key-cost-usd-per-day` today.
    QuotaSpent(QuotaSpent),
    /// 429: the key's stored responses take its `--max-stored-bytes-per-key`.
    StorageFull { stored: u64, limit: u64 },
    /// 404: no session record with this id (or not the caller's).
    SessionNotFound { id: String },
    /// 404: no stored response with this id (or not the caller's).
    ResponseNotFound { id: String },
    /// 503: the records database cannot be read now (sessions still run).
    RecordsUnavailable,
    /// 503: the request bodies held at once are at `--max-buffered-body-bytes` (`budget`).
    /// `part`: the caller's own part of it was full (the budget may not be).
    BodiesBusy { budget: usize, part: Option<usize> },
    /// 503: a session's upstream calls do not fit under the open-file limit now.
    OutOfDescriptors { limit: u64 },
    /// 503: the connection came over `--max-connections` (or, `per_address`,
    /// `--max-connections-per-address`); answered on that connection, then closed.
    ConnectionsFull { per_address: bool },
}

impl ApiError {
    pub fn invalid(
        message: impl Into<String>,
        param: Option<&'static str>,
        code: &'static str,
    ) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: param.map(Cow::Borrowed),
            code,
        }
    }

    /// A 400 about the field at `path` (a JSON path such as `input[1].content`).
    pub fn invalid_at(message: impl Into<String>, path: String, code: &'static str) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: Some(Cow::Owned(path)),
            code,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            Self::ConfigNotFound { .. }
            | Self::ModelNotFound { .. }
            | Self::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            Self::ConfigUnavailable { .. }
            | Self::NoDefaultConfig { .. }
            | Self::RecordsUnavailable
            | Self::BodiesBusy { .. }
            | Self::OutOfDescriptors { .. }
            | Self::ConnectionsFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedEncoding { .. } | Self::UnsupportedContentType { .. } => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Session(e) => session_status(e),
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::RateLimited { .. }
            | Self::TooManySessions { .. }
            | Self::TooManyKeySessions { .. }
            | Self::TooManySubscribers { .. }
            | Self::QuotaSpent(_)
            | Self::StorageFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::SessionNotFound { .. } | Self::ResponseNotFound { .. } => StatusCode::NOT_FOUND,
        }
    }

    /// OpenAI's `type` field.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. }
            | Self::ConfigNotFound { .. }
            | Self::ModelNotFound { .. }
            | Self::RouteNotFound { .. }
            | Self::MethodNotAllowed
            | Self::PayloadTooLarge { .. }
            | Self::UnsupportedEncoding { .. }
            | Self::UnsupportedContentType { .. } => "invalid_request_error",
            Self::Forbidden { .. } => "permission_error",
            Self::BodyTimeout { .. } => "timeout_error",
            Self::ConfigUnavailable { .. }
            | Self::NoDefaultConfig { .. }
            | Self::RecordsUnavailable
            | Self::BodiesBusy { .. }
            | Self::OutOfDescriptors { .. }
            | Self::ConnectionsFull { .. } => "server_error",
            Self::Session(e) => match e.kind {
                _ if all_timed_out(e) => "timeout_error",
                SessionErrorKind::UpstreamFailed if all_rate_limited(e) => "rate_limit_error",
                SessionErrorKind::UpstreamFailed => "upstream_error",
                SessionErrorKind::NoUsableAgent => "server_error",
                SessionErrorKind::Timeout => "timeout_error",
                SessionErrorKind::Cancelled => "server_error",
                SessionErrorKind::BudgetExhausted => "invalid_request_error",
                SessionErrorKind::InvalidOutput => "server_error",
            },
            Self::Internal => "server_error",
            Self::Unauthorized { .. }
            | Self::SessionNotFound { .. }
            | Self::ResponseNotFound { .. } => "invalid_request_error",
            // A spent quota has the type an upstream's spent quota has here (above).
            Self::RateLimited { .. }
            | Self::TooManySessions { .. }
            | Self::TooManyKeySessions { .. }
            | Self::TooManySubscribers { .. }
            | Self::QuotaSpent(_)
            | Self::StorageFull { .. } => "rate_limit_error",
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest { code, .. } => code,
            Self::ConfigNotFound { .. } | Self::ModelNotFound { .. } => "model_not_found",
            Self::ConfigUnavailable { .. } => "config_unavailable",
            Self::NoDefaultConfig { .. } => "no_default_config",
            Self::RouteNotFound { .. } => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::PayloadTooLarge { .. } => "request_too_large",
            Self::UnsupportedEncoding { .. } => "unsupported_content_encoding",
            Self::UnsupportedContentType { .. } => "unsupported_media_type",
            Self::Forbidden { code, .. } => code,
            Self::BodyTimeout { .. } => "request_timeout",
            Self::Session(e) => match e.kind {
                _ if all_timed_out(e) => "agents_timed_out",
                SessionErrorKind::UpstreamFailed if all_quota_spent(e) => "insufficient_quota",
                SessionErrorKind::UpstreamFailed if all_rate_limited(e) => "rate_limit_exceeded",
                SessionErrorKind::UpstreamFailed => "upstream_failed",
                SessionErrorKind::NoUsableAgent => "no_usable_agent",
                SessionErrorKind::Timeout => "session_timeout",
                SessionErrorKind::Cancelled => "session_cancelled",
                SessionErrorKind::BudgetExhausted => "budget_exhausted",
                SessionErrorKind::InvalidOutput => "invalid_output",
            },
            Self::Internal => "internal_error",
            Self::Unauthorized { .. } => "invalid_api_key",
            Self::RateLimited { .. } => "rate_limit_exceeded",
            Self::TooManySessions { .. } | Self::TooManyKeySessions { .. } => "too_many_sessions",
            Self::TooManySubscribers { .. } => "too_many_subscribers",
            Self::QuotaSpent(_) => "insufficient_quota",
            Self::StorageFull { .. } => "storage_quota_exceeded",
            Self::SessionNotFound { .. } => "session_not_found",
            Self::ResponseNotFound { .. } => "response_not_found",
            Self::RecordsUnavailable => "records_unavailable",
            Self::BodiesBusy { .. }
            | Self::OutOfDescriptors { .. }
            | Self::ConnectionsFull { .. } => "server_busy",
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            Self::InvalidRequest { param, .. } => param.as_deref(),
            Self::ConfigNotFound { .. }
            | Self::ModelNotFound { .. }
            | Self::ConfigUnavailable { .. } => Some("model"),
            _ => None,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::InvalidRequest { message, .. } => message.clone(),
            Self::ConfigNotFound { name, available } => format!(
                "The model 'massgen/{name}' does not exist. Available: {}",
                list_or_none(available)
            ),
            Self::ModelNotFound { id, available } => format!(
                "The model '{id}' does not exist. Available: {}",
                list_or_none(available)
            ),
            Self::ConfigUnavailable { name, reason } => {
                format!("The configuration '{name}' could not be loaded: {reason}")
            }
            Self::NoDefaultConfig { available } => format!(
                "This server has no default configuration; choose one with model 'massgen/<name>'. Available: {}",
                list_or_none(available)
            ),
            Self::RouteNotFound { method, path } => format!("Unknown request URL: {method} {path}"),
            Self::MethodNotAllowed => "Method not allowed for this URL".to_string(),
            Self::PayloadTooLarge { limit } => {
                format!("Request body is larger than the limit of {limit} bytes")
            }
            Self::BodyTimeout { within } => format!(
                "The request body did not arrive within {} s",
                within.as_secs_f64()
            ),
            Self::UnsupportedEncoding { encoding } => format!(
                "Request bodies with Content-Encoding '{encoding}' are not supported; send the body uncompressed"
            ),
            Self::UnsupportedContentType { got } if got.is_empty() => {
                "The request has no Content-Type: send the JSON body with 'Content-Type: application/json'".to_string()
            }
            Self::UnsupportedContentType { got } => format!(
                "Content-Type '{got}' is not accepted: send the JSON body with 'Content-Type: application/json'"
            ),
            Self::Forbidden { message, .. } => message.clone(),
            Self::Session(e) => session_message(e),
            Self::Internal => "The server had an internal error".to_string(),
            Self::Unauthorized { message } => message.clone(),
            Self::RateLimited { retry_after } => format!(
                "Rate limit reached for this client; retry in {} s",
                super::retry_after::retry_after_seconds(*retry_after).max(1)
            ),
            Self::TooManySessions { max } => format!(
                "The server is running its maximum of {max} concurrent sessions; retry shortly"
            ),
            Self::TooManyKeySessions { max } => format!(
                "This API key already runs its maximum of {max} concurrent sessions \
                 (--max-sessions-per-key; without keys, the whole server's); retry when one has ended"
            ),
            Self::TooManySubscribers {
                per: SubscriberScope::Session,
                max,
            } => format!(
                "This session's event stream already has its maximum of {max} readers \
                 (--max-subscribers-per-session); retry when one has left"
            ),
            Self::TooManySubscribers {
                per: SubscriberScope::Key,
                max,
            } => format!(
                "This API key already reads its maximum of {max} session event streams at once \
                 (--max-subscribers-per-key); close one and retry"
            ),
            Self::QuotaSpent(q) if q.may_free_up() => format!(
                "Daily spending limit reached for now: this API key spent ${:.6} today and its \
                 running sessions reserved ${:.6} of its ${} (--max-key-cost-usd-per-day; without \
                 keys, the whole server's). Each session reserves its maximum cost (the smallest of \
                 --max-session-cost-usd, the panel's and the request's max_cost_usd, else all that is \
                 left), and at least what its first round can cost (${:.6} here: its agents' first \
                 calls run at once), until it ends; retry when one has ended",
                q.spent.usd, q.reserved_usd, q.limit_usd, q.first_round_usd
            ),
            Self::QuotaSpent(q) if q.spent.usd < q.limit_usd => format!(
                "Daily spending limit reached: this API key spent ${:.6} ({} tokens) today of \
                 its ${} (--max-key-cost-usd-per-day; without keys, the whole server's), and what \
                 is left is less than this panel's first round can cost (${:.6}: its agents' first \
                 calls run at once); it resets at 00:00 UTC",
                q.spent.usd, q.spent.tokens, q.limit_usd, q.first_round_usd
            ),
            Self::QuotaSpent(q) => format!(
                "Daily spending limit reached: this API key spent ${:.6} ({} tokens) today of \
                 its ${} (--max-key-cost-usd-per-day; without keys, the whole server's); it \
                 resets at 00:00 UTC",
                q.spent.usd, q.spent.tokens, q.limit_usd
            ),
            Self::StorageFull { stored, limit } => format!(
                "This API key's stored responses take {stored} bytes of its {limit} \
                 (--max-stored-bytes-per-key; without keys, the whole server's): send \
                 'store': false, or wait until older responses pass the records' retention \
                 (--records-max-age-seconds)"
            ),
            Self::SessionNotFound { id } => format!("No session record '{id}'"),
            Self::BodiesBusy { budget, part: None } => format!(
                "The server is holding its maximum of {budget} bytes of request bodies \
                 (--max-buffered-body-bytes); retry shortly"
            ),
            Self::BodiesBusy {
                part: Some(part), ..
            } => format!(
                "Your requests in progress hold their part of {part} bytes of request bodies \
                 (a quarter of --max-buffered-body-bytes, and at least --max-body-bytes); \
                 retry when one of them has finished"
            ),
            Self::OutOfDescriptors { limit } => format!(
                "The server is at its open-file limit ({limit} descriptors): try again shortly"
            ),
            Self::ConnectionsFull { per_address: false } => {
                "The server has its maximum of connections open: try again shortly".to_string()
            }
            Self::ConnectionsFull { per_address: true } => {
                "The server has its maximum of connections from one address open: close some, or try again shortly".to_string()
            }
            Self::RecordsUnavailable => "The session records database cannot be read right now (sessions still run); retry shortly".to_string(),
            Self::ResponseNotFound { id } => format!(
                "No response '{id}' (responses are kept unless 'store' was false, for a limited time)"
            ),
        }
    }

    /// The error object (the value of the `error` key).
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({
            "message": self.message(),
            "type": self.error_type(),
            "param": self.param(),
            "code": self.code(),
        });
        self.add_upstream(&mut body);
        body
    }

    /// Adds `upstream` (each failed upstream's agent, status and words; see
    /// [`upstream`]) to a door's error object, when the session had upstream failures.
    pub fn add_upstream(&self, object: &mut serde_json::Value) {
        if let Self::Session(e) = self {
            let details = upstream::details(e);
            if !details.is_empty() {
                object["upstream"] = details.into();
            }
        }
    }

    /// Whether the same request may succeed if sent again (`x-should-retry`): limits, and
    /// upstream failures that were transient. A bad request, a bug, a broken config, agents
    /// that cannot follow the protocol or a session that ran out of time would fail the
    /// same way, after another full deliberation.
    pub fn retryable(&self) -> bool {
        match self {
            Self::RateLimited { .. }
            | Self::TooManySessions { .. }
            | Self::TooManyKeySessions { .. }
            | Self::BodiesBusy { .. }
            | Self::OutOfDescriptors { .. }
            | Self::ConnectionsFull { .. } => true,
            // Running sessions give back what they did not spend when they end.
            Self::QuotaSpent(q) => q.may_free_up(),
            Self::Session(e) => {
                e.kind == SessionErrorKind::UpstreamFailed
                    && e.agent_errors
                        .iter()
                        .any(|a| a.retry_can_help == Some(true))
            }
            _ => false,
        }
    }

    /// How long a client should wait before retrying, when we know.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Session(e)
                if e.kind == SessionErrorKind::UpstreamFailed
                    && all_rate_limited(e)
                    && !all_quota_spent(e) =>
            {
                // One agent is enough for a session: the shortest wait any upstream asked
                // for is when a retry can succeed.
                let asked = e.agent_errors.iter().filter_map(|a| a.retry_after_ms).min();
                Some(asked.map_or(Duration::from_secs(1), Duration::from_millis))
            }
            Self::RateLimited { retry_after } => Some(*retry_after),
            Self::TooManySessions { .. }
            | Self::TooManyKeySessions { .. }
            | Self::TooManySubscribers { .. }
            | Self::BodiesBusy { .. }
            | Self::OutOfDescriptors { .. }
            | Self::ConnectionsFull { .. } => Some(Duration::from_secs(1)),
            Self::QuotaSpent(q) if q.may_free_up() => Some(Duration::from_secs(1)),
            _ => None,
        }
    }
}

/// The `{id}` of a route, as a string: an id that is not UTF-8 once percent-decoded is a
/// 400 in the server's error shape (axum's own rejection is plain text).
pub struct PathId(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match axum::extract::Path::<String>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(id)) => Ok(Self(id)),
            Err(e) => Err(ApiError::invalid(
                format!("The id in the URL is not usable: {}", e.body_text()),
                Some("id"),
                "invalid_value",
            )),
        }
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

fn all_rate_limited(e: &SessionError) -> bool {
    !e.agent_errors.is_empty()
        && e.agent_errors
            .iter()
            .all(|a| a.upstream_kind == Some(ProviderErrorKind::RateLimited))
}

/// Every agent's upstream answered 429 for a spent quota: no wait helps (no `Retry-After`,
/// `x-should-retry: false`, code `insufficient_quota`).
fn all_quota_spent(e: &SessionError) -> bool {
    all_rate_limited(e)
        && e.agent_errors
            .iter()
            .all(|a| a.retry_can_help == Some(false))
}

/// Every agent that failed ran out of time (its turn's limit, or its upstream's): a
/// gateway timeout, not a panel that cannot follow the protocol. Only session failures
/// whose agents failed count: a cancelled or timed-out session keeps its own class.
fn all_timed_out(e: &SessionError) -> bool {
    matches!(
        e.kind,
        SessionErrorKind::NoUsableAgent | SessionErrorKind::UpstreamFailed
    ) && !e.agent_errors.is_empty()
        && e.agent_errors.iter().all(|a| {
            a.kind == AgentErrorKind::TurnTimeout
                || a.upstream_kind == Some(ProviderErrorKind::Timeout)
        })
}

fn session_status(e: &SessionError) -> StatusCode {
    match e.kind {
        _ if all_timed_out(e) => StatusCode::GATEWAY_TIMEOUT,
        SessionErrorKind::UpstreamFailed if all_rate_limited(e) => StatusCode::TOO_MANY_REQUESTS,
        SessionErrorKind::UpstreamFailed => StatusCode::BAD_GATEWAY,
        SessionErrorKind::NoUsableAgent => StatusCode::SERVICE_UNAVAILABLE,
        SessionErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        // The client is gone (nobody reads this status), or the server is shutting down.
        SessionErrorKind::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        // Not 429: SDKs retry that, and the same request would hit the same limit.
        SessionErrorKind::BudgetExhausted => StatusCode::PAYMENT_REQUIRED,
        // The panel's models did not produce what was asked, even when told what was wrong.
        SessionErrorKind::InvalidOutput => StatusCode::BAD_GATEWAY,
    }
}

fn session_message(e: &SessionError) -> String {
    upstream::message(e)
}

impl From<crate::app::Refusal> for ApiError {
    fn from(refusal: crate::app::Refusal) -> Self {
        use crate::app::Refusal;
        match refusal {
            Refusal::Invalid {
                message,
                param,
                code,
            } => Self::invalid(message, param, code),
            Refusal::ConfigNotFound { name, available } => Self::ConfigNotFound { name, available },
            Refusal::ConfigUnavailable { name, reason } => Self::ConfigUnavailable { name, reason },
            Refusal::NoDefaultConfig { available } => Self::NoDefaultConfig { available },
            Refusal::TooManySessions { max } => Self::TooManySessions { max },
            Refusal::TooManyKeySessions { max } => Self::TooManyKeySessions { max },
            Refusal::QuotaSpent(spent) => Self::QuotaSpent(spent),
            Refusal::OutOfDescriptors { limit } => Self::OutOfDescriptors { limit },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = json!({ "error": self.body() });
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(v) = self.retry_after().and_then(|wait| {
            HeaderValue::from_str(
                &super::retry_after::retry_after_seconds(wait)
                    .max(1)
                    .to_string(),
            )
            .ok()
        }) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if matches!(self, Self::Unauthorized { .. }) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        let retry = if self.retryable() { "true" } else { "false" };
        response
            .headers_mut()
            .insert(SHOULD_RETRY, HeaderValue::from_static(retry));
        // A door with another error shape re-renders the error from this (see
        // `doors::messages::error`); the OpenAI shape above is the default.
        response.extensions_mut().insert(self);
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::coordination::{AgentError, AgentRef};
    use massgen_core::provider::Usage;

    fn limited(label: &str, retry_after_ms: Option<u64>) -> AgentError {
        AgentError {
            agent: AgentRef {
                agent_id: label.into(),
                label: label.into(),
            },
            kind: AgentErrorKind::Upstream,
            message: "rate limited".into(),
            provider: Some("openai".into()),
            status: Some(429),
            upstream_kind: Some(ProviderErrorKind::RateLimited),
            retry_after_ms,
            retry_can_help: Some(true),
        }
    }

    fn session(agent_errors: Vec<AgentError>) -> ApiError {
        ApiError::Session(SessionError {
            kind: SessionErrorKind::UpstreamFailed,
            message: "every agent failed".into(),
            agent_errors,
            usage: Usage::default(),
            cost_usd: None,
        })
    }

    #[test]
    fn all_rate_limited_waits_the_shortest_time_an_upstream_asked_for() {
        let e = session(vec![
            limited("agent1", Some(7_000)),
            limited("agent2", Some(2_500)),
        ]);
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.retry_after(), Some(Duration::from_millis(2_500)));
        let header = e.into_response().headers()[header::RETRY_AFTER].clone();
        assert_eq!(header, "3");
        // Without a hint from any upstream, one second.
        let e = session(vec![limited("agent1", None)]);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_spent_budget_is_402_budget_exhausted_and_not_retried() {
        let e = ApiError::Session(SessionError {
            kind: SessionErrorKind::BudgetExhausted,
            message: "the session spent $0.5 of its $0.5 limit".into(),
            agent_errors: Vec::new(),
            usage: Usage::default(),
            cost_usd: Some(0.5),
        });
        assert_eq!(e.status(), StatusCode::PAYMENT_REQUIRED);
        assert_eq!(e.code(), "budget_exhausted");
        assert!(!e.retryable());
        assert_eq!(
            crate::server::doors::messages::error::error_type(&e),
            "billing_error"
        );
    }
}
