//! Per-session bookkeeping shared by the session's instrumented providers: the upstream
//! call budget, and how long at least one upstream call was in flight (so the server
//! overhead is the session's wall time minus that).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct SessionTracker {
    pub session_id: Arc<str>,
    budget: Option<u32>,
    calls: AtomicU32,
    started: Instant,
    busy: Mutex<Busy>,
}

#[derive(Debug, Default)]
struct Busy {
    in_flight: u32,
    since: Option<Instant>,
    total: Duration,
}

impl SessionTracker {
    pub fn new(session_id: Arc<str>, budget: Option<u32>) -> Arc<Self> {
        Arc::new(Self {
            session_id,
            budget,
            calls: AtomicU32::new(0),
            started: Instant::now(),
            busy: Mutex::new(Busy::default()),
        })
    }

    /// Counts one upstream call; false once the session's budget is spent.
    pub fn take_call(&self) -> bool {
        let before = self.calls.fetch_add(1, Ordering::Relaxed);
        self.budget.is_none_or(|budget| before < budget)
    }

    pub fn budget(&self) -> Option<u32> {
        self.budget
    }

    /// Marks one upstream call in flight until the returned guard drops.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.update(|b, now| {
            if b.in_flight == 0 {
                b.since = Some(now);
            }
            b.in_flight += 1;
        });
        InFlight(Some(self.clone()))
    }

    /// Time during which at least one upstream call was in flight, so far.
    pub fn upstream_busy(&self) -> Duration {
        let now = Instant::now();
        let b = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        b.total
            + b.since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    pub fn wall_time(&self) -> Duration {
        self.started.elapsed()
    }

    /// Wall time not spent waiting on any upstream: what the server itself added.
    pub fn overhead(&self) -> Duration {
        self.wall_time().saturating_sub(self.upstream_busy())
    }

    fn update(&self, f: impl FnOnce(&mut Busy, Instant)) {
        let mut b = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut b, Instant::now());
    }
}

/// One upstream call in flight; dropping it (end, error or cancellation) ends it.
#[derive(Debug)]
pub struct InFlight(Option<Arc<SessionTracker>>);

impl InFlight {
    pub fn end(&mut self) {
        if let Some(tracker) = self.0.take() {
            tracker.update(|b, now| {
                b.in_flight = b.in_flight.saturating_sub(1);
                if b.in_flight == 0
                    && let Some(since) = b.since.take()
                {
                    b.total += now.saturating_duration_since(since);
                }
            });
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_allows_exactly_n_calls() {
        let t = SessionTracker::new("s".into(), Some(2));
        assert!(t.take_call());
        assert!(t.take_call());
        assert!(!t.take_call());
        assert!(SessionTracker::new("s".into(), None).take_call());
    }

    #[test]
    fn overlapping_calls_count_once() {
        let t = SessionTracker::new("s".into(), None);
        let a = t.enter();
        std::thread::sleep(Duration::from_millis(20));
        let b = t.enter();
        drop(a);
        std::thread::sleep(Duration::from_millis(20));
        drop(b);
        let busy = t.upstream_busy();
        // Both calls together covered ~40 ms of one interval, not 60 ms of two.
        assert!(busy >= Duration::from_millis(40), "{busy:?}");
        assert!(busy <= t.wall_time());
        let frozen = t.upstream_busy();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            t.upstream_busy(),
            frozen,
            "nothing in flight: busy time stops"
        );
    }
}
