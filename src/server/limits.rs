//! Concurrency cap on sessions, per-key request rate, and per-address rates for traffic
//! without a valid key. Over a limit the answer is 429 with `Retry-After` at once: nothing
//! queues, so nothing hangs.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::Edge;
use super::error::{ApiError, SubscriberScope};
use crate::app::{Caller, KeyId};
use crate::config::ProductionSettings;
use crate::telemetry::metrics;

/// The address a request came from (the TCP peer; a proxy in front of the server is one
/// address). Requests without one (in-process) share [`ClientAddr::UNKNOWN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl ClientAddr {
    pub const UNKNOWN: Self = Self(IpAddr::V4(Ipv4Addr::UNSPECIFIED));

    pub fn of(request: &Request) -> Self {
        request
            .extensions()
            .get::<Self>()
            .copied()
            .unwrap_or(Self::UNKNOWN)
    }
}

pub struct Limits {
    /// Keyed by API key; `None` is the bucket of a server without keys.
    rate: Option<DefaultKeyedRateLimiter<Option<KeyId>>>,
    /// With keys: requests without one (the web page, preflights), per client address at
    /// the per-key quota, so one address cannot spend everybody's bucket.
    anonymous: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// With keys: failed authentications per client address.
    auth_failures: Option<DefaultKeyedRateLimiter<IpAddr>>,
    subscribers: Subscribers,
}

impl Limits {
    pub fn new(settings: &ProductionSettings) -> Self {
        let quota = settings
            .rate_limit_per_minute
            .and_then(NonZeroU32::new)
            .map(|per_minute| {
                let burst = settings
                    .rate_limit_burst
                    .and_then(NonZeroU32::new)
                    .unwrap_or(per_minute);
                Quota::per_minute(per_minute).allow_burst(burst)
            });
        let keys = !settings.api_keys.is_empty();
        Self {
            rate: quota.map(RateLimiter::keyed),
            anonymous: quota.filter(|_| keys).map(RateLimiter::keyed),
            auth_failures: NonZeroU32::new(settings.auth_failures_per_minute)
                .filter(|_| keys)
                .map(|n| RateLimiter::keyed(Quota::per_minute(n))),
            subscribers: Subscribers {
                per_session: settings.max_subscribers_per_session,
                per_key: settings.max_subscribers_per_key,
                held: Arc::default(),
            },
        }
    }

    /// A place among the readers of `session`'s events for `key`, held until the reader
    /// leaves or is dropped; 429 when the session or the key is at its limit.
    pub fn try_subscriber(
        &self,
        key: Option<KeyId>,
        session: &Arc<str>,
    ) -> Result<SubscriberSlot, ApiError> {
        let limits = &self.subscribers;
        let mut held = limits.held.lock().unwrap_or_else(PoisonError::into_inner);
        let over = |per, max| {
            count("max_subscribers");
            Err(ApiError::TooManySubscribers { per, max })
        };
        if held.sessions.get(session).copied().unwrap_or(0) >= limits.per_session {
            return over(SubscriberScope::Session, limits.per_session);
        }
        if held.keys.get(&key).copied().unwrap_or(0) >= limits.per_key {
            return over(SubscriberScope::Key, limits.per_key);
        }
        *held.sessions.entry(Arc::clone(session)).or_default() += 1;
        *held.keys.entry(key).or_default() += 1;
        Ok(SubscriberSlot {
            held: Arc::clone(&limits.held),
            session: Arc::clone(session),
            key,
        })
    }

    /// The request rate of `key`'s bucket; a caller without a key on a server with keys
    /// uses its address's bucket instead.
    pub fn check_rate(&self, key: Option<KeyId>, from: ClientAddr) -> Result<(), ApiError> {
        match (&self.anonymous, key) {
            (Some(anonymous), None) => take(anonymous, &from.0, "rate_limit"),
            _ => self
                .rate
                .as_ref()
                .map_or(Ok(()), |limiter| take(limiter, &key, "rate_limit")),
        }
    }

    /// Counts a failed authentication from `from`; once its address has failed too often,
    /// the 429 to answer instead of the 401.
    pub fn auth_failed(&self, from: ClientAddr) -> Result<(), ApiError> {
        self.auth_failures
            .as_ref()
            .map_or(Ok(()), |limiter| take(limiter, &from.0, "auth_failures"))
    }

