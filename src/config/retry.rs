//! The `retry:` section (ours, not MassGen's) → the upstream [`CallPolicy`].

use massgen_providers::retry::CallPolicy;
use serde_json::Value;

use super::ConfigError;
use super::expand::join;
use super::read::Cx;

const RETRY_KEYS: &[&str] = &[
    "max_attempts",
    "initial_backoff_ms",
    "max_backoff_ms",
    "max_retry_after_seconds",
    "connect_timeout_seconds",
    "first_byte_timeout_seconds",
    "whole_timeout_seconds",
    "idle_timeout_seconds",
];

impl Cx<'_> {
    pub(super) fn retry(&self, value: Option<&Value>) -> Result<CallPolicy, ConfigError> {
        let mut policy = CallPolicy::default();
        let Some(map) = self.section(value, "retry")? else {
            return Ok(policy);
        };
        self.only_known(map, "retry", RETRY_KEYS)?;
        let key = |k: &str| join("retry", k);
        if let Some(n) = self.count(map.get("max_attempts"), &key("max_attempts"), 1, 100)? {
            policy.max_attempts = u32::try_from(n).unwrap_or(1);
        }
        let ms = |k: &str, allow_zero| self.duration(map.get(k), &key(k), true, allow_zero);
        let secs = |k: &str, allow_zero| self.duration(map.get(k), &key(k), false, allow_zero);
        if let Some(d) = ms("initial_backoff_ms", true)? {
            policy.initial_backoff = d;
        }
        if let Some(d) = ms("max_backoff_ms", true)? {
            policy.max_backoff = d;
        }
        if let Some(d) = secs("max_retry_after_seconds", true)? {
            policy.max_retry_after = d;
        }
        if let Some(d) = secs("connect_timeout_seconds", false)? {
            policy.connect_timeout = d;
        }
        if let Some(d) = secs("first_byte_timeout_seconds", false)? {
            policy.first_byte_timeout = d;
        }
        if let Some(d) = secs("whole_timeout_seconds", false)? {
            policy.whole_timeout = d;
        }
        if let Some(d) = secs("idle_timeout_seconds", false)? {
            policy.idle_timeout = d;
        }
        if policy.max_backoff < policy.initial_backoff {
            return Err(self.err(
                &key("max_backoff_ms"),
                "must not be less than initial_backoff_ms",
            ));
        }
        Ok(policy)
    }
}
