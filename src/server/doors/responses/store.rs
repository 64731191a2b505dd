//! Stored responses: what `GET /v1/responses/{id}` returns (the response object), what
//! `previous_response_id` continues and what an `item_reference` names. A response
//! belongs to the API key that created it; `store: false` keeps nothing.
//!
//! A stored conversation is a chain, not copies: each response keeps its own turn (the
//! input of its request, as neutral messages without `instructions`, and its answer) and
//! the id of the response it continued; [`chain`] walks it back. So a turn stores what it
//! adds, whatever the conversation's length, and using a response (continuing it,
//! referencing one of its items) renews the responses it was built on: they are kept as
//! long as their latest use, the oldest turns of a chain in use never go first.
//!
//! With a records database the responses live there (every replica on it, and the next
//! process, finds them; retention is the session records'), written in the background;
//! memory holds the newest as a front, so a response is found the moment it is stored.
//! Without one, memory is all there is. Either way memory is bounded in count, age and
//! bytes, and each key has its part of it (the whole divided among at most four keys):
//! past its part a key's own least recently used responses go, never another key's; past
//! the whole (more than four keys storing), the key holding the most gives way. A key's
//! stored bytes are bounded by `--max-stored-bytes-per-key` ([`ResponseStore::room`]).

pub mod chain;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use massgen_core::provider::Message;
use serde::{Deserialize, Serialize};

use super::request::Item;
use crate::app::Caller;
use crate::app::store::responses::{ResponseRow, ResponseWriter};
use crate::app::store::{ReadError, RecordDb, now_ms, safe_error};

/// Bytes of stored text (messages and response bodies) kept in memory at most, all keys
/// together.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// The most keys memory is divided among: with more, each still has a quarter.
const MAX_SHARES: usize = 4;
/// Longest item id kept for references (OpenAI's are about 50 characters; a database
/// index takes a few thousand bytes at most).
const MAX_ITEM_ID_BYTES: usize = 256;
/// What each message costs besides its text (its slot and index entries), so a flood of
/// empty messages weighs what it holds.
const PER_MESSAGE: usize = 64;

pub struct Stored {
    pub owner: Caller,
    /// The response this one continued (`previous_response_id`): its conversation comes
    /// before this turn.
    pub parent: Option<String>,
    /// System and developer messages of this request's input.
    pub system: Vec<String>,
    /// This request's input as messages, then the response's own answer.
    pub messages: Vec<Message>,
    /// The response object, serialized.
    pub response: String,
    /// The items a later request may name by id (output items, and input items that
    /// came with an id).
    pub items: Vec<(String, Item)>,
}

/// One turn as the database keeps it.
#[derive(Deserialize)]
struct StoredTurn {
    system: Vec<String>,
    messages: Vec<Message>,
}

/// [`StoredTurn`] to write, borrowed.
#[derive(Serialize)]
struct TurnRef<'a> {
    system: &'a [String],
    messages: &'a [Message],
}

/// The bounds of a [`ResponseStore`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Responses kept in memory at most, all keys together.
    pub max_count: usize,
    /// A response not used for this long is gone (memory; the database has the records'
    /// retention, the same age).
    pub max_age: Duration,
    /// [`MAX_BYTES`] outside tests.
    pub max_bytes: usize,
    /// The server's API keys (1 without keys): memory is divided among at most four.
    pub keys: usize,
    /// `--max-stored-bytes-per-key`.
    pub max_bytes_per_key: u64,
}

/// A key's stored responses already take its `--max-stored-bytes-per-key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub stored: u64,
    pub limit: u64,
}

impl Stored {
    /// The text this turn brings to a conversation that continues it.
    pub fn text_bytes(&self) -> usize {
        turn_bytes(&self.system, &self.messages)
    }

    fn bytes(&self) -> usize {
        let items: usize = self
            .items
            .iter()
            .map(|(id, item)| 2 * id.len() + 256 + item_bytes(item))
            .sum();
        self.text_bytes() + items + self.response.len()
    }

    /// Its rows, for the database; `touch`: the responses it used.
    fn row(&self, id: &str, touch: Vec<String>) -> Result<ResponseRow, serde_json::Error> {
        let conversation = serde_json::to_string(&TurnRef {
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
            parent: self.parent.clone(),
            conversation,
            text_bytes: self.text_bytes() as u64,
            body: self.response.clone(),
            items,
            touch,
        })
    }
}

/// The text `system` and `messages` hold, as a continued conversation counts it.
pub fn turn_bytes(system: &[String], messages: &[Message]) -> usize {
    system.iter().map(String::len).sum::<usize>()
        + messages
            .iter()
            .map(|m| message_bytes(m) + PER_MESSAGE)
            .sum::<usize>()
}

