//! Request bodies: read whole, within `--max-body-bytes`, and within a budget of body bytes
//! the whole server holds at once (`--max-buffered-body-bytes`). A request's share of the
//! budget follows the bytes that arrived (a declared `Content-Length` reserves nothing, so
//! a body dripped a byte at a time holds a byte), and is held by its session until the
//! coordination ends (the question lives on in the prompts and upstream requests that long),
//! or, for a request that starts none, until its response is done: so the budget bounds what
//! big questions can make the server hold, and a client that stops reading its answer does
//! not keep its share. One holder (an API key; without keys, a client address) holds at
//! most a part of the budget (a quarter, and at least one largest body), so no caller can
//! fill it for the others. Past the budget, or its part, a request waits briefly for others
//! to finish, then gets 503 with `Retry-After`. Only requests that passed authentication
//! and the rate limit get here, and only methods that carry a body read one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::error::ApiError;
use super::limits::ClientAddr;
use crate::app::{Caller, KeyId};
use crate::telemetry::metrics;

/// How long a request waits for room in the budget before its 503.
const WAIT: Duration = Duration::from_secs(2);

/// Who a share is counted against: the API key a request authenticated with, or, on a
/// server without keys, the address it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    Key(KeyId),
    Address(IpAddr),
}

impl Holder {
    /// The holder of an authenticated request.
    pub fn of(caller: &Caller, from: ClientAddr) -> Self {
        caller.key.map_or(Self::Address(from.0), Self::Key)
    }
}

/// The budget of buffered request body bytes, shared by every request.
pub struct BodyBudget {
    inner: Arc<Inner>,
}

struct Inner {
    total: usize,
    /// What one holder may hold at once.
    part: usize,
    used: Mutex<Used>,
    /// Woken when a share is given back.
    freed: Notify,
}

#[derive(Default)]
struct Used {
    total: usize,
    /// Holders with bytes held; a holder leaves with its last byte.
    by: HashMap<Holder, usize>,
}

