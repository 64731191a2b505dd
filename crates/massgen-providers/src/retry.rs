//! Retry and time limits of upstream calls, shared by every wire format.
//!
//! Everything here is pure (the random number and the current time are parameters) so
//! the policy is unit-tested without sleeping; the wire formats do the sleeping.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderMap;

use crate::ProviderErrorKind;

/// Hears of every retry of an upstream call: the provider's name and why the failed attempt
/// failed. The application passes one down (it counts retries as a metric); this crate
/// never calls up.
pub type RetryObserver = Arc<dyn Fn(&str, ProviderErrorKind) + Send + Sync>;

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
    /// Time to the response headers of a whole (non-streamed) call, which most upstreams
    /// send only once the answer is generated: the generation's time, as a client calling
    /// the model without a stream would give it (OpenAI's SDKs wait 600 s). A whole call
    /// that runs out of it is not retried: the upstream may have generated (and billed) it.
    pub whole_timeout: Duration,
    /// Longest wait for an event with data inside a stream (SSE comments do not count); an
    /// error body's time too, when shorter than the 10 s it has.
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
            whole_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryStep {
    /// Wait this long, then try again.
    Retry(Duration),
    /// Fail with the attempt's error.
    GiveUp,
}

/// Why an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttemptFailure {
    /// Whether the failure kind is worth another attempt (429, 5xx, connection, timeout
    /// before the first byte).
    pub retryable: bool,
    /// The wait the upstream asked for (`retry-after-ms` / `Retry-After`).
    pub server_wait: Option<Duration>,
    /// The upstream's `x-should-retry` header: it overrides `retryable` either way, as
    /// the OpenAI and Anthropic SDKs do.
    pub should_retry: Option<bool>,
}

