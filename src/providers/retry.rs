//! Retry and time limits of upstream calls, shared by every wire format.

use std::time::Duration;

/// How an upstream call is retried and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPolicy {
    /// Attempts in all (1 = no retry). Retries happen only before the first byte.
    pub max_attempts: u32,
    /// First backoff; doubles per attempt, with full jitter.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// A `Retry-After` longer than this is not waited for: the call fails instead.
    pub max_retry_after: Duration,
    pub connect_timeout: Duration,
    /// Time to the response headers.
    pub first_byte_timeout: Duration,
    /// Longest silence inside a stream.
    pub idle_timeout: Duration,
}

impl Default for CallPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
        }
    }
}
