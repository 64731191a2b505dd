//! Anthropic's error shape, `{"type":"error","error":{"type","message"},"request_id"}`,
//! for every error on this door's paths: the handlers' own, and those of the layers in
//! front of them (authentication, rate limits, unknown paths, wrong methods, panics),
//! which produce the server's OpenAI-shaped [`ApiError`] response first.

use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::server::error::ApiError;

/// `/v1/messages` and everything under it.
pub fn is_door_path(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}

/// Anthropic's error type for the status the error has on every door.
pub fn error_type(error: &ApiError) -> &'static str {
    match error.status().as_u16() {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        _ => "api_error",
    }
}

/// The error object (the value of `error`).
pub fn error_object(error: &ApiError) -> Value {
    let mut object = json!({"type": error_type(error), "message": error.message()});
    error.add_upstream(&mut object);
    object
}

/// Re-renders an [`ApiError`] response on this door's paths in Anthropic's shape, keeping
/// the status and headers (`retry-after`, `x-should-retry`, CORS) it already has.
pub async fn reshape(request: Request, next: Next) -> Response {
    let door = is_door_path(request.uri().path());
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let response = next.run(request).await;
    let Some(error) = response
        .extensions()
        .get::<ApiError>()
        .cloned()
        .filter(|_| door)
    else {
        return response;
    };
    let (mut parts, _) = response.into_parts();
    let body = json!({"type": "error", "error": error_object(&error), "request_id": request_id});
    let fresh = axum::Json(body).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in fresh.headers() {
        parts.headers.insert(name, value.clone());
    }
    Response::from_parts(parts, fresh.into_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_follow_anthropics_status_table() {
        let ty = |e: ApiError| error_type(&e);
        assert_eq!(
            ty(ApiError::invalid("x", None, "c")),
            "invalid_request_error"
        );
        assert_eq!(
            ty(ApiError::Unauthorized {
                message: "k".into()
            }),
            "authentication_error"
        );
        assert_eq!(ty(ApiError::TooManySessions { max: 1 }), "rate_limit_error");
        assert_eq!(
            ty(ApiError::PayloadTooLarge { limit: 1 }),
            "request_too_large"
        );
        assert_eq!(ty(ApiError::Internal), "api_error");
        assert!(is_door_path("/v1/messages") && is_door_path("/v1/messages/count_tokens"));
        assert!(!is_door_path("/v1/messagesx"));
    }
}