/// The text an item holds, as an `item_reference` counts it.
pub fn item_bytes(item: &Item) -> usize {
    match item {
        Item::System { text } => text.len(),
        Item::Message { message } => message_bytes(message),
        Item::Call { call } => call_bytes(call),
        Item::Reasoning => 0,
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
    limits: Limits,
    db: Option<(Arc<RecordDb>, ResponseWriter)>,
}

struct Kept {
    stored: Arc<Stored>,
    /// Its last use.
    at: Instant,
    size: usize,
    /// Its place in its owner's order of use.
    seq: u64,
}

/// One key's responses in memory.
#[derive(Default)]
struct Part {
    /// Least recently used first.
    order: BTreeMap<u64, String>,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Kept>,
    owners: HashMap<Caller, Part>,
    bytes: usize,
    /// The next use's place.
    next: u64,
    /// (owner, item id) → the newest response holding that item.
    items: HashMap<(Caller, String), String>,
}

impl Inner {
    fn remove(&mut self, id: &str) {
        let Some(kept) = self.by_id.remove(id) else {
            return;
        };
        self.bytes -= kept.size;
        let owner = kept.stored.owner;
        if let Some(part) = self.owners.get_mut(&owner) {
            part.order.remove(&kept.seq);
            part.bytes -= kept.size;
            if part.order.is_empty() {
                self.owners.remove(&owner);
            }
        }
        for (item, _) in &kept.stored.items {
            let key = (owner, item.clone());
            if self.items.get(&key).is_some_and(|holder| holder == id) {
                self.items.remove(&key);
            }
        }
    }

    /// Marks `id` used now, if `owner`'s.
    fn touch(&mut self, id: &str, owner: Caller) {
        let Some(kept) = self.by_id.get_mut(id).filter(|k| k.stored.owner == owner) else {
            return;
        };
        let Some(part) = self.owners.get_mut(&owner) else {
            return;
        };
        part.order.remove(&kept.seq);
        kept.seq = self.next;
        kept.at = Instant::now();
        part.order.insert(self.next, id.to_string());
        self.next += 1;
    }

    /// Drops `owner`'s least recently used response; `false` when it has none.
    fn drop_oldest(&mut self, owner: Caller) -> bool {
        let oldest = self
            .owners
            .get(&owner)
            .and_then(|part| part.order.values().next().cloned());
        match oldest {
            Some(id) => {
                self.remove(&id);
                true
            }
            None => false,
        }
    }

    /// The key whose part is largest, by bytes or by count; of equal parts, the one
    /// whose least recently used response is oldest.
    fn largest(&self, by_count: bool) -> Option<Caller> {
        self.owners
            .iter()
            .max_by_key(|(_, part)| {
                let size = if by_count {
                    part.order.len()
                } else {
                    part.bytes
                };
                let oldest = part.order.keys().next().copied().unwrap_or(u64::MAX);
                (size, std::cmp::Reverse(oldest))
            })
            .map(|(owner, _)| *owner)
    }
}

impl ResponseStore {
    /// In memory only.
    pub fn new(limits: Limits) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            limits: Limits {
                max_count: limits.max_count.max(1),
                keys: limits.keys.max(1),
                ..limits
            },
            db: None,
        }
    }

    /// Kept in `db` (when given) with the same memory bounds for the front; starts the
    /// database writer (inside a Tokio runtime; outside one, memory only).
    pub fn with_db(limits: Limits, db: Option<Arc<RecordDb>>) -> Self {
        let mut store = Self::new(limits);
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

    /// A key's part of memory: bytes and count.
    fn share(&self) -> (usize, usize) {
        let shares = self.limits.keys.min(MAX_SHARES);
        (
            self.limits.max_bytes / shares,
            (self.limits.max_count / shares).max(1),
        )
    }

    /// Whether `caller` may store a response of about `incoming` more bytes:
    /// `Err` when its stored responses would pass `--max-stored-bytes-per-key`. With a
    /// database, what it holds of the key's and what waits to be written; while it cannot
    /// be read, what this process knows (its writes fail too, so nothing reaches the disk).
    pub async fn room(&self, caller: &Caller, incoming: usize) -> Result<(), Full> {
        let in_memory = lock(&self.inner)
            .owners
            .get(caller)
            .map_or(0, |part| part.bytes) as u64;
        let stored = match &self.db {
            None => in_memory,
            Some((db, writer)) => {
                let pending = writer.pending_bytes(caller.owner()) as u64;
                match db.stored_bytes(caller.owner()).await {
                    Ok(n) => n.saturating_add(pending),
                    Err(e) => {
                        tracing::warn!(
                            "cannot read a key's stored bytes, counting what this process holds: {}",
                            safe_error(&e)
                        );
                        in_memory.max(pending)
                    }
                }
            }
        };
        let limit = self.limits.max_bytes_per_key;
        if stored.saturating_add(incoming as u64) > limit {
            return Err(Full { stored, limit });
        }
        Ok(())
    }

    /// Keeps `stored` under `id` and queues it for the database; `touch`: the responses
    /// it used (the turns it continued, the holders of items it referenced), which count
    /// as used now. Past the key's part of memory its least recently used responses go;
    /// past the whole, the largest part's. A response larger than a key's part is not
    /// kept in memory (with a database, it is still written).
    pub fn put(&self, id: String, mut stored: Stored, touch: Vec<String>) {
        stored
            .items
            .retain(|(item, _)| item.len() <= MAX_ITEM_ID_BYTES);
        let size = stored.bytes();
        if let Some((_, writer)) = &self.db {
            match stored.row(&id, touch.clone()) {
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
        let (share_bytes, share_count) = self.share();
        let owner = stored.owner;
        let mut inner = lock(&self.inner);
        for used in &touch {
            inner.touch(used, owner);
        }
        if size > share_bytes {
            tracing::warn!(response_id = %id, bytes = size, "response too large to keep in memory");
            return;
        }
        inner.remove(&id);
        for (item, _) in &stored.items {
            inner.items.insert((owner, item.clone()), id.clone());
        }
        let seq = inner.next;
        inner.next += 1;
        inner.bytes += size;
        let part = inner.owners.entry(owner).or_default();
        part.order.insert(seq, id.clone());
        part.bytes += size;
        inner.by_id.insert(
            id,
            Kept {
                stored: Arc::new(stored),
                at: Instant::now(),
                size,
                seq,
            },
        );
        while inner
            .owners
            .get(&owner)
            .is_some_and(|part| part.bytes > share_bytes || part.order.len() > share_count)
        {
            if !inner.drop_oldest(owner) {
                break;
            }
        }
        loop {
            let by_count = inner.by_id.len() > self.limits.max_count;
            if !by_count && inner.bytes <= self.limits.max_bytes {
                break;
            }
            let Some(largest) = inner.largest(by_count) else {
                break;
            };
            if !inner.drop_oldest(largest) {
                break;
            }
        }
    }

    /// The object of response `id` if `caller` owns it; someone else's looks like a
    /// missing one. `Err`: the database cannot be read now.
    pub async fn body(&self, id: &str, caller: &Caller) -> Result<Option<String>, ReadError> {
        if let Some(found) = self.in_memory(id) {
            return Ok((found.owner == *caller).then(|| found.response.clone()));
        }
        let Some((db, _)) = &self.db else {
            return Ok(None);
        };
        db.response_body(id, caller.owner(), self.since_ms())
            .await
            .map_err(read_failed)
    }

    /// Item `id` of `caller`'s stored responses, and the response that holds it. `Err`:
    /// the database cannot be read now.
    pub async fn item(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<Option<(String, Item)>, ReadError> {
        {
            let inner = lock(&self.inner);
            let found = inner
                .items
                .get(&(*caller, id.to_string()))
                .and_then(|holder| Some((holder, inner.by_id.get(holder)?)))
                .filter(|(_, kept)| kept.at.elapsed() < self.limits.max_age)
                .and_then(|(holder, kept)| {
                    let (_, item) = kept.stored.items.iter().rev().find(|(i, _)| i == id)?;
                    Some((holder.clone(), item.clone()))
                });
            if found.is_some() {
                return Ok(found);
            }
        }
        let Some((db, _)) = &self.db else {
            return Ok(None);
        };
        let row = db
            .response_item(id, caller.owner(), self.since_ms())
            .await
            .map_err(read_failed)?;
        row.map(|(holder, body)| Ok((holder, serde_json::from_str(&body).map_err(unreadable)?)))
            .transpose()
    }

    fn in_memory(&self, id: &str) -> Option<Arc<Stored>> {
        let inner = lock(&self.inner);
        let kept = inner.by_id.get(id)?;
        (kept.at.elapsed() < self.limits.max_age).then(|| kept.stored.clone())
    }

    /// The oldest last use still within the maximum age.
    fn since_ms(&self) -> u64 {
        now_ms().saturating_sub(u64::try_from(self.limits.max_age.as_millis()).unwrap_or(u64::MAX))
    }

    /// Drops responses not used for the maximum age from memory (the database has its
    /// own retention).
    pub fn expire(&self) {
        let mut inner = lock(&self.inner);
        let old: Vec<String> = inner
            .owners
            .values()
            .flat_map(|part| {
                // In order of use, so the expired ones come first.
                part.order.values().take_while(|id| {
                    inner
                        .by_id
                        .get(*id)
                        .is_none_or(|kept| kept.at.elapsed() >= self.limits.max_age)
                })
            })
            .cloned()
            .collect();
        for id in &old {
            inner.remove(id);
        }
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
mod tests;
