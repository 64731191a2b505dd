//! The SSE half every wire format shares: bytes → events → a format-specific
//! [`EventDecoder`] → provider-neutral chunks, whichever HTTP client read the bytes. What
//! bounds a streamed answer lives here, once for every format and client: the size of one
//! event, the bytes of answer one call may bring ([`MAX_ANSWER_BYTES`]) and the longest wait
//! for an event with data.

use std::time::Duration;

use super::{
    ChunkStream, FinishReason, ProviderChunk, ProviderError, ProviderErrorKind, ToolCall, Usage,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};

mod parse;

pub use parse::SseEvent;
use parse::{Events, EventsError, ParseError};

/// What one event did to the stream.
pub enum Step {
    More(Vec<ProviderChunk>),
    /// The stream is complete; these are its last chunks.
    Done(Vec<ProviderChunk>),
}

/// One wire format's response state ([`crate::WireFormat::Decoder`]): a stream's events
/// one by one, or a whole (non-streamed) response body at once.
pub trait EventDecoder: Send + 'static {
    /// The state at the start of a response from `provider`.
    fn new(provider: String) -> Self
    where
        Self: Sized;
    fn provider(&self) -> &str;
    fn on_event(&mut self, event: SseEvent) -> Result<Step, ProviderError>;
    /// The body ended without a `Done` step.
    fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError>;
    /// A whole non-streamed response body (JSON): the chunks the same answer streamed
    /// would give, in their order, ending with the closing chunks ([`closing_chunks`]).
    /// Counted in [`EventDecoder::held`] as a stream's items are.
    fn on_whole_body(&mut self, body: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError>;
    /// The bytes of answer this decoder has taken in to hold back until later (tool calls
    /// with their arguments, thinking blocks and reasoning items sent back with them),
    /// counted as they arrived ([`Held`]). With what went out as it arrived, this is what
    /// [`MAX_ANSWER_BYTES`] bounds.
    fn held(&self) -> usize;
}

/// The most bytes of answer one call may bring: its text, its reasoning, and its tool
/// calls with what a format keeps to send back with them. The engine keeps an answer
/// whole until its turn ends, so an upstream that never stopped (2 GiB of `delta.content`
/// in 12 s) held all of it in memory. Far above any real answer: the most a model writes
/// in one call today (128k output tokens) is about 0.5 MiB of text, and 3,000 tokens a
/// second for a whole 300 s turn would still be under 4 MiB.
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// What holding one more item (a tool call, a content block, a reasoning item) costs
/// besides its text: its structure and allocations, and more, so that the cap also bounds
/// their number (8,192), which decoders search through for each new piece. Charged per
/// item, so a stream of empty items adds up too. A real call holds a few dozen.
const ITEM_BYTES: usize = 1024;

/// The bytes of answer a decoder holds back ([`EventDecoder::held`]): counted as they
/// arrive and never taken off, so text replaced later (a call's arguments sent again)
/// still counts once.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Held(usize);

impl Held {
    /// `bytes` more of text held.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.0 = self.0.saturating_add(bytes);
    }

    /// One more item held, with `bytes` of text.
    pub(crate) fn item(&mut self, bytes: usize) {
        self.add(ITEM_BYTES.saturating_add(bytes));
    }

    pub(crate) fn bytes(self) -> usize {
        self.0
    }
}

/// The bytes a chunk brings that the engine keeps: its text, or a call's name. A
/// [`ProviderChunk::ToolCall`] was counted by its decoder while it was held.
fn kept_bytes(chunk: &ProviderChunk) -> usize {
    match chunk {
        ProviderChunk::Text(text) | ProviderChunk::Reasoning(text) => text.len(),
        ProviderChunk::ToolCallStarted { name } => name.len(),
        ProviderChunk::ToolCall(_) | ProviderChunk::Usage(_) | ProviderChunk::Finish(_) => 0,
    }
}

/// Whether a step's chunks, with what went out before (`sent`, updated) and what the
/// decoder holds, pass [`MAX_ANSWER_BYTES`].
pub(crate) fn past_answer_cap(sent: &mut usize, step: &Step, held: usize) -> bool {
    let (Step::More(chunks) | Step::Done(chunks)) = step;
    for chunk in chunks {
        *sent = sent.saturating_add(kept_bytes(chunk));
    }
    sent.saturating_add(held) > MAX_ANSWER_BYTES
}

