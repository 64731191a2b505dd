//! The whole-response half every wire format shares, beside the streamed one (`sse`): a
//! non-streamed answer's body read whole within its bounds ([`read_body`]), then given to
//! the format's decoder, which makes of it the chunks the same answer streamed would give
//! ([`decode`]). What bounds a whole response lives here, once for every format and
//! client: its size ([`MAX_WHOLE_BYTES`]), the answer it brings ([`crate::MAX_ANSWER_BYTES`], as
//! streamed) and the time its body may take.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use crate::response::Body;
use crate::sse::{
    EventDecoder, MAX_EVENT_BYTES, Step, answer_too_large, error_chain, past_answer_cap,
};
use crate::{ProviderChunk, ProviderError, ProviderErrorKind};

/// The most bytes a whole response body may take: what one streamed event may take, since a
/// streamed call's last event (a Responses `response.completed`) repeats the whole response
/// too. A real answer is far smaller: twice [`crate::MAX_ANSWER_BYTES`] leaves room for JSON's
/// escapes and the response's own fields.
pub const MAX_WHOLE_BYTES: usize = MAX_EVENT_BYTES;

/// Reads a whole response body: at most [`MAX_WHOLE_BYTES`], all of it within `within` of
/// its head. One deadline for the body, not one per piece: nothing goes out before the body
/// is complete, so a body trickled in (a byte every few seconds) would otherwise hold the
/// call until the turn's end. An upstream that sends its head only once it has generated
/// the answer (OpenAI, Anthropic, vLLM, Ollama) spends the generation under the head's
/// `whole_timeout`; one that sends its head first generates under this deadline.
///
/// Errors: `Timeout` past the deadline, `Connection` for a body that broke off,
/// `InvalidResponse` past the size bound.
pub(crate) async fn read_body(
    provider: &str,
    mut body: Body,
    within: Duration,
) -> Result<Bytes, ProviderError> {
    let deadline = tokio::time::Instant::now() + within;
    let mut bytes = BytesMut::new();
    loop {
        let piece = match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(piece))) => piece,
            Ok(Some(Err(error))) => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Connection,
                    provider,
                    format!("response body broken: {}", error_chain(&error)),
                ));
            }
            Ok(None) => return Ok(bytes.freeze()),
            Err(_) => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Timeout,
                    provider,
                    format!(
                        "the whole response did not arrive within {within:?} of its head \
                         ({} bytes came)",
                        bytes.len()
                    ),
                ));
            }
        };
        if bytes.len().saturating_add(piece.len()) > MAX_WHOLE_BYTES {
            return Err(ProviderError::new(
                ProviderErrorKind::InvalidResponse,
                provider,
                format!(
                    "the upstream's response passed {} MiB",
                    MAX_WHOLE_BYTES / (1024 * 1024)
                ),
            ));
        }
        bytes.extend_from_slice(&piece);
    }
}

/// A whole response body through `decoder`: its chunks, bounded like a stream's answer
/// ([`crate::MAX_ANSWER_BYTES`]: what goes out and what the decoder held, together).
pub(crate) fn decode<D: EventDecoder>(
    mut decoder: D,
    body: &[u8],
) -> Result<Vec<ProviderChunk>, ProviderError> {
    let chunks = decoder.on_whole_body(body)?;
    let step = Step::Done(chunks);
    if past_answer_cap(&mut 0, &step, decoder.held()) {
        return Err(answer_too_large(decoder.provider()));
    }
    let (Step::Done(chunks) | Step::More(chunks)) = step;
    Ok(chunks)
}

/// A whole response body's JSON, or the `InvalidResponse` error every wire format reports
/// for a body it cannot read.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(
    provider: &str,
    body: &[u8],
) -> Result<T, ProviderError> {
    serde_json::from_slice(body).map_err(|error| {
        let text = String::from_utf8_lossy(body);
        ProviderError::new(
            ProviderErrorKind::InvalidResponse,
            provider,
            format!(
                "malformed response body ({error}): {}",
                crate::errors::truncate(text.trim())
            ),
        )
    })
}

/// The error of a well-formed body that holds no answer (no choices, no candidates).
pub(crate) fn no_answer(provider: &str, what: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::InvalidResponse,
        provider,
        format!("the upstream's response has no {what}"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    fn body(pieces: Vec<(u64, Result<&'static [u8], std::io::Error>)>) -> Body {
        Box::pin(async_stream::stream! {
            for (gap, piece) in pieces {
                tokio::time::sleep(Duration::from_millis(gap)).await;
                yield piece.map(Bytes::from_static).map_err(crate::response::BodyError::from);
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_is_read_whole_within_one_deadline_however_it_is_paced() {
        let within = Duration::from_secs(10);
        let paced = vec![
            (0, Ok(&b"{\"a\""[..])),
            (4_000, Ok(b":1")),
            (4_000, Ok(b"}")),
        ];
        let bytes = read_body("p", body(paced), within).await.unwrap();
        assert_eq!(&bytes[..], b"{\"a\":1}");
        // A piece every 4 s, under any per-piece limit, but the body is not whole by 10 s.
        let start = tokio::time::Instant::now();
        let mut slow = vec![(0, Ok(&b"{"[..]))];
        slow.extend((0..100).map(|_| (4_000, Ok(&b" "[..]))));
        let error = read_body("p", body(slow), within).await.unwrap_err();
        assert_eq!(start.elapsed(), within);
        assert_eq!(error.kind, ProviderErrorKind::Timeout);
        assert!(error.message.contains("10s"), "{}", error.message);
        assert!(error.message.contains("3 bytes came"), "{}", error.message);
    }

    #[tokio::test]
    async fn a_broken_or_oversized_body_fails_with_its_reason() {
        let broken = vec![
            (0, Ok(&b"{"[..])),
            (0, Err(std::io::Error::other("connection reset"))),
        ];
        let error = read_body("p", body(broken), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Connection);
        assert!(
            error.message.contains("connection reset"),
            "{}",
            error.message
        );
        static MIB: [u8; 1024 * 1024] = [b' '; 1024 * 1024];
        let endless: Body = Box::pin(futures::stream::iter(
            std::iter::repeat_with(|| Ok(Bytes::from_static(&MIB))).take(64),
        ));
        let error = read_body("p", endless, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::InvalidResponse);
        assert!(error.message.contains("16 MiB"), "{}", error.message);
        // Exactly the bound is a whole body.
        let exact: Body = Box::pin(futures::stream::iter(
            std::iter::repeat_with(|| Ok(Bytes::from_static(&MIB))).take(16),
        ));
        let bytes = read_body("p", exact, Duration::from_secs(5)).await.unwrap();
        assert_eq!(bytes.len(), MAX_WHOLE_BYTES);
    }
}
