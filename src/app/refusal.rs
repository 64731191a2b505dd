//! Why the use case refused to start a session, in its own terms; the edge renders each
//! as its [`ApiError`](crate::server::error::ApiError) (same status, message and code on
//! every door).

use super::spend::QuotaSpent;

#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The request asks for something it cannot have (a 400 naming `param`).
    Invalid {
        message: String,
        param: Option<&'static str>,
        code: &'static str,
    },
    /// `massgen/<name>` that the server does not have.
    ConfigNotFound {
        name: String,
        available: Vec<String>,
    },
    /// `massgen/<name>` exists but cannot serve (failed to load, no provider, unpriced).
    ConfigUnavailable { name: String, reason: String },
    /// The server has no default panel.
    NoDefaultConfig { available: Vec<String> },
    /// `--max-sessions` are running.
    TooManySessions { max: usize },
    /// The key runs its `--max-sessions-per-key`.
    TooManyKeySessions { max: usize },
    /// The key spent its `--max-key-cost-usd-per-day`.
    QuotaSpent(QuotaSpent),
    /// The session's upstream calls do not fit in what the open-file limit (`limit`
    /// descriptors) leaves now ([`descriptors`](super::descriptors)).
    OutOfDescriptors { limit: u64 },
}

impl Refusal {
    pub fn invalid(
        message: impl Into<String>,
        param: Option<&'static str>,
        code: &'static str,
    ) -> Self {
        Self::Invalid {
            message: message.into(),
            param,
            code,
        }
    }
}
