//! The exact-match response cache (`--cache-ttl-seconds`, off by default): a request
//! identical to one answered within the TTL, from the same API key to the same panel,
//! gets the stored response again instead of a new session, so the retries of SDKs and
//! the repeated task prompts of chat UIs do not pay twice.
//!
//! - Key: SHA-256 of the door, the caller's key, the resolved panel's whole config (its
//!   `Debug` form, keys redacted) and the request body parsed and written back (so
//!   whitespace does not matter, the order of fields does). `stream` is part of the body:
//!   a streamed request is answered from a streamed response, byte for byte.
//! - Stored: only a 200 whose session completed; a stream only once it ended and only if
//!   the driver saw its session complete (told by the session's outcome, not by reading
//!   the door's bytes). A client that goes away mid-stream stores nothing.
//! - Replayed as stored: the same body (ids, usage, `massgen_metadata`, cost included: they
//!   describe the session that produced it) with `x-massgen-cache: hit`; no session runs,
//!   no record is made, nothing is spent.
//! - Bounded: [`MAX_ENTRIES`] responses, [`MAX_BYTES`] in all, [`MAX_ENTRY_BYTES`] each
//!   (a larger response is not stored); the least recently used go first. Kept in `moka`,
//!   which drops expired entries itself.
//! - Concurrent identical requests are not coalesced: each runs its own session, and the
//!   last to finish is kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use moka::policy::EvictionPolicy;
use sha2::{Digest, Sha256};

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

struct Entry {
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

/// The responses, in `moka`: expiry by TTL, and one weighted capacity for both bounds
/// (each entry weighs its bytes, and at least `max_bytes / max_entries`, so neither the
/// bytes nor the count can pass theirs); the least recently used go first.
pub struct ResponseCache {
    entries: moka::sync::Cache<Key, Arc<Entry>>,
    max_bytes: usize,
}

impl ResponseCache {
    pub fn new(ttl: Duration) -> Self {
        Self::with_bounds(ttl, MAX_ENTRIES, MAX_BYTES)
    }

    pub fn with_bounds(ttl: Duration, max_entries: usize, max_bytes: usize) -> Self {
        let least = max_bytes / max_entries.max(1);
        let entries = moka::sync::Cache::builder()
            .max_capacity(max_bytes as u64)
            .weigher(move |_: &Key, e: &Arc<Entry>| {
                u32::try_from(entry_size(&e.headers, &e.body).max(least)).unwrap_or(u32::MAX)
            })
            .time_to_live(ttl)
            .eviction_policy(EvictionPolicy::lru())
            .build();
        Self { entries, max_bytes }
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

    fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.entries.get(key)
    }

    fn put(&self, key: Key, headers: Vec<(HeaderName, HeaderValue)>, body: Bytes) {
        if entry_size(&headers, &body) > MAX_ENTRY_BYTES.min(self.max_bytes) {
            return;
        }
        self.entries.insert(key, Arc::new(Entry { headers, body }));
    }

    #[cfg(test)]
    fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }
}

fn entry_size(headers: &[(HeaderName, HeaderValue)], body: &Bytes) -> usize {
    body.len()
        + headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len())
            .sum::<usize>()
}

/// One request's use of the cache: a hit to answer with, or where to keep the answer.
pub struct Lookup {
    found: Option<(Arc<ResponseCache>, Key)>,
}

impl Lookup {
    /// No cache (it is off).
    pub fn off() -> Self {
        Self { found: None }
    }

    pub fn new(cache: Option<&Arc<ResponseCache>>, key: Key) -> Self {
        Self {
            found: cache.map(|c| (Arc::clone(c), key)),
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
        let mut response = Response::new(Body::from(entry.body.clone()));
        let headers = response.headers_mut();
        for (name, value) in &entry.headers {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(CACHE_HEADER, HeaderValue::from_static("hit"));
        Some(response)
    }

    /// `response`, marked a miss and kept once it has gone out whole, if by then
    /// `completed` says its session completed (a stream that ended in the door's error
    /// event, or that the client left, is not kept).
    pub fn keep(self, response: Response, completed: Arc<AtomicBool>) -> Response {
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
                && completed.load(Ordering::Acquire)
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

    #[test]
    fn entries_expire_after_the_ttl() {
        let cache = ResponseCache::new(Duration::from_millis(200));
        cache.put([1; 32], Vec::new(), body(3));
        assert!(cache.get(&[1; 32]).is_some());
        std::thread::sleep(Duration::from_millis(400));
        assert!(cache.get(&[1; 32]).is_none());
        assert_eq!(cache.len(), 0, "an expired entry is dropped");
    }

    #[test]
    fn bounds_on_count_and_bytes_hold() {
        let cache = ResponseCache::with_bounds(Duration::from_secs(60), 2, 100);
        for k in 1..=3 {
            cache.put([k; 32], Vec::new(), body(10));
        }
        assert_eq!(cache.len(), 2, "over the entry count");
        assert!(cache.get(&[3; 32]).is_some(), "the newest is kept");
        cache.put([4; 32], Vec::new(), body(85));
        assert!(cache.get(&[4; 32]).is_some());
        assert_eq!(cache.len(), 1, "10 + 85 bytes weigh 50 + 85: over 100");
        cache.put([5; 32], Vec::new(), body(101));
        assert!(cache.get(&[5; 32]).is_none(), "larger than the whole cache");
    }

    #[tokio::test]
    async fn a_response_is_kept_only_when_its_session_completed() {
        let cache = Arc::new(ResponseCache::new(Duration::from_secs(60)));
        for (key, completed) in [([1; 32], false), ([2; 32], true)] {
            let flag = Arc::new(AtomicBool::new(false));
            let lookup = Lookup::new(Some(&cache), key);
            let response = lookup.keep(Response::new(Body::from("event: x\n\n")), flag.clone());
            // The outcome is known once the stream is read to its end, as in the driver.
            flag.store(completed, Ordering::Release);
            let bytes = axum::body::to_bytes(response.into_body(), 1024)
                .await
                .unwrap();
            assert_eq!(&bytes[..], b"event: x\n\n");
            assert_eq!(cache.get(&key).is_some(), completed);
        }
    }
}
