//! Stored responses: what `previous_response_id` continues (the conversation so far, as
//! neutral messages, without `instructions`, as in OpenAI's API), what
//! `GET /v1/responses/{id}` returns (the response object), and the items an
//! `item_reference` names. A response belongs to the API key that created it;
//! `store: false` keeps nothing.
//!
//! With a records database the responses live there (every replica on it, and the next
//! process, finds them; retention is the session records'), written in the background;
//! memory holds the newest as a front, so a response is found the moment it is stored.
//! Without one, memory is all there is. Either way memory is bounded in count, age and
//! bytes: the oldest go first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use massgen_core::provider::Message;
use serde::{Deserialize, Serialize};

use super::request::Item;
use crate::app::Caller;
use crate::app::records::ReadError;
use crate::app::records::db::responses::{ResponseRow, ResponseWriter};
use crate::app::records::db::{RecordDb, now_ms, safe_error};

/// Bytes of stored text (messages and response bodies) kept at most, all keys together.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// Longest item id kept for references (OpenAI's are about 50 characters; a database
/// index takes a few thousand bytes at most).
const MAX_ITEM_ID_BYTES: usize = 256;

pub struct Stored {
    pub owner: Caller,
    /// System and developer messages of the conversation's inputs.
    pub system: Vec<String>,
    /// The conversation, the response's own output included.
    pub messages: Vec<Message>,
    /// The response object, serialized.
    pub response: String,
    /// The items a later request may name by id (output items, and input items that
    /// came with an id).
    pub items: Vec<(String, Item)>,
}

/// The conversation as the database keeps it.
#[derive(Deserialize)]
struct StoredConversation {
    system: Vec<String>,
    messages: Vec<Message>,
}

/// [`StoredConversation`] to write, borrowed.
#[derive(Serialize)]
struct ConversationRef<'a> {
    system: &'a [String],
    messages: &'a [Message],
}

impl Stored {
    fn bytes(&self) -> usize {
        // Each message and item also costs its slot and index entries, whatever its text:
        // counted, so a flood of empty items weighs what it holds.
        let messages: usize = self.messages.iter().map(|m| message_bytes(m) + 64).sum();
        let items: usize = self
            .items
            .iter()
            .map(|(id, item)| {
                2 * id.len()
                    + 256
                    + match item {
                        Item::System { text } => text.len(),
                        Item::Message { message } => message_bytes(message),
                        Item::Call { call } => call_bytes(call),
                        Item::Reasoning => 0,
                    }
            })
            .sum();
        messages + items + self.system.iter().map(String::len).sum::<usize>() + self.response.len()
    }

    /// Its rows, for the database.
    fn row(&self, id: &str) -> Result<ResponseRow, serde_json::Error> {
        let conversation = serde_json::to_string(&ConversationRef {
            system: &self.system,
            messages: &self.messages,
        })?;
        let items = self
            .items
            .iter()
            .map(|(id, item)| Ok((id.clone(), serde_json::to_string(item)?)))
            .collect::<Result<_, serde_json::Error>>()?;
        Ok(ResponseRow {
            id: id.to_string(),
            owner: self.owner.owner().to_string(),
            created_ms: now_ms(),
            conversation,
            body: self.response.clone(),
            items,
        })
    }
}

fn message_bytes(m: &Message) -> usize {
    m.content.len()
        + m.images.iter().map(|i| i.size()).sum::<usize>()
        + m.tool_calls.iter().map(call_bytes).sum::<usize>()
}

fn call_bytes(c: &massgen_core::provider::ToolCall) -> usize {
    c.id.len() + c.name.len() + c.arguments.len()
}

pub struct ResponseStore {
    inner: Mutex<Inner>,
    max_count: usize,
    max_age: Duration,
    max_bytes: usize,
    db: Option<(Arc<RecordDb>, ResponseWriter)>,
}

