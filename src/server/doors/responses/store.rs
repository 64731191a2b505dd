//! Stored responses: what `previous_response_id` continues (the conversation so far, as
//! neutral messages, without `instructions`, as in OpenAI's API) and what
//! `GET /v1/responses/{id}` returns (the response object). A response belongs to the API
//! key that created it; `store: false` keeps nothing. Bounded in count, age and bytes:
//! the oldest go first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use massgen_core::provider::Message;

use crate::app::Caller;

/// Bytes of stored text (messages and response bodies) kept at most, all keys together.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

pub struct Stored {
    pub owner: Caller,
    /// System and developer messages of the conversation's inputs.
    pub system: Vec<String>,
    /// The conversation, the response's own output included.
    pub messages: Vec<Message>,
    /// The response object, serialized.
    pub response: String,
}

impl Stored {
    fn bytes(&self) -> usize {
        let messages: usize = self
            .messages
            .iter()
            .map(|m| {
                m.content.len()
                    + m.images.iter().map(|i| i.size()).sum::<usize>()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                        .sum::<usize>()
            })
            .sum();
        messages + self.system.iter().map(String::len).sum::<usize>() + self.response.len()
    }
}

pub struct ResponseStore {
    inner: Mutex<Inner>,
    max_count: usize,
    max_age: Duration,
    max_bytes: usize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, (Arc<Stored>, Instant, usize)>,
    order: VecDeque<String>,
    bytes: usize,
}

impl ResponseStore {
    pub fn new(max_count: usize, max_age: Duration, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_count: max_count.max(1),
            max_age,
            max_bytes,
        }
    }

    /// Keeps `stored` under `id`, dropping the oldest responses over the bounds. A response
    /// larger than the whole budget is not kept.
    pub fn put(&self, id: String, stored: Stored) {
        let size = stored.bytes();
        if size > self.max_bytes {
            tracing::warn!(response_id = %id, bytes = size, "response too large to store");
            return;
        }
        let mut inner = lock(&self.inner);
        inner.bytes += size;
        inner
            .by_id
            .insert(id.clone(), (Arc::new(stored), Instant::now(), size));
        inner.order.push_back(id);
        while inner.order.len() > self.max_count || inner.bytes > self.max_bytes {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some((_, _, n)) = inner.by_id.remove(&old) {
                inner.bytes -= n;
            }
        }
    }

    /// The response `id` if `caller` owns it; someone else's looks like a missing one.
    pub fn get(&self, id: &str, caller: &Caller) -> Option<Arc<Stored>> {
        let inner = lock(&self.inner);
        let (stored, at, _) = inner.by_id.get(id)?;
        (stored.owner == *caller && at.elapsed() < self.max_age).then(|| stored.clone())
    }

    /// Drops responses older than the maximum age.
    pub fn expire(&self) {
        let mut inner = lock(&self.inner);
        let Inner {
            by_id,
            order,
            bytes,
        } = &mut *inner;
        order.retain(|id| {
            let keep = by_id
                .get(id)
                .is_some_and(|(_, at, _)| at.elapsed() < self.max_age);
            if !keep && let Some((_, _, n)) = by_id.remove(id) {
                *bytes -= n;
            }
            keep
        });
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::KeyId;

    fn stored(owner: Caller, text: &str) -> Stored {
        Stored {
            owner,
            system: vec![],
            messages: vec![Message::user(text)],
            response: "{}".into(),
        }
    }

    #[test]
    fn bounded_by_count_and_bytes_and_owned_by_the_creating_key() {
        let anyone = Caller::default();
        let store = ResponseStore::new(2, Duration::from_secs(60), 100);
        store.put("a".into(), stored(anyone, "x"));
        store.put("b".into(), stored(anyone, "x"));
        store.put("c".into(), stored(anyone, "x"));
        assert_eq!(store.len(), 2);
        assert!(store.get("a", &anyone).is_none());
        assert!(store.get("c", &anyone).is_some());
        // 60 + 60 bytes > 100: the older one goes.
        store.put("d".into(), stored(anyone, &"y".repeat(58)));
        store.put("e".into(), stored(anyone, &"y".repeat(58)));
        assert!(store.get("d", &anyone).is_none());
        assert!(store.get("e", &anyone).is_some());
        // Larger than the whole budget: not kept at all.
        store.put("f".into(), stored(anyone, &"z".repeat(200)));
        assert!(store.get("f", &anyone).is_none());
        let owner = Caller {
            key: Some(KeyId::from_index(0)),
        };
        store.put("g".into(), stored(owner, "x"));
        assert!(store.get("g", &owner).is_some());
        assert!(store.get("g", &anyone).is_none());
    }

    #[test]
    fn old_responses_expire() {
        let store = ResponseStore::new(10, Duration::ZERO, 1000);
        store.put("a".into(), stored(Caller::default(), "x"));
        assert!(store.get("a", &Caller::default()).is_none());
        store.expire();
        assert!(store.is_empty());
    }
}
