//! The exact-match response cache (`--cache-ttl-seconds`, off by default): a request
//! identical to one answered within the TTL, from the same API key to the same panel,
//! gets the stored response again instead of a new session, so the retries of SDKs and
//! the repeated task prompts of chat UIs do not pay twice.
//!
//! - Key: SHA-256 of the door, the caller's key, the resolved panel's whole config (its
//!   `Debug` form, keys redacted) and the request body parsed and written back (so
//!   whitespace does not matter, the order of fields does). `stream` is part of the body:
//!   a streamed request is answered from a streamed response, byte for byte.
//! - Stored: only a 200 whose session completed; a stream only once it ended and only
//!   without the door's error event. A client that goes away mid-stream stores nothing.
//! - Replayed as stored: the same body (ids, usage, `massgen_metadata`, cost included: they
//!   describe the session that produced it) with `x-massgen-cache: hit`; no session runs,
//!   no record is made, nothing is spent.
//! - Bounded: [`MAX_ENTRIES`] responses, [`MAX_BYTES`] in all, [`MAX_ENTRY_BYTES`] each
//!   (a larger response is not stored); the oldest go first. Expired entries are dropped
//!   when met and when room is needed.
//! - Concurrent identical requests are not coalesced: each runs its own session, and the
//!   last to finish is kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::app::Caller;
use crate::config::PanelConfig;

pub const CACHE_HEADER: &str = "x-massgen-cache";
/// Responses kept at most.
pub const MAX_ENTRIES: usize = 1024;
/// Bytes of stored responses at most, all keys together.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// Largest response stored.
pub const MAX_ENTRY_BYTES: usize = 4 * 1024 * 1024;

type Key = [u8; 32];