/// The error of an answer past [`MAX_ANSWER_BYTES`].
pub(crate) fn answer_too_large(provider: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::InvalidResponse,
        provider,
        format!(
            "the upstream's answer passed {} MiB (text, reasoning and tool calls together)",
            MAX_ANSWER_BYTES / (1024 * 1024)
        ),
    )
}

/// An event's trimmed data; `None` for an event that carries nothing (keep-alives).
pub(crate) fn event_data(event: &SseEvent) -> Option<&str> {
    event
        .data
        .as_deref()
        .map(str::trim)
        .filter(|data| !data.is_empty())
}

/// How every wire format ends a call: the assembled tool calls in order, the call's usage,
/// then the finish reason.
pub(crate) fn closing_chunks(
    calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish: FinishReason,
) -> Vec<ProviderChunk> {
    let mut out: Vec<ProviderChunk> = calls.into_iter().map(ProviderChunk::ToolCall).collect();
    out.extend(usage.map(ProviderChunk::Usage));
    out.push(ProviderChunk::Finish(finish));
    out
}

/// An event's JSON payload, or the `InvalidResponse` error every wire format reports for a
/// payload it cannot read.
pub(crate) fn json_payload<T: serde::de::DeserializeOwned>(
    provider: &str,
    data: &str,
) -> Result<T, ProviderError> {
    serde_json::from_str(data).map_err(|error| {
        ProviderError::new(
            ProviderErrorKind::InvalidResponse,
            provider,
            format!(
                "malformed event ({error}): {}",
                super::errors::truncate(data)
            ),
        )
    })
}

/// Drives `decoder` over an SSE byte stream. The stream ends after `Done` or the first
/// error; after a `Done` the body's rest is read in the background ([`read_out`]).
///
/// Bounds: one event at most [`MAX_EVENT_BYTES`]; the call's answer at most
/// [`MAX_ANSWER_BYTES`] (then `InvalidResponse`, and what the decoder held is dropped);
/// `idle_timeout` between two events with data (then `Timeout`). SSE comments and events
/// without data do not count as data: OpenRouter sends `: OPENROUTER PROCESSING` while a
/// model is queued or thinks, but a provider that sends nothing while its model thinks
/// gets the same `idle_timeout`, and an upstream sending only comments held the call
/// until the turn's timeout.
pub(crate) fn decode_events<S, E, D>(mut decoder: D, body: S, idle_timeout: Duration) -> ChunkStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
    D: EventDecoder,
{
    Box::pin(async_stream::stream! {
        let mut events = Some(Events::new(body, MAX_EVENT_BYTES));
        // Bytes of text, reasoning and call names that went out.
        let mut sent = 0;
        // One timer, moved on only when it fires early: a timeout per event would register
        // and remove a timer for every token. `last` is when an event with data arrived.
        let mut last = tokio::time::Instant::now();
        let idle = tokio::time::sleep_until(last + idle_timeout);
        tokio::pin!(idle);
        loop {
            let Some(body) = events.as_mut() else {
                return;
            };
            let next = tokio::select! {
                biased;
                next = body.next() => Some(next),
                () = &mut idle => None,
            };
            let Some(next) = next else {
                if last.elapsed() < idle_timeout {
                    idle.as_mut().reset(last + idle_timeout);
                    continue;
                }
                yield Err(ProviderError::new(
                    ProviderErrorKind::Timeout,
                    decoder.provider(),
                    format!("no data from upstream for {idle_timeout:?} (SSE comments do not count)"),
                ));
                return;
            };
            let step = match next {
                Some(Ok(event)) => {
                    if event.data.is_some() {
                        last = tokio::time::Instant::now();
                    }
                    match decoder.on_event(event) {
                        Ok(step) if past_answer_cap(&mut sent, &step, decoder.held()) => {
                            Err(answer_too_large(decoder.provider()))
                        }
                        Ok(Step::Done(chunks)) => {
                            if let Some(rest) = events.take() {
                                read_out(rest);
                            }
                            Ok(Step::Done(chunks))
                        }
                        step => step,
                    }
                }
                Some(Err(error)) => Err(body_error(decoder.provider(), &error)),
                None => decoder.on_end_of_body().map(Step::Done),
            };
            match step {
                Ok(Step::More(chunks)) => {
                    for chunk in chunks {
                        yield Ok(chunk);
                    }
                }
                Ok(Step::Done(chunks)) => {
                    for chunk in chunks {
                        yield Ok(chunk);
                    }
                    return;
                }
                Err(error) => {
                    yield Err(error);
                    return;
                }
            }
        }
    })
}

