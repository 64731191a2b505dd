//! What every door's request parser shares: the fields every body has ([`Shared`]: the
//! `massgen` extension, sampling, the answer's bounds under each door's own names), read
//! beside the door's own serde-derived body in one pass ([`WithShared`]) with their range
//! checks in their deserializers; the shapes of [`shape`]; and the 400s every door words
//! alike.

mod body;
pub mod shape;
mod shared;

pub use body::WithShared;
#[cfg(test)]
pub use body::overlap;
pub use shared::{MAX_REQUEST_MODELS, Massgen, Shared, count, count_of, stops};

use serde_json::Value;

use massgen_core::coordination::Quorum;

use crate::server::error::ApiError;

/// A field whose meaning a panel cannot honour (400 `unsupported_parameter`).
pub fn unsupported(param: &'static str, message: &str) -> ApiError {
    ApiError::invalid(message, Some(param), "unsupported_parameter")
}

pub fn type_error(param: &'static str, expected: &str) -> ApiError {
    ApiError::invalid(
        format!("'{param}' must be {expected}"),
        Some(param),
        "invalid_type",
    )
}

/// A voting quorum (`"all"`, `"majority"`, a number) under `param`.
pub fn quorum(value: &Value, param: &'static str) -> Result<Quorum, ApiError> {
    Quorum::parse(value)
        .map_err(|e| ApiError::invalid(format!("'{param}' {e}"), Some(param), "invalid_value"))
}

/// A cost limit under `param`: a number of USD above 0.
pub fn max_cost(value: &Value, param: &'static str) -> Result<f64, ApiError> {
    value
        .as_f64()
        .filter(|n| n.is_finite() && *n > 0.0)
        .ok_or_else(|| {
            ApiError::invalid(
                format!("'{param}' must be a number of USD above 0"),
                Some(param),
                "invalid_value",
            )
        })
}