impl BodyBudget {
    /// A budget of `total` bytes, of which one holder may hold a quarter, or
    /// `largest_body` when that is more (one largest body always fits), never more than
    /// `total`.
    pub fn new(total: usize, largest_body: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                total,
                part: (total / 4).max(largest_body).min(total),
                used: Mutex::new(Used::default()),
                freed: Notify::new(),
            }),
        }
    }

    /// What one holder may hold at once.
    pub fn part(&self) -> usize {
        self.inner.part
    }

    /// Adds `n` bytes to `share`, waiting up to [`WAIT`] for room in the budget and in its
    /// holder's part. Not first come, first served: a small body fits in room a big one
    /// waits for, so big bodies that wait do not hold up small ones.
    async fn take(&self, share: &mut Share, n: usize) -> Result<(), ApiError> {
        let inner = &self.inner;
        let deadline = Instant::now() + WAIT;
        loop {
            let freed = inner.freed.notified();
            let mut freed = std::pin::pin!(freed);
            // Registered before the check, so a share given back in between still wakes us.
            freed.as_mut().enable();
            let over_part = {
                let mut used = inner.used.lock().unwrap_or_else(PoisonError::into_inner);
                let mine = used.by.get(&share.holder).copied().unwrap_or(0);
                let fits_total = used.total.saturating_add(n) <= inner.total;
                let fits_part = mine.saturating_add(n) <= inner.part;
                if fits_total && fits_part {
                    used.total += n;
                    *used.by.entry(share.holder).or_default() += n;
                    share.bytes += n;
                    share.of = Some(Arc::clone(inner));
                    return Ok(());
                }
                !fits_part
            };
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                if let Some(m) = metrics() {
                    m.rejected
                        .with_label_values(&["max_buffered_body_bytes"])
                        .inc();
                }
                return Err(ApiError::BodiesBusy {
                    budget: inner.total,
                    part: over_part.then_some(inner.part),
                });
            }
        }
    }

    #[cfg(test)]
    fn used(&self) -> usize {
        self.inner
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

/// A request's part of the budget; dropping it gives the bytes back.
pub struct Share {
    of: Option<Arc<Inner>>,
    holder: Holder,
    bytes: usize,
}

impl Share {
    fn new(holder: Holder) -> Self {
        Self {
            of: None,
            holder,
            bytes: 0,
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let Some(inner) = self.of.take() {
            let mut used = inner.used.lock().unwrap_or_else(PoisonError::into_inner);
            used.total = used.total.saturating_sub(self.bytes);
            if let Some(mine) = used.by.get_mut(&self.holder) {
                *mine = mine.saturating_sub(self.bytes);
                if *mine == 0 {
                    used.by.remove(&self.holder);
                }
            }
            drop(used);
            inner.freed.notify_waiters();
        }
    }
}

/// Where the body reader leaves a request's share, so that [`hold_shares`] can keep it
/// until the response is done.
#[derive(Clone)]
pub struct ShareSlot(Arc<Mutex<Share>>);

impl ShareSlot {
    /// An empty slot for `holder`'s request.
    pub fn new(holder: Holder) -> Self {
        Self(Arc::new(Mutex::new(Share::new(holder))))
    }

    fn holder(&self) -> Holder {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).holder
    }

    /// The share, for a holder that outlives the response's headers (a session): the
    /// response then holds nothing.
    pub fn take(&self) -> Share {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let empty = Share::new(held.holder);
        std::mem::replace(&mut *held, empty)
    }

    /// Adds `n` bytes that the request makes the server hold besides its body (a stored
    /// conversation it continues) to its share, waiting for room as a body does: a few
    /// bytes of body that stand for megabytes of stored text are bounded by the same
    /// budget, and the same part of it, as the megabytes sent.
    pub async fn charge(&self, budget: &BodyBudget, n: usize) -> Result<(), ApiError> {
        if n == 0 {
            return Ok(());
        }
        let mut share = Share::new(self.holder());
        budget.take(&mut share, n).await?;
        self.keep(share);
        Ok(())
    }

    /// Moves `share` into the slot's share.
    fn keep(&self, mut share: Share) {
        let mut held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.bytes += std::mem::take(&mut share.bytes);
        if held.of.is_none() {
            held.of = share.of.take();
        }
    }
}

/// Gives every request a [`ShareSlot`] for its holder (its key, else its address); a
/// response whose request took a share holds it until its body is done (a stream: its
/// last byte, or the client leaving). Runs after authentication.
pub async fn hold_shares(mut request: Request, next: Next) -> Response {
    let caller = request
        .extensions()
        .get::<Caller>()
        .copied()
        .unwrap_or_default();
    let slot = ShareSlot::new(Holder::of(&caller, ClientAddr::of(&request)));
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    let share = slot.take();
    if share.of.is_none() {
        return response;
    }
    response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            let _held = &share;
            frame
        }))
    })
}

