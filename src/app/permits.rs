//! How many sessions run at once: `--max-concurrent-sessions` for the server and
//! `--max-sessions-per-key` for each key. A session holds its places until its
//! coordination ends; over a cap the request is refused at once, never queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{KeyId, Refusal};
use crate::telemetry::metrics;

pub struct Permits {
    sessions: Option<(Arc<Semaphore>, usize)>,
    /// Sessions each key (`None`: a server without keys) runs.
    per_key: Option<KeySessions>,
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
    pub fn new(max_sessions: Option<usize>, max_per_key: Option<usize>) -> Self {
        Self {
            sessions: max_sessions.map(|n| (Arc::new(Semaphore::new(n)), n)),
            per_key: max_per_key.map(|max| KeySessions {
                max,
                held: Arc::default(),
            }),
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
}