struct Kept {
    stored: Arc<Stored>,
    at: Instant,
    size: usize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Kept>,
    order: VecDeque<String>,
    bytes: usize,
    /// (owner, item id) → the newest response holding that item.
    items: HashMap<(Caller, String), String>,
}

impl Inner {
    fn remove(&mut self, id: &str) {
        let Some(kept) = self.by_id.remove(id) else {
            return;
        };
        self.bytes -= kept.size;
        for (item, _) in &kept.stored.items {
            let key = (kept.stored.owner, item.clone());
            if self.items.get(&key).is_some_and(|holder| holder == id) {
                self.items.remove(&key);
            }
        }
    }
}

impl ResponseStore {
    /// In memory only: at most `max_count` responses and `max_bytes`, for `max_age`.
    pub fn new(max_count: usize, max_age: Duration, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_count: max_count.max(1),
            max_age,
            max_bytes,
            db: None,
        }
    }

    /// Kept in `db` (when given) with the same memory bounds for the front; starts the
    /// database writer (inside a Tokio runtime; outside one, memory only).
    pub fn with_db(
        max_count: usize,
        max_age: Duration,
        max_bytes: usize,
        db: Option<Arc<RecordDb>>,
    ) -> Self {
        let mut store = Self::new(max_count, max_age, max_bytes);
        store.db = match (db, tokio::runtime::Handle::try_current()) {
            (Some(db), Ok(_)) => {
                let writer = ResponseWriter::start(Arc::clone(&db));
                Some((db, writer))
            }
            (Some(_), Err(_)) => {
                tracing::warn!("no runtime to write stored responses: they stay in memory");
                None
            }
            (None, _) => None,
        };
        store
    }

    /// Keeps `stored` under `id`, dropping the oldest responses over the bounds, and
    /// queues it for the database. A response larger than the whole budget is not kept.
    pub fn put(&self, id: String, mut stored: Stored) {
        stored
            .items
            .retain(|(item, _)| item.len() <= MAX_ITEM_ID_BYTES);
        let size = stored.bytes();
        if size > self.max_bytes {
            tracing::warn!(response_id = %id, bytes = size, "response too large to store");
            return;
        }
        if let Some((_, writer)) = &self.db {
            match stored.row(&id) {
                Ok(row) => {
                    if !writer.queue(row) {
                        tracing::warn!(
                            response_id = %id,
                            "stored response kept in memory only: the records database has been failing and its queue is full"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(response_id = %id, "cannot serialize a stored response: {e}")
                }
            }
        }
        let stored = Arc::new(stored);
        let mut inner = lock(&self.inner);
        if inner.by_id.contains_key(&id) {
            inner.remove(&id);
            inner.order.retain(|o| *o != id);
        }
        for (item, _) in &stored.items {
            inner.items.insert((stored.owner, item.clone()), id.clone());
        }
        inner.bytes += size;
        inner.by_id.insert(
            id.clone(),
            Kept {
                stored,
                at: Instant::now(),
                size,
            },
        );
        inner.order.push_back(id);
        while inner.by_id.len() > self.max_count || inner.bytes > self.max_bytes {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            inner.remove(&old);
        }
    }

    /// The response `id` if `caller` owns it; someone else's looks like a missing one.
    /// `Err`: the database cannot be read now.
    pub async fn get(&self, id: &str, caller: &Caller) -> Result<Option<Arc<Stored>>, ReadError> {
        if let Some(found) = self.in_memory(id) {
            return Ok((found.owner == *caller).then_some(found));
        }
        let Some((db, _)) = &self.db else {
            return Ok(None);
        };
        let row = db
            .response(id, caller.owner(), self.since_ms())
            .await
            .map_err(read_failed)?;
        let Some((conversation, response)) = row else {
            return Ok(None);
        };
        let conversation: StoredConversation =
            serde_json::from_str(&conversation).map_err(unreadable)?;
        Ok(Some(Arc::new(Stored {
            owner: *caller,
            system: conversation.system,
            messages: conversation.messages,
            response,
            items: Vec::new(),
        })))
    }

    /// Item `id` of `caller`'s stored responses. `Err`: the database cannot be read now.
    pub async fn item(&self, id: &str, caller: &Caller) -> Result<Option<Item>, ReadError> {
        {
            let inner = lock(&self.inner);
            let found = inner
                .items
                .get(&(*caller, id.to_string()))
                .and_then(|holder| inner.by_id.get(holder))
                .filter(|kept| kept.at.elapsed() < self.max_age)
                .and_then(|kept| kept.stored.items.iter().rev().find(|(i, _)| i == id));
            if let Some((_, item)) = found {
                return Ok(Some(item.clone()));
            }
        }
        let Some((db, _)) = &self.db else {
            return Ok(None);
        };
        let body = db
            .response_item(id, caller.owner(), self.since_ms())
            .await
            .map_err(read_failed)?;
        body.map(|b| serde_json::from_str(&b).map_err(unreadable))
            .transpose()
    }

    fn in_memory(&self, id: &str) -> Option<Arc<Stored>> {
        let inner = lock(&self.inner);
        let kept = inner.by_id.get(id)?;
        (kept.at.elapsed() < self.max_age).then(|| kept.stored.clone())
    }

    /// The oldest creation time still within the maximum age.
    fn since_ms(&self) -> u64 {
        now_ms().saturating_sub(u64::try_from(self.max_age.as_millis()).unwrap_or(u64::MAX))
    }

    /// Drops responses older than the maximum age from memory (the database has its own
    /// retention).
    pub fn expire(&self) {
        let mut inner = lock(&self.inner);
        let old: Vec<String> = inner
            .order
            .iter()
            .filter(|id| {
                inner
                    .by_id
                    .get(*id)
                    .is_none_or(|kept| kept.at.elapsed() >= self.max_age)
            })
            .cloned()
            .collect();
        for id in &old {
            inner.remove(id);
        }
        let Inner { by_id, order, .. } = &mut *inner;
        order.retain(|id| by_id.contains_key(id));
    }

    /// Writes what still waits for the database, for at most `within` (shutdown).
    pub async fn close(&self, within: Duration) {
        if let Some((_, writer)) = &self.db {
            writer.drain(within).await;
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn read_failed(e: sqlx::Error) -> ReadError {
    tracing::warn!("cannot read stored responses: {}", safe_error(&e));
    ReadError
}

fn unreadable(e: serde_json::Error) -> ReadError {
    tracing::warn!("a stored response in the records database cannot be read: {e}");
    ReadError
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::KeyId;
    use crate::config::RecordsDb;

    fn stored(owner: Caller, text: &str) -> Stored {
        Stored {
            owner,
            system: vec![],
            messages: vec![Message::user(text)],
            response: "{}".into(),
            items: vec![],
        }
    }

    fn with_item(owner: Caller, item: &str, text: &str) -> Stored {
        Stored {
            items: vec![(
                item.into(),
                Item::Message {
                    message: Message::assistant(text),
                },
            )],
            ..stored(owner, "q")
        }
    }

    fn text(item: Option<Item>) -> Option<String> {
        match item? {
            Item::Message { message } => Some(message.content),
            _ => None,
        }
    }

    #[tokio::test]
    async fn bounded_by_count_and_bytes_and_owned_by_the_creating_key() {
        let anyone = Caller::default();
        // 100 bytes of text, and 64 for the one message each stored response holds.
        let store = ResponseStore::new(2, Duration::from_secs(60), 164);
        store.put("a".into(), stored(anyone, "x"));
        store.put("b".into(), stored(anyone, "x"));
        store.put("c".into(), stored(anyone, "x"));
        assert_eq!(store.len(), 2);
        assert!(store.get("a", &anyone).await.unwrap().is_none());
        assert!(store.get("c", &anyone).await.unwrap().is_some());
        // 60 + 60 bytes (and 64 + 64) > 164: the older one goes.
        store.put("d".into(), stored(anyone, &"y".repeat(58)));
        store.put("e".into(), stored(anyone, &"y".repeat(58)));
        assert!(store.get("d", &anyone).await.unwrap().is_none());
        assert!(store.get("e", &anyone).await.unwrap().is_some());
        // Larger than the whole budget: not kept at all.
        store.put("f".into(), stored(anyone, &"z".repeat(200)));
        assert!(store.get("f", &anyone).await.unwrap().is_none());
        let owner = Caller {
            key: Some(KeyId::from_index(0)),
        };
        store.put("g".into(), stored(owner, "x"));
        assert!(store.get("g", &owner).await.unwrap().is_some());
        assert!(store.get("g", &anyone).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn items_are_found_by_owner_the_newest_wins_and_they_go_with_their_response() {
        let one = Caller {
            key: Some(KeyId::from_index(1)),
        };
        let store = ResponseStore::new(2, Duration::from_secs(60), 10_000);
        store.put("r1".into(), with_item(one, "fco_1", "first"));
        store.put("r2".into(), with_item(one, "fco_1", "second"));
        assert_eq!(
            text(store.item("fco_1", &one).await.unwrap()).as_deref(),
            Some("second")
        );
        assert!(
            store
                .item("fco_1", &Caller::default())
                .await
                .unwrap()
                .is_none()
        );
        // r1 goes (count): the item is r2's and stays.
        store.put("r3".into(), stored(one, "x"));
        assert!(store.item("fco_1", &one).await.unwrap().is_some());
        // r2 goes: so does the item.
        store.put("r4".into(), stored(one, "x"));
        assert!(store.item("fco_1", &one).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn old_responses_expire() {
        let store = ResponseStore::new(10, Duration::ZERO, 1000);
        store.put("a".into(), with_item(Caller::default(), "m", "x"));
        assert!(store.get("a", &Caller::default()).await.unwrap().is_none());
        assert!(store.item("m", &Caller::default()).await.unwrap().is_none());
        store.expire();
        assert!(store.is_empty());
        assert!(lock(&store.inner).items.is_empty());
    }

    #[tokio::test]
    async fn with_a_database_a_new_store_finds_what_an_earlier_one_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            RecordDb::connect(&RecordsDb::Sqlite(dir.path().join("r.db")))
                .await
                .unwrap(),
        );
        db.migrate(usize::MAX).await.unwrap();
        let owner = Caller {
            key: Some(KeyId::from_index(0)),
        };
        let first = ResponseStore::with_db(10, Duration::from_secs(60), 10_000, Some(db.clone()));
        let mut kept = with_item(owner, "msg_1", "Hello.");
        kept.system = vec!["Be brief.".into()];
        kept.response = "{\"id\":\"resp_1\"}".into();
        first.put("resp_1".into(), kept);
        first.close(Duration::from_secs(10)).await;
        let second = ResponseStore::with_db(10, Duration::from_secs(60), 10_000, Some(db.clone()));
        let got = second.get("resp_1", &owner).await.unwrap().unwrap();
        assert_eq!(got.response, "{\"id\":\"resp_1\"}");
        assert_eq!(got.system, ["Be brief."]);
        assert_eq!(got.messages[0].content, "q");
        assert_eq!(
            text(second.item("msg_1", &owner).await.unwrap()).as_deref(),
            Some("Hello.")
        );
        assert!(
            second
                .get("resp_1", &Caller::default())
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            second
                .item("msg_1", &Caller::default())
                .await
                .unwrap()
                .is_none()
        );
        // A database that cannot be read is an error, not a missing response.
        db.pool().close().await;
        assert!(second.get("resp_2", &owner).await.is_err());
        assert!(second.item("msg_2", &owner).await.is_err());
    }
}
