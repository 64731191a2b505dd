//! `Retry-After` in whole seconds, as the 429 and 503 answers send it (their texts and
//! header). A leaf: the errors and the limits that cause them both depend on it.

use std::time::Duration;

/// Retry-After in whole seconds, rounded up (callers keep it at least 1).
pub fn retry_after_seconds(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_seconds(Duration::from_millis(2001)), 3);
    }
}