/// How long, and for how many more events, a body is read after its format's last event.
const READ_OUT_FOR: Duration = Duration::from_secs(1);
const READ_OUT_EVENTS: usize = 16;

/// Reads what follows the format's last event (`[DONE]`, `message_stop`,
/// `response.completed`): the chunked body's terminator, a trailing blank line. Only a body
/// read to its end leaves its connection reusable, and the call's consumer stops at the last
/// chunk, often before the terminator has arrived; closed instead, every call would pay a
/// new connection (and the upstream a `TIME_WAIT`). In the background, so the last chunks
/// are not held back, and bounded: an upstream that keeps the body open after its last
/// event loses the connection after [`READ_OUT_FOR`]. The upstream has finished generating,
/// so this costs no tokens; a call cancelled mid-stream is still closed at once.
fn read_out<S: Stream + Unpin + Send + 'static>(mut events: S) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let rest = async {
            for _ in 0..READ_OUT_EVENTS {
                if events.next().await.is_none() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(READ_OUT_FOR, rest).await;
    });
}

/// The most bytes one SSE event may take, its lines up to the blank line that ends it. The
/// parser holds an unfinished event whole, so an upstream that never ends one (a line
/// without end, `data:` lines without the blank line) would grow the server's memory until
/// it failed. Far above the largest event a provider sends (a Responses
/// `response.completed` repeats the whole output; an image comes inline in base64).
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// The call's error for a stream that stopped: the body's own error (`Connection`), or
/// bytes that are no SSE or an event past [`MAX_EVENT_BYTES`] (`InvalidResponse`).
fn body_error(provider: &str, error: &EventsError) -> ProviderError {
    let (kind, message) = match error {
        EventsError::Parse(too_large @ ParseError::EventTooLarge(_)) => {
            (ProviderErrorKind::InvalidResponse, too_large.to_string())
        }
        EventsError::Parse(ParseError::Malformed(why)) => (
            ProviderErrorKind::InvalidResponse,
            format!("malformed SSE: {why}"),
        ),
        EventsError::Body(chain) => (
            ProviderErrorKind::Connection,
            format!("stream broken: {chain}"),
        ),
    };
    ProviderError::new(kind, provider, message)
}