/// Reads the whole body, refusing more than `limit` bytes and any `Content-Encoding` but
/// `identity` (a compressed body read as plain JSON would fail in confusing ways, and
/// decoding it would need a limit on the decoded size too), within `budget`: the share it
/// takes, as bytes arrive, goes to the request's [`ShareSlot`] (or, without one, is given
/// back on return).
pub async fn read_body(
    headers: &HeaderMap,
    slot: Option<&ShareSlot>,
    body: Body,
    limit: usize,
    budget: &BodyBudget,
) -> Result<Bytes, ApiError> {
    // Every body the server reads is JSON; a page of another site can send any other type
    // without a preflight (`server::browsers`), so nothing else is read.
    if !is_json(headers) {
        if let Some(m) = metrics() {
            m.rejected
                .with_label_values(&["unsupported_media_type"])
                .inc();
        }
        let got = headers
            .get(header::CONTENT_TYPE)
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .chars()
                    .take(200)
                    .collect()
            })
            .unwrap_or_default();
        return Err(ApiError::UnsupportedContentType { got });
    }
    if let Some(encoding) = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
        .find(|e| !e.is_empty() && e != "identity")
    {
        return Err(ApiError::UnsupportedEncoding {
            encoding: encoding.chars().take(64).collect(),
        });
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let holder = slot.map_or(Holder::Address(ClientAddr::UNKNOWN.0), ShareSlot::holder);
    let mut share = Share::new(holder);
    let mut body = http_body_util::Limited::new(body, limit);
    let mut buf = Vec::new();
    let read = loop {
        match body.frame().await {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                // Counted as it arrives: a declared length that never comes holds nothing.
                if let Err(busy) = budget.take(&mut share, data.len()).await {
                    drop((buf, share));
                    return Err(drained(body, busy).await);
                }
                grow(&mut buf, data.len(), declared);
                buf.extend_from_slice(&data);
            }
        }
    };
    if let Err(e) = read {
        return Err(if e.is::<http_body_util::LengthLimitError>() {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::invalid(
                format!("Could not read the request body: {e}"),
                None,
                "invalid_body",
            )
        });
    }
    // A second body read for the same request (none today) adds to the first.
    if let Some(slot) = slot {
        slot.keep(share);
    }
    Ok(Bytes::from(buf))
}

/// `Content-Type: application/json` (any parameters, any case).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
        })
}

/// Room for `more` bytes in `buf`: doubling, but never past a declared length once the
/// bytes reach it, so a body that arrives as declared ends in one buffer of its size
/// (collecting chunks and joining them would hold the body twice), and memory follows
/// what arrived, not what was declared.
fn grow(buf: &mut Vec<u8>, more: usize, declared: Option<usize>) {
    let need = buf.len().saturating_add(more);
    if need <= buf.capacity() {
        return;
    }
    let doubled = buf.capacity().saturating_mul(2).max(need);
    let want = match declared {
        Some(n) if n >= need => doubled.min(n),
        _ => doubled,
    };
    buf.reserve_exact(want - buf.len());
}

