//! Anthropic's error shape, `{"type":"error","error":{"type","message"},"request_id"}`,
//! for every error on this door's paths: the handlers' own, and those of the layers in
//! front of them, re-rendered by the [registry](crate::server::doors::registry).

use serde_json::{Value, json};

use crate::server::error::ApiError;

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

/// The whole error body, `{"type":"error","error":{…},"request_id":…}`.
pub fn body(error: &ApiError, request_id: Option<&str>) -> Value {
    json!({"type": "error", "error": error_object(error), "request_id": request_id})
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
    }
}