#[derive(Clone)]
struct Entry {
    stored: Instant,
    seq: u64,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

#[derive(Default)]
struct Inner {
    by_key: HashMap<Key, Entry>,
    /// Insertion order: the oldest first.
    order: BTreeMap<u64, Key>,
    bytes: usize,
    next_seq: u64,
}

pub struct ResponseCache {
    ttl: Duration,
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl ResponseCache {
    pub fn new(ttl: Duration) -> Self {
        Self::with_bounds(ttl, MAX_ENTRIES, MAX_BYTES)
    }

    pub fn with_bounds(ttl: Duration, max_entries: usize, max_bytes: usize) -> Self {
        Self {
            ttl,
            max_entries,
            max_bytes,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of a request.
    pub fn key(door: &str, caller: &Caller, panel: &PanelConfig, body: &[u8]) -> Key {
        let mut hash = Sha256::new();
        for part in [door.as_bytes(), format!("{caller:?}").as_bytes()] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        let panel = format!("{panel:?}");
        hash.update((panel.len() as u64).to_le_bytes());
        hash.update(panel.as_bytes());
        // The body was parsed by the door already, so it is JSON; written back it loses
        // the client's whitespace.
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(value) => hash.update(value.to_string().as_bytes()),
            Err(_) => hash.update(body),
        }
        hash.finalize().into()
    }

    fn get(&self, key: &Key) -> Option<Entry> {
        let mut inner = self.lock();
        let entry = inner.by_key.get(key)?.clone();
        if entry.stored.elapsed() >= self.ttl {
            remove(&mut inner, key);
            return None;
        }
        Some(entry)
    }

    fn put(&self, key: Key, headers: Vec<(HeaderName, HeaderValue)>, body: Bytes) {
        let size = entry_size(&headers, &body);
        if size > MAX_ENTRY_BYTES.min(self.max_bytes) {
            return;
        }
        let mut inner = self.lock();
        remove(&mut inner, &key);
        while inner.by_key.len() >= self.max_entries || inner.bytes + size > self.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            remove(&mut inner, &oldest);
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.order.insert(seq, key);
        inner.bytes += size;
        inner.by_key.insert(
            key,
            Entry {
                stored: Instant::now(),
                seq,
                headers,
                body,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_key.len()
    }
}

fn entry_size(headers: &[(HeaderName, HeaderValue)], body: &Bytes) -> usize {
    body.len()
        + headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len())
            .sum::<usize>()
}

fn remove(inner: &mut Inner, key: &Key) {
    if let Some(old) = inner.by_key.remove(key) {
        inner.order.remove(&old.seq);
        inner.bytes -= entry_size(&old.headers, &old.body);
    }
}

/// One request's use of the cache: a hit to answer with, or where to keep the answer.
pub struct Lookup {
    found: Option<(Arc<ResponseCache>, Key)>,
    door: &'static str,
}

impl Lookup {
    /// No cache (it is off).
    pub fn off(door: &'static str) -> Self {
        Self { found: None, door }
    }

    pub fn new(cache: Option<&Arc<ResponseCache>>, door: &'static str, key: Key) -> Self {
        Self {
            found: cache.map(|c| (Arc::clone(c), key)),
            door,
        }
    }

    /// The stored response, if there is one.
    pub fn hit(&self) -> Option<Response> {
        let (cache, key) = self.found.as_ref()?;
        let Some(entry) = cache.get(key) else {
            count("miss");
            return None;
        };
        count("hit");
        let mut response = Response::new(Body::from(entry.body));
        let headers = response.headers_mut();
        for (name, value) in entry.headers {
            headers.insert(name, value);
        }
        headers.insert(CACHE_HEADER, HeaderValue::from_static("hit"));
        Some(response)
    }

    /// `response`, marked a miss and kept once it has gone out whole, if it succeeded.
    pub fn keep(self, response: Response) -> Response {
        let Some((cache, key)) = self.found else {
            return response;
        };
        let (mut parts, body) = response.into_parts();
        parts
            .headers
            .insert(CACHE_HEADER, HeaderValue::from_static("miss"));
        if parts.status != StatusCode::OK {
            return Response::from_parts(parts, body);
        }
        let headers = kept_headers(&parts.headers);
        let streamed = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let door = self.door;
        let mut inner = body.into_data_stream();
        let teed = async_stream::stream! {
            let mut copy: Option<Vec<u8>> = Some(Vec::new());
            while let Some(chunk) = inner.next().await {
                match chunk {
                    Ok(bytes) => {
                        if let Some(buf) = copy.as_mut() {
                            if buf.len() + bytes.len() > MAX_ENTRY_BYTES {
                                copy = None;
                            } else {
                                buf.extend_from_slice(&bytes);
                            }
                        }
                        yield Ok::<Bytes, axum::Error>(bytes);
                    }
                    Err(e) => {
                        yield Err(e);
                        return;
                    }
                }
            }
            if let Some(body) = copy
                && (!streamed || stream_succeeded(door, &body))
            {
                cache.put(key, headers, Bytes::from(body));
                count("stored");
            }
        };
        Response::from_parts(parts, Body::from_stream(teed))
    }
}

/// The headers a replay needs: the type and massgen's own (session id, winner).
fn kept_headers(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .filter(|(name, _)| {
            *name == header::CONTENT_TYPE
                || (name.as_str().starts_with("x-massgen-") && name.as_str() != CACHE_HEADER)
        })
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// A stream that ended without the door's error event (an error after the 200).
fn stream_succeeded(door: &str, body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    match door {
        "chat_completions" => text.contains("data: [DONE]") && !text.contains("data: {\"error\""),
        "responses" => text.contains("event: response.completed"),
        "messages" => text.contains("event: message_stop") && !text.contains("event: error"),
        _ => false,
    }
}

fn count(result: &'static str) {
    if let Some(m) = crate::telemetry::metrics::metrics() {
        m.response_cache.with_label_values(&[result]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_the_ttl() {
        let cache = ResponseCache::new(Duration::from_secs(60));
        cache.put([1; 32], Vec::new(), body(3));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(cache.get(&[1; 32]).is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(cache.get(&[1; 32]).is_none());
        assert_eq!(cache.len(), 0, "an expired entry is dropped when met");
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_go_first_when_a_bound_is_reached() {
        let cache = ResponseCache::with_bounds(Duration::from_secs(60), 2, 100);
        for k in 1..=3 {
            cache.put([k; 32], Vec::new(), body(10));
        }
        assert!(cache.get(&[1; 32]).is_none(), "over the entry count");
        assert!(cache.get(&[2; 32]).is_some() && cache.get(&[3; 32]).is_some());
        cache.put([4; 32], Vec::new(), body(85));
        assert!(
            cache.get(&[2; 32]).is_none(),
            "over the byte bound: the oldest went"
        );
        assert!(cache.get(&[3; 32]).is_some(), "10 + 85 bytes fit in 100");
        assert!(cache.get(&[4; 32]).is_some());
        cache.put([5; 32], Vec::new(), body(101));
        assert!(cache.get(&[5; 32]).is_none(), "larger than the whole cache");
        assert!(cache.get(&[4; 32]).is_some());
    }

    #[test]
    fn streams_count_only_without_the_doors_error_event() {
        assert!(stream_succeeded(
            "chat_completions",
            b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n"
        ));
        assert!(!stream_succeeded(
            "chat_completions",
            b"data: {\"error\":{}}\n\ndata: [DONE]\n\n"
        ));
        assert!(stream_succeeded(
            "responses",
            b"event: response.completed\ndata: {}\n\n"
        ));
        assert!(!stream_succeeded(
            "responses",
            b"event: response.failed\ndata: {}\n\n"
        ));
        assert!(!stream_succeeded(
            "messages",
            b"event: error\ndata: {}\n\nevent: message_stop\n\n"
        ));
    }
}