/// Reads the rest of a refused body without keeping it, then gives `error`: a client that
/// sends its whole body before reading (most do) would otherwise see the connection reset
/// instead of the answer. Bounded by the body limit and the body timeout around the read.
async fn drained(mut body: http_body_util::Limited<Body>, error: ApiError) -> ApiError {
    while let Some(Ok(_)) = body.frame().await {}
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(n: u8) -> Holder {
        Holder::Address(IpAddr::from([10, 0, 0, n]))
    }

    fn headers(length: Option<usize>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        if let Some(n) = length {
            h.insert(header::CONTENT_LENGTH, n.into());
        }
        h
    }

    #[tokio::test]
    async fn a_share_is_held_by_its_slot_and_given_back_with_it() {
        let budget = BodyBudget::new(10, 10);
        let slot = ShareSlot::new(holder(1));
        let body = read_body(
            &headers(Some(6)),
            Some(&slot),
            Body::from("abcdef"),
            10,
            &budget,
        )
        .await
        .unwrap();
        assert_eq!(&body[..], b"abcdef");
        assert_eq!(budget.used(), 6);
        // No room for 6 more: 503 after the wait (paused clock).
        tokio::time::pause();
        let busy = read_body(&headers(Some(6)), None, Body::from("ghijkl"), 10, &budget).await;
        assert!(matches!(busy, Err(ApiError::BodiesBusy { budget: 10, .. })));
        // A body that fits goes in beside it.
        let small = read_body(&headers(None), None, Body::from("xy"), 10, &budget).await;
        assert_eq!(&small.unwrap()[..], b"xy");
        assert_eq!(
            budget.used(),
            6,
            "a request without a slot gives its share back"
        );
        drop(slot);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_waiting_body_gets_in_when_a_share_is_given_back() {
        let budget = Arc::new(BodyBudget::new(10, 10));
        let slot = ShareSlot::new(holder(1));
        read_body(
            &headers(Some(8)),
            Some(&slot),
            Body::from("12345678"),
            10,
            &budget,
        )
        .await
        .unwrap();
        let waiting = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move {
                read_body(&headers(Some(5)), None, Body::from("abcde"), 10, &budget).await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(slot);
        assert_eq!(&waiting.await.unwrap().unwrap()[..], b"abcde");
    }

    #[tokio::test]
    async fn over_the_limit_is_413_with_or_without_a_length() {
        let budget = BodyBudget::new(100, 10);
        for length in [Some(11), None] {
            let headers = headers(length);
            let read = read_body(&headers, None, Body::from("x".repeat(11)), 10, &budget);
            assert!(matches!(
                read.await,
                Err(ApiError::PayloadTooLarge { limit: 10 })
            ));
        }
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_declared_length_reserves_nothing_the_bytes_that_arrived_count() {
        let budget = Arc::new(BodyBudget::new(100, 100));
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
        let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
        let reading = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move {
                let slot = ShareSlot::new(holder(1));
                read_body(&headers(Some(90)), Some(&slot), body, 100, &budget).await
            })
        };
        tx.send(Ok(Bytes::from_static(b"abc"))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(budget.used(), 3, "90 declared, 3 arrived");
        // Another holder's 90 bytes fit beside the 3 that arrived.
        let other = ShareSlot::new(holder(2));
        let big = read_body(
            &headers(Some(90)),
            Some(&other),
            Body::from("x".repeat(90)),
            100,
            &budget,
        )
        .await;
        assert_eq!(big.unwrap().len(), 90);
        drop(tx);
        assert!(reading.await.unwrap().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn one_holder_holds_at_most_its_part_and_others_still_get_in() {
        // A quarter of 100 is 25 (more than the largest body, 10).
        let budget = BodyBudget::new(100, 10);
        assert_eq!(budget.part(), 25);
        let mut held = Vec::new();
        for _ in 0..2 {
            let slot = ShareSlot::new(holder(1));
            read_body(
                &headers(None),
                Some(&slot),
                Body::from("y".repeat(10)),
                10,
                &budget,
            )
            .await
            .unwrap();
            held.push(slot);
        }
        // 20 held: 10 more would pass the holder's 25, whatever room the budget has.
        let slot = ShareSlot::new(holder(1));
        let no_length = headers(None);
        let refused = read_body(
            &no_length,
            Some(&slot),
            Body::from("z".repeat(10)),
            10,
            &budget,
        );
        assert!(matches!(
            refused.await,
            Err(ApiError::BodiesBusy {
                budget: 100,
                part: Some(25)
            })
        ));
        assert_eq!(budget.used(), 20);
        // Another holder gets in at once.
        let other = ShareSlot::new(holder(2));
        read_body(
            &headers(None),
            Some(&other),
            Body::from("w".repeat(10)),
            10,
            &budget,
        )
        .await
        .unwrap();
        assert_eq!(budget.used(), 30);
        // And the part never passes one largest body's room below it.
        assert_eq!(BodyBudget::new(16, 10).part(), 10);
        assert_eq!(BodyBudget::new(8, 10).part(), 8);
        drop(held);
    }

    #[tokio::test]
    async fn only_json_bodies_are_read() {
        let budget = BodyBudget::new(100, 100);
        for (content_type, json) in [
            (Some("application/json"), true),
            (Some("Application/JSON; charset=utf-8"), true),
            (Some("text/plain"), false),
            (Some("application/x-www-form-urlencoded"), false),
            (None, false),
        ] {
            let mut h = HeaderMap::new();
            if let Some(t) = content_type {
                h.insert(header::CONTENT_TYPE, t.parse().unwrap());
            }
            let read = read_body(&h, None, Body::from("{}"), 100, &budget).await;
            assert_eq!(read.is_ok(), json, "{content_type:?}");
            if !json {
                assert!(matches!(read, Err(ApiError::UnsupportedContentType { .. })));
            }
        }
        assert_eq!(budget.used(), 0);
    }
}
