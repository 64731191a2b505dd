//! Request bodies: read whole, within `--max-body-bytes`, and within a budget of body bytes
//! the whole server holds at once (`--max-buffered-body-bytes`). A request's share of the
//! budget is its body's size, taken before (or, without `Content-Length`, while) the body
//! is read and held by its session until the coordination ends (the question lives on in
//! the prompts and upstream requests that long), or, for a request that starts none, until
//! its response is done: so the budget bounds what big questions can make the server hold,
//! and a client that stops reading its answer does not keep its share. Past the budget a request waits briefly for others to finish,
//! then gets 503 with `Retry-After`.

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
use crate::telemetry::metrics;

/// How long a request waits for room in the budget before its 503.
const WAIT: Duration = Duration::from_secs(2);

/// The budget of buffered request body bytes, shared by every request.
pub struct BodyBudget {
    inner: Arc<Inner>,
}

struct Inner {
    total: usize,
    used: Mutex<usize>,
    /// Woken when a share is given back.
    freed: Notify,
}

impl BodyBudget {
    pub fn new(total: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                total,
                used: Mutex::new(0),
                freed: Notify::new(),
            }),
        }
    }

    /// Adds `n` bytes to `share`, waiting until `deadline` for room. Not first come, first
    /// served: a small body fits in room a big one waits for, so big bodies that wait do
    /// not hold up small ones.
    async fn take(&self, share: &mut Share, n: usize, deadline: Instant) -> Result<(), ApiError> {
        let inner = &self.inner;
        loop {
            let freed = inner.freed.notified();
            let mut freed = std::pin::pin!(freed);
            // Registered before the check, so a share given back in between still wakes us.
            freed.as_mut().enable();
            {
                let mut used = inner.used.lock().unwrap_or_else(PoisonError::into_inner);
                if used.saturating_add(n) <= inner.total {
                    *used += n;
                    share.bytes += n;
                    share.of = Some(Arc::clone(inner));
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                if let Some(m) = metrics() {
                    m.rejected
                        .with_label_values(&["max_buffered_body_bytes"])
                        .inc();
                }
                return Err(ApiError::BodiesBusy {
                    budget: inner.total,
                });
            }
        }
    }

    #[cfg(test)]
    fn used(&self) -> usize {
        *self
            .inner
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A request's part of the budget; dropping it gives the bytes back.
#[derive(Default)]
pub struct Share {
    of: Option<Arc<Inner>>,
    bytes: usize,
}

impl Drop for Share {
    fn drop(&mut self) {
        if let Some(inner) = self.of.take() {
            let mut used = inner.used.lock().unwrap_or_else(PoisonError::into_inner);
            *used = used.saturating_sub(self.bytes);
            drop(used);
            inner.freed.notify_waiters();
        }
    }
}

/// Where the body reader leaves a request's share, so that [`hold_shares`] can keep it
/// until the response is done.
#[derive(Clone, Default)]
pub struct ShareSlot(Arc<Mutex<Share>>);

impl ShareSlot {
    /// The share, for a holder that outlives the response's headers (a session): the
    /// response then holds nothing.
    pub fn take(&self) -> Share {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Adds `n` bytes that the request makes the server hold besides its body (a stored
    /// conversation it continues) to its share, waiting for room as a body does: a few
    /// bytes of body that stand for megabytes of stored text are bounded by the same
    /// budget as the megabytes sent.
    pub async fn charge(&self, budget: &BodyBudget, n: usize) -> Result<(), ApiError> {
        if n == 0 {
            return Ok(());
        }
        let mut share = Share::default();
        budget.take(&mut share, n, Instant::now() + WAIT).await?;
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

/// Gives every request a [`ShareSlot`]; a response whose request took a share holds it
/// until its body is done (a stream: its last byte, or the client leaving).
pub async fn hold_shares(mut request: Request, next: Next) -> Response {
    let slot = ShareSlot::default();
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
/// takes goes to the request's [`ShareSlot`] (or, without one, is given back on return).
pub async fn read_body(
    headers: &HeaderMap,
    slot: Option<&ShareSlot>,
    body: Body,
    limit: usize,
    budget: &BodyBudget,
) -> Result<Bytes, ApiError> {
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
    let deadline = Instant::now() + WAIT;
    let mut share = Share::default();
    let mut body = http_body_util::Limited::new(body, limit);
    // With a length the whole share is taken before a byte is read: a request that waits
    // holds no memory, only its connection.
    if let Some(n) = declared.filter(|&n| n > 0)
        && let Err(busy) = budget.take(&mut share, n, deadline).await
    {
        return Err(drained(body, busy).await);
    }
    // One buffer of the declared size: collecting chunks and joining them would hold the
    // body twice.
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    let read = loop {
        match body.frame().await {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if declared.is_none()
                    && let Err(busy) = budget.take(&mut share, data.len(), deadline).await
                {
                    drop((buf, share));
                    return Err(drained(body, busy).await);
                }
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

    fn headers(length: Option<usize>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(n) = length {
            h.insert(header::CONTENT_LENGTH, n.into());
        }
        h
    }

    #[tokio::test]
    async fn a_share_is_held_by_its_slot_and_given_back_with_it() {
        let budget = BodyBudget::new(10);
        let slot = ShareSlot::default();
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
        assert!(matches!(busy, Err(ApiError::BodiesBusy { budget: 10 })));
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
        let budget = Arc::new(BodyBudget::new(10));
        let slot = ShareSlot::default();
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
        let budget = BodyBudget::new(100);
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
}
