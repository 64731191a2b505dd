//! Request counters for `GET /mock/stats`, the per-model-string `fault_times` counters and
//! the per-(model string, question) numbers of `accuracy` draws.
//!
//! `cancelled` is what black-box tests rely on to prove that our server abandons upstream
//! calls when its own client goes away, so it is counted by a drop guard owned by the
//! response body: dropped before [`RequestGuard::finish`] means the client left early.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Counters {
    pub requests: u64,
    pub active: u64,
    pub completed: u64,
    pub cancelled: u64,
    pub faulted: u64,
    /// Token usage reported to clients, so tests can check that a server sums it exactly.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct Snapshot {
    #[serde(flatten)]
    pub totals: Counters,
    pub by_model: BTreeMap<String, Counters>,
    /// Model calls per HTTP version as `Debug` writes it (`HTTP/1.1`, `HTTP/2.0`).
    pub http_versions: BTreeMap<String, u64>,
    /// Connections accepted, so a test can tell whether a client reuses them.
    pub connections: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Bumped by reset, so requests that began before it do not count after it.
    epoch: u64,
    snapshot: Snapshot,
    fault_seen: HashMap<String, u64>,
    /// Draws made so far per key (see [`Stats::next_draw`]).
    draws: HashMap<String, u64>,
}

/// Keys a counter map holds at most: the keys are chosen by requests (model strings,
/// questions), and `serve --demo` runs the simulator behind a server anyone may ask.
pub const MAX_COUNTER_KEYS: usize = 100_000;

/// Makes room for `key` in `counts`: at the bound a new key starts the counts afresh (as
/// `/mock/reset` does) rather than growing the map.
fn bound(counts: &mut HashMap<String, u64>, key: &str) {
    if counts.len() >= MAX_COUNTER_KEYS && !counts.contains_key(key) {
        counts.clear();
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    inner: Mutex<Inner>,
}

impl Stats {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain counters, still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a new request for model `name` (the part before `:`).
    pub fn begin(self: &Arc<Self>, name: &str) -> RequestGuard {
        let mut inner = self.lock();
        let epoch = inner.epoch;
        for c in counters(&mut inner.snapshot, name) {
            c.requests += 1;
            c.active += 1;
        }
        RequestGuard {
            stats: Arc::clone(self),
            name: name.to_string(),
            epoch,
            finished: false,
        }
    }

    /// Whether a request with this exact model string should fault, given `fault_times`.
    pub fn should_fault(&self, model: &str, times: Option<u64>) -> bool {
        let mut inner = self.lock();
        bound(&mut inner.fault_seen, model);
        let seen = inner.fault_seen.entry(model.to_string()).or_default();
        *seen += 1;
        times.is_none_or(|n| *seen <= n)
    }

    /// How many draws were already made for `key` (then counts this one), so that identical
    /// requests draw anew instead of repeating one outcome. Reset by [`Stats::reset`], after
    /// which the same requests draw the same sequence again.
    pub fn next_draw(&self, key: &str) -> u64 {
        let mut inner = self.lock();
        bound(&mut inner.draws, key);
        let made = inner.draws.entry(key.to_string()).or_default();
        let n = *made;
        *made += 1;
        n
    }

    /// Counts a model call made over HTTP `version`.
    pub fn count_version(&self, version: &str) {
        *self
            .lock()
            .snapshot
            .http_versions
            .entry(version.to_string())
            .or_default() += 1;
    }

    /// Counts an accepted connection.
    pub fn count_connection(&self) {
        self.lock().snapshot.connections += 1;
    }

    pub fn snapshot(&self) -> Snapshot {
        self.lock().snapshot.clone()
    }

    /// Zeroes every counter except `active` (requests still running stay visible).
    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.fault_seen.clear();
        inner.draws.clear();
        let s = &mut inner.snapshot;
        s.http_versions.clear();
        s.connections = 0;
        s.totals = Counters {
            active: s.totals.active,
            ..Counters::default()
        };
        s.by_model.retain(|_, c| c.active > 0);
        for c in s.by_model.values_mut() {
            *c = Counters {
                active: c.active,
                ..Counters::default()
            };
        }
    }
}