    /// Forgets keys and addresses whose bucket is full again (keyed limiters otherwise
    /// only grow).
    pub fn retain_recent(&self) {
        if let Some(limiter) = &self.rate {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        for limiter in [&self.anonymous, &self.auth_failures].into_iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

struct Subscribers {
    per_session: usize,
    per_key: usize,
    held: Arc<Mutex<Held>>,
}

/// Readers held per session and per key; entries leave with their last reader, so the maps
/// only hold what is in use.
#[derive(Default)]
struct Held {
    sessions: HashMap<Arc<str>, usize>,
    keys: HashMap<Option<KeyId>, usize>,
}

/// One `/events` reader's place; dropping it frees the place.
pub struct SubscriberSlot {
    held: Arc<Mutex<Held>>,
    session: Arc<str>,
    key: Option<KeyId>,
}

impl Drop for SubscriberSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Held { sessions, keys } = &mut *held;
        release(sessions, &self.session);
        release(keys, &self.key);
    }
}

fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

fn take<K>(limiter: &DefaultKeyedRateLimiter<K>, key: &K, reason: &str) -> Result<(), ApiError>
where
    K: std::hash::Hash + Eq + Clone,
{
    limiter.check_key(key).map_err(|not_until| {
        count(reason);
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        ApiError::RateLimited { retry_after: wait }
    })
}

fn count(reason: &str) {
    if let Some(m) = metrics() {
        m.rejected.with_label_values(&[reason]).inc();
    }
}

/// Applies the per-key rate to everything but `/health` and `/metrics`.
pub async fn rate_limit(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path != "/health" && path != "/metrics" {
        let caller = request
            .extensions()
            .get::<Caller>()
            .copied()
            .unwrap_or_default();
        let from = ClientAddr::of(&request);
        if let Err(e) = edge.limits.check_rate(caller.key, from) {
            return e.into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rate_limit_refuses_over_the_burst_with_a_wait() {
        let limits = Limits::new(&ProductionSettings {
            rate_limit_per_minute: Some(1),
            rate_limit_burst: Some(2),
            ..ProductionSettings::default()
        });
        let here = ClientAddr::UNKNOWN;
        assert!(limits.check_rate(None, here).is_ok());
        assert!(limits.check_rate(None, here).is_ok());
        let Err(ApiError::RateLimited { retry_after }) = limits.check_rate(None, here) else {
            panic!("third request should be limited");
        };
        assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(60));
        // Another key has its own bucket.
        let key = first_key();
        assert!(limits.check_rate(Some(key), here).is_ok());
        limits.retain_recent();
    }

    #[test]
    fn subscriber_places_per_session_and_per_key_are_given_back() {
        let limits = Limits::new(&ProductionSettings {
            max_subscribers_per_session: 2,
            max_subscribers_per_key: 3,
            ..ProductionSettings::default()
        });
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let first = limits.try_subscriber(None, &a).unwrap();
        let _second = limits.try_subscriber(None, &a).unwrap();
        let per = |r: Result<SubscriberSlot, ApiError>| match r {
            Err(ApiError::TooManySubscribers { per, max }) => Some((per, max)),
            _ => None,
        };
        assert_eq!(
            per(limits.try_subscriber(None, &a)),
            Some((SubscriberScope::Session, 2))
        );
        let _third = limits.try_subscriber(None, &b).unwrap();
        assert_eq!(
            per(limits.try_subscriber(None, &b)),
            Some((SubscriberScope::Key, 3))
        );
        // Another key has its own places.
        let key = first_key();
        let other = limits.try_subscriber(Some(key), &b).unwrap();
        drop((first, other));
        assert!(limits.try_subscriber(None, &a).is_ok());
        let held = limits.subscribers.held.lock().unwrap();
        assert_eq!(held.keys.len(), 1, "a key without readers is forgotten");
    }

    /// The id the first configured key, `k`, gets.
    fn first_key() -> KeyId {
        KeyId::new(0, crate::app::Owner::of_key("k"))
    }
}
