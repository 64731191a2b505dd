//! Request-level observability: the request span (request id, W3C `traceparent`
//! continued), request metrics by route and status, and `GET /metrics`.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::error::ApiError;
use crate::telemetry::{metrics, remote_context};

/// The request id header, read by the span, echoed in the response and in Anthropic errors.
pub const REQUEST_ID: &str = "x-request-id";

/// Longest client-sent request id kept; longer ones are replaced.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Drops a client's `x-request-id` unless it is one short, safe value (at most
/// [`MAX_REQUEST_ID_LEN`] of `A-Z a-z 0-9 . _ : -`), so that the id layer behind it
/// generates one instead. Runs before anything reads the header: a forged id could
/// otherwise add fields to log lines (`a path=/admin`) or make them huge.
pub fn safe_request_id<B>(mut request: axum::http::Request<B>) -> axum::http::Request<B> {
    let mut values = request.headers().get_all(REQUEST_ID).iter();
    let keep = match (values.next(), values.next()) {
        (None, _) => return request,
        (Some(value), None) => is_safe_request_id(value.as_bytes()),
        (Some(_), Some(_)) => false,
    };
    if !keep {
        request.headers_mut().remove(REQUEST_ID);
        tracing::debug!("replacing an unusable x-request-id");
    }
    request
}

fn is_safe_request_id(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID_LEN
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// The span of one HTTP request; every log line of the request carries its `request_id`.
pub fn request_span(request: &axum::http::Request<Body>) -> Span {
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // OpenTelemetry fixes a span's name when it starts, before routing: name it from the
    // path's route template here.
    let route = route_template(request.uri().path());
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %request.method(),
        path = %request.uri().path(),
        // Formatted only by a layer that reads it (the trace export): the log skips it.
        "otel.name" = %format_args!("{} {route}", request.method()),
        "otel.kind" = "server",
        "http.request.method" = %request.method(),
        "http.route" = route,
        "http.response.status_code" = Empty,
    );
    let _ = span.set_parent(remote_context(request.headers()));
    span
}

/// The route a path will match (as axum's `MatchedPath` would say), for span names.
fn route_template(path: &str) -> &'static str {
    match path {
        "/health" => "/health",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        _ if let Some((_, route)) = super::doors::registry::route_of(path) => route,
        _ => match path.strip_prefix("/v1/sessions/") {
            Some(rest) if !rest.is_empty() && !rest.contains('/') => "/v1/sessions/{id}",
            Some(rest) if rest.ends_with("/events") && rest.matches('/').count() == 1 => {
                "/v1/sessions/{id}/events"
            }
            _ => "unmatched",
        },
    }
}

/// Counts every response by route template (not raw path: ids would explode the label set).
pub async fn count_requests(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = method_label(request.method());
    let span = Span::current();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if let Some(m) = metrics() {
        m.http_requests
            .with_label_values(&[&route, method, status.as_str()])
            .inc();
        m.http_request_duration
            .with_label_values(&[&route, method])
            .observe(started.elapsed().as_secs_f64());
    }
    response
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::OPTIONS => "OPTIONS",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

pub async fn metrics_text() -> Response {
    match metrics().map(crate::telemetry::metrics::Metrics::render) {
        Some(Ok(text)) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Some(Err(e)) => {
            tracing::error!("cannot render metrics: {e}");
            ApiError::Internal.into_response()
        }
        None => ApiError::Internal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::route_template;

    #[test]
    fn route_templates_match_the_router() {
        assert_eq!(
            route_template("/v1/chat/completions"),
            "/v1/chat/completions"
        );
        assert_eq!(route_template("/v1/sessions/sess_1"), "/v1/sessions/{id}");
        assert_eq!(
            route_template("/v1/sessions/sess_1/events"),
            "/v1/sessions/{id}/events"
        );
        assert_eq!(route_template("/v1/sessions/"), "unmatched");
        assert_eq!(route_template("/v1/responses/resp_1"), "/v1/responses/{id}");
        assert_eq!(route_template("/v1/messages"), "/v1/messages");
        assert_eq!(route_template("/v1/sessions/a/b/events"), "unmatched");
        assert_eq!(route_template("/nope"), "unmatched");
    }
}