/// Full-jitter exponential backoff before retry number `retry` (1 = first retry):
/// a uniform wait in `[0, min(max_backoff, initial_backoff * 2^(retry-1)))`.
/// `random` is a number in `[0, 1)`; values outside are clamped.
pub fn backoff_delay(policy: &CallPolicy, retry: u32, random: f64) -> Duration {
    let exponent = retry.saturating_sub(1).min(30);
    let ceiling = policy
        .initial_backoff
        .saturating_mul(1u32 << exponent)
        .min(policy.max_backoff);
    let factor = if random.is_finite() {
        random.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ceiling.mul_f64(factor)
}

/// Decides whether to retry after `attempts_made` attempts failed the way `failure` says.
pub fn next_step(
    policy: &CallPolicy,
    attempts_made: u32,
    failure: AttemptFailure,
    random: f64,
) -> RetryStep {
    let retryable = failure.should_retry.unwrap_or(failure.retryable);
    if !retryable || attempts_made >= policy.max_attempts {
        return RetryStep::GiveUp;
    }
    match failure.server_wait {
        // Waiting longer than allowed would hold the agent's turn hostage: fail now and
        // let the caller see `retry_after`.
        Some(wait) if wait > policy.max_retry_after => RetryStep::GiveUp,
        Some(wait) => RetryStep::Retry(wait),
        None => RetryStep::Retry(backoff_delay(policy, attempts_made, random)),
    }
}

/// The wait an upstream asked for: `retry-after-ms` (milliseconds, may be fractional)
/// first, then `Retry-After` (seconds, may be fractional, or an HTTP date relative to
/// `now`). Unparseable or negative values are ignored; a date in the past means no wait.
pub fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Some(seconds) = parse_non_negative(value) {
        return Some(Duration::from_secs_f64(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The `x-should-retry` header: `Some(true|false)` when present and readable.
pub fn parse_should_retry(headers: &HeaderMap) -> Option<bool> {
    let value = headers.get("x-should-retry")?.to_str().ok()?.trim();
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn parse_non_negative(text: &str) -> Option<f64> {
    let value: f64 = text.parse().ok()?;
    // Bounded so Duration::from_secs_f64 can never panic on absurd values.
    (value.is_finite() && value >= 0.0).then_some(value.min(86_400_000.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn policy() -> CallPolicy {
        CallPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            max_retry_after: Duration::from_secs(10),
            ..CallPolicy::default()
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn backoff_doubles_with_full_jitter_and_is_capped() {
        let p = policy();
        assert_eq!(backoff_delay(&p, 1, 0.5), Duration::from_millis(50));
        assert_eq!(backoff_delay(&p, 2, 0.5), Duration::from_millis(100));
        assert_eq!(backoff_delay(&p, 3, 0.5), Duration::from_millis(175));
        assert_eq!(backoff_delay(&p, 30, 1.0), Duration::from_millis(350));
        assert_eq!(backoff_delay(&p, 2, 0.0), Duration::ZERO);
        assert_eq!(
            backoff_delay(&p, u32::MAX, 0.999),
            p.max_backoff.mul_f64(0.999)
        );
        assert_eq!(backoff_delay(&p, 1, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn next_step_respects_attempts_and_retryability() {
        let p = policy();
        let retryable = AttemptFailure {
            retryable: true,
            ..AttemptFailure::default()
        };
        assert_eq!(
            next_step(&p, 1, retryable, 1.0),
            RetryStep::Retry(Duration::from_millis(100))
        );
        assert_eq!(next_step(&p, 4, retryable, 1.0), RetryStep::GiveUp);
        assert_eq!(
            next_step(&p, 1, AttemptFailure::default(), 1.0),
            RetryStep::GiveUp
        );
    }

    #[test]
    fn server_wait_replaces_backoff_unless_too_long() {
        let p = policy();
        let asked = |secs| AttemptFailure {
            retryable: true,
            server_wait: Some(Duration::from_secs(secs)),
            should_retry: None,
        };
        assert_eq!(
            next_step(&p, 1, asked(3), 0.0),
            RetryStep::Retry(Duration::from_secs(3))
        );
        assert_eq!(next_step(&p, 1, asked(11), 0.0), RetryStep::GiveUp);
    }

    #[test]
    fn should_retry_header_overrides_both_ways() {
        let p = policy();
        let forbid = AttemptFailure {
            retryable: true,
            server_wait: None,
            should_retry: Some(false),
        };
        assert_eq!(next_step(&p, 1, forbid, 0.5), RetryStep::GiveUp);
        let force = AttemptFailure {
            retryable: false,
            server_wait: None,
            should_retry: Some(true),
        };
        assert!(matches!(next_step(&p, 1, force, 0.5), RetryStep::Retry(_)));
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ms = headers(&[("retry-after-ms", "1500.5"), ("retry-after", "9")]);
        assert_eq!(
            parse_retry_after(&ms, now),
            Some(Duration::from_secs_f64(1.5005))
        );
        let secs = headers(&[("retry-after", " 2.5 ")]);
        assert_eq!(
            parse_retry_after(&secs, now),
            Some(Duration::from_millis(2500))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_str(&date).unwrap_or(HeaderValue::from_static("x")),
        );
        assert_eq!(
            parse_retry_after(&dated, now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        let mut old = HeaderMap::new();
        old.insert(
            "retry-after",
            HeaderValue::from_str(&past).unwrap_or(HeaderValue::from_static("x")),
        );
        assert_eq!(parse_retry_after(&old, now), Some(Duration::ZERO));
        let bad = headers(&[("retry-after-ms", "-5"), ("retry-after", "soon")]);
        assert_eq!(parse_retry_after(&bad, now), None);
        assert_eq!(parse_retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn should_retry_header_values() {
        assert_eq!(
            parse_should_retry(&headers(&[("x-should-retry", "false")])),
            Some(false)
        );
        assert_eq!(
            parse_should_retry(&headers(&[("x-should-retry", "TRUE")])),
            Some(true)
        );
        assert_eq!(
            parse_should_retry(&headers(&[("x-should-retry", "maybe")])),
            None
        );
        assert_eq!(parse_should_retry(&HeaderMap::new()), None);
    }
}
