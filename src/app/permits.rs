//! How many sessions run at once: `--max-concurrent-sessions` for the server,
//! `--max-sessions-per-key` for each key, and the descriptors their upstream calls need
//! under the open-file limit ([`descriptors`](super::descriptors)). A session holds its
//! places until its coordination ends; over a cap the request is refused at once, never
//! queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::descriptors::{self, Budget, Descriptors};
use super::{KeyId, Refusal};
use crate::config::PanelConfig;
use crate::telemetry::metrics;

pub struct Permits {
    sessions: Option<(Arc<Semaphore>, usize)>,
    /// Sessions each key (`None`: a server without keys) runs.
    per_key: Option<KeySessions>,
    /// The process's descriptor budget, where `serve` installed one.
    descriptors: Option<Arc<Budget>>,
}

struct KeySessions {
    max: usize,
    /// Running sessions per key; a key leaves with its last session.
    held: Arc<Mutex<HashMap<Option<KeyId>, usize>>>,
}

/// One running session's place under `--max-sessions-per-key`; dropping it frees it.
pub struct KeySessionSlot {
    held: Arc<Mutex<HashMap<Option<KeyId>, usize>>>,
    key: Option<KeyId>,
}

impl Drop for KeySessionSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl Permits {
    /// The caps, and the process's descriptor budget if one is installed already (the
    /// open-file limit is the process's: `serve` installs it before building its state).
    pub fn new(max_sessions: Option<usize>, max_per_key: Option<usize>) -> Self {
        Self {
            sessions: max_sessions.map(|n| (Arc::new(Semaphore::new(n)), n)),
            per_key: max_per_key.map(|max| KeySessions {
                max,
                held: Arc::default(),
            }),
            descriptors: descriptors::installed(),
        }
    }

    /// These permits, drawing sessions' descriptors from `budget`.
    pub fn with_descriptors(mut self, budget: Arc<Budget>) -> Self {
        self.descriptors = Some(budget);
        self
    }

    /// The descriptors a session of `panel` needs for its upstream calls, held until its
    /// coordination ends; refused when the open-file limit leaves too few now. Taken
    /// before any upstream call, so no session fails half-way for want of one.
    pub fn try_descriptors(&self, panel: &PanelConfig) -> Result<Option<Descriptors>, Refusal> {
        let Some(budget) = &self.descriptors else {
            return Ok(None);
        };
        let need = budget.session_need(panel);
        match budget.try_take(need) {
            Some(taken) => Ok(Some(taken)),
            None => {
                count("descriptors");
                budget.warn_once(need);
                Err(Refusal::OutOfDescriptors {
                    limit: budget.split().limit,
                })
            }
        }
    }

    /// A slot for one more session, held until the session ends.
    pub fn try_session(&self) -> Result<Option<OwnedSemaphorePermit>, Refusal> {
        let Some((semaphore, max)) = &self.sessions else {
            return Ok(None);
        };
        match semaphore.clone().try_acquire_owned() {
            Ok(permit) => Ok(Some(permit)),
            Err(_) => {
                count("max_sessions");
                Err(Refusal::TooManySessions { max: *max })
            }
        }
    }

    /// A place among `key`'s running sessions, held until the session's coordination
    /// ends; refused when the key runs its `--max-sessions-per-key` already.
    pub fn try_key_session(&self, key: Option<KeyId>) -> Result<Option<KeySessionSlot>, Refusal> {
        let Some(limit) = &self.per_key else {
            return Ok(None);
        };
        let mut held = limit.held.lock().unwrap_or_else(PoisonError::into_inner);
        let running = held.entry(key).or_default();
        if *running >= limit.max {
            count("max_sessions_per_key");
            return Err(Refusal::TooManyKeySessions { max: limit.max });
        }
        *running += 1;
        Ok(Some(KeySessionSlot {
            held: Arc::clone(&limit.held),
            key,
        }))
    }
}

fn count(reason: &str) {
    if let Some(m) = metrics() {
        m.rejected.with_label_values(&[reason]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_cap_gives_back_its_slot() {
        let permits = Permits::new(Some(1), None);
        let permit = permits.try_session().unwrap();
        assert!(matches!(
            permits.try_session(),
            Err(Refusal::TooManySessions { max: 1 })
        ));
        drop(permit);
        assert!(permits.try_session().is_ok());
        assert!(Permits::new(None, None).try_session().unwrap().is_none());
    }

    #[test]
    fn a_keys_session_places_are_its_own_and_given_back() {
        let permits = Permits::new(None, Some(1));
        let first = permits.try_key_session(None).unwrap();
        assert!(matches!(
            permits.try_key_session(None),
            Err(Refusal::TooManyKeySessions { max: 1 })
        ));
        let key = KeyId::new(0, crate::app::Owner::of_key("k"));
        let other = permits.try_key_session(Some(key)).unwrap();
        drop((first, other));
        assert!(permits.try_key_session(None).unwrap().is_some());
        let held = permits.per_key.as_ref().unwrap().held.lock().unwrap();
        assert_eq!(held.len(), 0, "a key without sessions is forgotten");
        drop(held);
        assert!(
            Permits::new(None, None)
                .try_key_session(None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_session_that_does_not_fit_the_descriptor_budget_is_refused() {
        let layout = descriptors::Layout {
            upstream_hosts: 0,
            mcp_servers: 0,
            record_files: false,
            upstream_in_process: false,
            calls_hold_descriptors: true,
            max_connections: 0,
        };
        // 64 reserved, 5 for sessions: one three-agent session, not two.
        let permits = Permits::new(None, None).with_descriptors(Budget::new(&layout, 69));
        let panel = crate::config::demo_panel("http://127.0.0.1:9/v1");
        let first = permits.try_descriptors(&panel).unwrap();
        assert!(first.is_some());
        assert_eq!(
            permits.try_descriptors(&panel).err(),
            Some(Refusal::OutOfDescriptors { limit: 69 })
        );
        drop(first);
        assert!(permits.try_descriptors(&panel).unwrap().is_some());
        let unbudgeted = Permits {
            descriptors: None,
            ..Permits::new(None, None)
        };
        assert!(unbudgeted.try_descriptors(&panel).unwrap().is_none());
    }
}
