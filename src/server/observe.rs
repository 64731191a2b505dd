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

/// The span of one HTTP request; every log line of the request carries its `request_id`.
pub fn request_span(request: &axum::http::Request<Body>) -> Span {
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %request.method(),
        path = %request.uri().path(),
        "otel.name" = %request.method(),
        "otel.kind" = "server",
        "http.request.method" = %request.method(),
        "http.route" = Empty,
        "http.response.status_code" = Empty,
    );
    let _ = span.set_parent(remote_context(request.headers()));
    span
}

/// Counts every response by route template (not raw path: ids would explode the label set).
pub async fn count_requests(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = method_label(request.method());
    let span = Span::current();
    span.record("http.route", route.as_str());
    span.record("otel.name", format!("{method} {route}"));
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