/// An error and its sources, e.g. "error decoding response body: connection reset".
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures::StreamExt;

    use super::*;

    /// A test format: `t:N` goes out as N bytes of text, `h:N` is N bytes held back,
    /// `done` ends the stream.
    struct Counting {
        held: Held,
    }

    impl EventDecoder for Counting {
        fn new(_: String) -> Self {
            Self {
                held: Held::default(),
            }
        }
        fn provider(&self) -> &str {
            "test"
        }
        fn on_event(&mut self, event: SseEvent) -> Result<Step, ProviderError> {
            let data = event_data(&event).unwrap_or_default();
            if data == "done" {
                return Ok(Step::Done(vec![ProviderChunk::Finish(FinishReason::Stop)]));
            }
            let n = |rest: &str| rest.parse::<usize>().unwrap();
            Ok(Step::More(match data.split_once(':') {
                Some(("t", rest)) => vec![ProviderChunk::Text("x".repeat(n(rest)))],
                Some(("h", rest)) => {
                    self.held.add(n(rest));
                    Vec::new()
                }
                _ => Vec::new(),
            }))
        }
        fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError> {
            Ok(Vec::new())
        }
        fn on_whole_body(&mut self, _: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError> {
            Ok(Vec::new())
        }
        fn held(&self) -> usize {
            self.held.bytes()
        }
    }

    /// A body that sends each piece after its gap (ms), then stays silent.
    fn paced(
        pieces: Vec<(u64, &'static str)>,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
        async_stream::stream! {
            for (gap, piece) in pieces {
                tokio::time::sleep(Duration::from_millis(gap)).await;
                yield Ok(Bytes::from_static(piece.as_bytes()));
            }
            std::future::pending::<()>().await;
        }
    }

    /// The chunks of `body` decoded with [`Counting`], its error, and when it came.
    async fn run(
        body: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
        idle: Duration,
    ) -> (Vec<ProviderChunk>, Option<ProviderError>, Duration) {
        let start = tokio::time::Instant::now();
        let mut stream = decode_events(Counting::new(String::new()), body, idle);
        let mut chunks = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => chunks.push(chunk),
                Err(error) => return (chunks, Some(error), start.elapsed()),
            }
        }
        (chunks, None, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_limit_runs_from_the_last_data_event_not_from_the_first() {
        let idle = Duration::from_millis(1000);
        // Events 600 ms apart for 3 s: never 1 s without data, though the first timer would
        // have fired at 1 s.
        let (chunks, error, at) = run(paced(vec![(600, "data: t:1\n\n"); 5]), idle).await;
        assert_eq!(chunks.len(), 5);
        let error = error.unwrap();
        assert_eq!(error.kind, ProviderErrorKind::Timeout);
        assert!(error.message.contains("1s"), "{}", error.message);
        // The wait began with the last event, at 3 s: the limit struck at 4 s.
        assert_eq!(at, Duration::from_millis(4000));
    }

    #[tokio::test(start_paused = true)]
    async fn comments_and_events_without_data_do_not_hold_a_stream_open() {
        let idle = Duration::from_millis(1000);
        // One event, then a comment (or a data-less event) every 300 ms for ever: before,
        // each piece restarted the limit and the call lasted until the turn's timeout.
        for filler in [": OPENROUTER PROCESSING\n\n", "event: ping\n\n", ": x\n"] {
            let mut pieces = vec![(0, "data: t:1\n\n")];
            pieces.extend(std::iter::repeat_n((300, filler), 100));
            let (chunks, error, at) = run(paced(pieces), idle).await;
            assert_eq!(chunks, vec![ProviderChunk::Text("x".into())], "{filler:?}");
            assert_eq!(
                error.unwrap().kind,
                ProviderErrorKind::Timeout,
                "{filler:?}"
            );
            assert_eq!(at, idle, "{filler:?}");
        }
    }

    #[tokio::test]
    async fn an_answer_past_its_cap_fails_counting_what_went_out_and_what_is_held() {
        let mib = 1024 * 1024;
        let cap = MAX_ANSWER_BYTES / mib;
        let event = |kind: &str, n: usize| Ok(Bytes::from(format!("data: {kind}:{n}\n\n")));
        // Exactly the cap, half sent and half held: a whole answer.
        let mut body = vec![
            event("t", MAX_ANSWER_BYTES / 2),
            event("h", MAX_ANSWER_BYTES / 2),
        ];
        body.push(Ok(Bytes::from_static(b"data: done\n\n")));
        let (chunks, error, _) = run(futures::stream::iter(body), Duration::from_secs(5)).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(chunks.len(), 2);
        // A MiB at a time, sent or held, for ever: cut at the cap, and the chunk that
        // passed it never goes out.
        for kind in ["t", "h"] {
            let endless = futures::stream::iter((0..10 * cap).map(move |_| event(kind, mib)));
            let (chunks, error, _) = run(endless, Duration::from_secs(5)).await;
            let error = error.unwrap();
            assert_eq!(error.kind, ProviderErrorKind::InvalidResponse, "{kind}");
            assert!(
                error.message.contains(&format!("{cap} MiB")),
                "{}",
                error.message
            );
            let sent: usize = chunks.iter().map(kept_bytes).sum();
            assert_eq!(
                sent,
                if kind == "t" { MAX_ANSWER_BYTES } else { 0 },
                "{kind}"
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod answer_cap_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
pub(crate) mod split_tests;