fn counters<'a>(s: &'a mut Snapshot, name: &str) -> [&'a mut Counters; 2] {
    [
        &mut s.totals,
        s.by_model.entry(name.to_string()).or_default(),
    ]
}

/// Lives as long as the response (moved into the body stream for SSE).
#[derive(Debug)]
pub struct RequestGuard {
    stats: Arc<Stats>,
    name: String,
    epoch: u64,
    finished: bool,
}

impl RequestGuard {
    pub fn mark_faulted(&self) {
        let mut inner = self.stats.lock();
        if inner.epoch == self.epoch {
            for c in counters(&mut inner.snapshot, &self.name) {
                c.faulted += 1;
            }
        }
    }

    /// Counts the usage the response reports to the client.
    pub fn report_usage(&self, usage: &serde_json::Value) {
        let get = |k: &str| {
            usage
                .get(k)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        let mut inner = self.stats.lock();
        if inner.epoch == self.epoch {
            for c in counters(&mut inner.snapshot, &self.name) {
                c.prompt_tokens += get("prompt_tokens");
                c.completion_tokens += get("completion_tokens");
            }
        }
    }

    /// The server has produced the whole response.
    pub fn finish(&mut self) {
        self.end(false);
    }

    fn end(&mut self, cancelled: bool) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let mut inner = self.stats.lock();
        let current = inner.epoch == self.epoch;
        for c in counters(&mut inner.snapshot, &self.name) {
            c.active = c.active.saturating_sub(1);
            if current && cancelled {
                c.cancelled += 1;
            } else if current {
                c.completed += 1;
            }
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.end(true);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    #[test]
    fn guard_counts_completed_and_cancelled() {
        let stats = Arc::new(Stats::default());
        let mut a = stats.begin("a");
        let b = stats.begin("b");
        assert_eq!(stats.snapshot().totals.active, 2);
        a.finish();
        drop(a);
        drop(b);
        let s = stats.snapshot();
        assert_eq!((s.totals.requests, s.totals.active), (2, 0));
        assert_eq!((s.totals.completed, s.totals.cancelled), (1, 1));
        assert_eq!(s.by_model["b"].cancelled, 1);
        assert_eq!(s.by_model["a"].completed, 1);
    }

    #[test]
    fn reset_keeps_active_and_forgets_old_requests() {
        let stats = Arc::new(Stats::default());
        let old = stats.begin("a");
        assert!(stats.should_fault("a:fault=500,fault_times=1", Some(1)));
        assert!(!stats.should_fault("a:fault=500,fault_times=1", Some(1)));
        stats.reset();
        assert!(stats.should_fault("a:fault=500,fault_times=1", Some(1)));
        assert_eq!(stats.snapshot().totals.active, 1);
        drop(old);
        let s = stats.snapshot();
        assert_eq!(s.totals, Counters::default());
    }

    #[test]
    fn counter_maps_stay_bounded() {
        let stats = Stats::default();
        for n in 0..MAX_COUNTER_KEYS + 10 {
            stats.next_draw(&n.to_string());
        }
        assert!(stats.lock().draws.len() <= MAX_COUNTER_KEYS);
        // A key already counted keeps its count at the bound.
        let mut full: HashMap<String, u64> =
            (0..MAX_COUNTER_KEYS).map(|n| (n.to_string(), 1)).collect();
        bound(&mut full, "7");
        assert_eq!(full.len(), MAX_COUNTER_KEYS);
        bound(&mut full, "new");
        assert!(full.is_empty());
    }

    #[test]
    fn draws_are_numbered_per_key_until_a_reset() {
        let stats = Stats::default();
        assert_eq!((stats.next_draw("k"), stats.next_draw("k")), (0, 1));
        assert_eq!(stats.next_draw("other"), 0);
        stats.reset();
        assert_eq!(stats.next_draw("k"), 0);
    }
}
