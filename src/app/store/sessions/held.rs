//! The records held in memory, by id and oldest first: with `--records-db memory` all of
//! them (bounded in count and age), with a database the live ones the writer has not yet
//! committed whole. The store and the writer both use it, so it sits below both.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::live::{Dirty, SessionRecord};
use crate::app::Caller;
use crate::app::store::lock;

pub struct Live {
    inner: Mutex<Inner>,
    max_sessions: usize,
    max_age: Duration,
    /// With a database: records are queued here for the writer.
    dirty: Option<Arc<Dirty>>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Arc<str>, Arc<SessionRecord>>,
    order: VecDeque<Arc<str>>,
}

impl Live {
    /// At most `max_sessions` (at least one) records; finished ones older than `max_age`
    /// go at the next [`Self::expire`]. `dirty`: the writer's queue, with a database.
    pub(super) fn new(max_sessions: usize, max_age: Duration, dirty: Option<Arc<Dirty>>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_sessions: max_sessions.max(1),
            max_age,
            dirty,
        }
    }

    /// The writer's queue, with a database.
    pub(super) fn dirty(&self) -> Option<&Arc<Dirty>> {
        self.dirty.as_ref()
    }

    pub(super) fn get(&self, id: &str) -> Option<Arc<SessionRecord>> {
        lock(&self.inner).by_id.get(id).cloned()
    }

    /// Forgets a record the database now holds whole.
    pub(super) fn remove(&self, id: &str) {
        let mut inner = lock(&self.inner);
        if inner.by_id.remove(id).is_some() {
            inner.order.retain(|o| &**o != id);
        }
    }

    pub(super) fn insert(&self, record: Arc<SessionRecord>) {
        let mut inner = lock(&self.inner);
        inner.by_id.insert(record.id.clone(), record.clone());
        inner.order.push_back(record.id.clone());
        if self.dirty.is_none() {
            while inner.order.len() > self.max_sessions {
                if let Some(old) = inner.order.pop_front() {
                    inner.by_id.remove(&old);
                }
            }
            return;
        }
        // With a database, a running record must stay (the writer reads it); finished
        // ones the database could not take yet are dropped oldest first.
        let mut dropped = 0u64;
        while inner.order.len() > self.max_sessions {
            let Inner { by_id, order } = &mut *inner;
            let Some(at) = order
                .iter()
                .position(|id| by_id.get(id).is_some_and(|r| r.is_finished()))
            else {
                break;
            };
            if let Some(id) = order.remove(at) {
                by_id.remove(&id);
                dropped += 1;
            }
        }
        drop(inner);
        if dropped > 0 {
            if let Some(m) = crate::telemetry::metrics() {
                m.records_unsaved_dropped.inc_by(dropped);
            }
            tracing::warn!(
                dropped,
                "finished session records dropped unsaved: the records database has been failing and --records-max records wait in memory"
            );
        }
    }

    /// The newest `limit` records `caller` may read, newest first.
    pub(super) fn newest(
        &self,
        caller: &Caller,
        limit: usize,
        doors: Option<&[&str]>,
    ) -> Vec<Arc<SessionRecord>> {
        let inner = lock(&self.inner);
        inner
            .order
            .iter()
            .rev()
            .filter_map(|id| inner.by_id.get(id))
            .filter(|r| r.owner == *caller)
            .filter(|r| doors.is_none_or(|d| d.contains(&&*r.info.door)))
            .take(limit)
            .cloned()
            .collect()
    }

    /// Drops finished records older than the maximum age at `now`; running ones stay.
    pub(super) fn expire(&self, now: Instant) {
        let max_age = self.max_age;
        let mut inner = lock(&self.inner);
        let Inner { by_id, order } = &mut *inner;
        order.retain(|id| {
            let keep = by_id.get(id).is_some_and(|r| {
                r.finished_at()
                    .is_none_or(|at| now.saturating_duration_since(at) < max_age)
            });
            if !keep {
                by_id.remove(id);
            }
            keep
        });
    }

    pub(super) fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    /// Half of what may be held is held: finished records are near being dropped unsaved
    /// (see [`Self::insert`]), so the writer must not wait to gather more.
    pub(super) fn filling(&self) -> bool {
        lock(&self.inner).order.len().saturating_mul(2) >= self.max_sessions
    }
}
