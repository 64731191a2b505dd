//! The upstream event-stream parser: body chunks in, complete SSE events out, one event at
//! most a given size. Written for the hot path it is on (every token of every answer):
//! lines are found a word at a time, a line inside one chunk is read where it lies, only
//! an unfinished line is kept between chunks (so no byte is scanned twice), and nothing
//! async sits between the body and the decoder.
//!
//! It reads what `sse-stream` 0.2 (which it replaced) read, the WHATWG rules the providers
//! rely on: lines end in LF, CRLF or CR (a CRLF split between chunks is one end), a leading
//! UTF-8 BOM is skipped, `field: value` loses one leading space, `data` lines join with
//! `\n`, `:` opens a comment, an `id` holding NUL is ignored, a blank line dispatches the
//! event, and the unfinished event at the end of the body is dropped. Like `sse-stream`,
//! and unlike the spec, it dispatches an event that has fields but no data (`event: ping`;
//! the decoders skip it) and refuses what `sse-stream` refused, with its messages: a line
//! without a colon, an unknown field, a field given twice, invalid UTF-8, a `retry` that is
//! not a number. So a recorded stream gives the events it gave, and a malformed one the same
//! error (sooner: the events before it in the same chunk now come out first).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::Stream;

/// One SSE event as the decoders see it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (the event's type), if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`; `None` when the event had none.
    pub data: Option<String>,
    pub id: Option<String>,
    /// The `retry:` field, in milliseconds.
    pub retry: Option<u64>,
}

/// Why the parser stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParseError {
    #[error("the upstream sent an event of more than {} MiB", .0 / (1024 * 1024))]
    EventTooLarge(usize),
    /// Not SSE; the message is the one `sse-stream` gave.
    #[error("{0}")]
    Malformed(String),
}

/// Why the event stream ended early: the parser's error, or the body's (its error chain).
#[derive(Debug)]
pub(crate) enum EventsError {
    Parse(ParseError),
    Body(String),
}

/// A body's events, parsed as its chunks arrive.
pub(crate) struct Events<S> {
    body: Pin<Box<S>>,
    parser: Parser,
    body_ended: bool,
}

impl<S> Events<S> {
    pub(crate) fn new(body: S, max_event: usize) -> Self {
        Self {
            body: Box::pin(body),
            parser: Parser::new(max_event),
            body_ended: false,
        }
    }
}

impl<S, E> Stream for Events<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: std::error::Error,
{
    type Item = Result<SseEvent, EventsError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(next) = this.parser.next_event() {
                return Poll::Ready(Some(next.map_err(EventsError::Parse)));
            }
            if this.body_ended || this.parser.failed() {
                return Poll::Ready(None);
            }
            match ready!(this.body.as_mut().poll_next(cx)) {
                Some(Ok(chunk)) => this.parser.feed(&chunk),
                Some(Err(error)) => {
                    this.body_ended = true;
                    return Poll::Ready(Some(Err(EventsError::Body(super::error_chain(&error)))));
                }
                // An unfinished last event is dropped, as the spec (and `sse-stream`) do.
                None => this.body_ended = true,
            }
        }
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// An unfinished line's buffer larger than this is let go once the line is read, so that
/// one huge event does not keep its memory for the rest of the stream.
const KEEP_LINE_CAPACITY: usize = 64 * 1024;

/// The parser's state between chunks.
pub(crate) struct Parser {
    max_event: usize,
    /// The start of a line that a chunk ended inside of.
    line: Vec<u8>,
    /// The last chunk ended with a CR: an LF opening the next belongs to that line end.
    after_cr: bool,
    /// No line read yet: the first may open with a BOM.
    first_line: bool,
    /// The fields of the event being read; `None` until one is seen.
    current: Option<SseEvent>,
    /// The bytes of the event being read: its complete lines with their line ends.
    event_bytes: usize,
    ready: VecDeque<SseEvent>,
    error: Option<ParseError>,
    /// The error went out: nothing more is read.
    failed: bool,
}

impl Parser {
    /// A parser for a stream whose events may take at most `max_event` bytes each, from the
    /// first byte of their first line to the end of their last, comments included.
    pub(crate) fn new(max_event: usize) -> Self {
        Self {
            max_event,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            current: None,
            event_bytes: 0,
            ready: VecDeque::new(),
            error: None,
            failed: false,
        }
    }

    /// The next complete event, or the error that stopped the parser (once; nothing after).
    pub(crate) fn next_event(&mut self) -> Option<Result<SseEvent, ParseError>> {
        if let Some(event) = self.ready.pop_front() {
            return Some(Ok(event));
        }
        let error = self.error.take()?;
        self.failed = true;
        Some(Err(error))
    }

    /// Whether the parser has stopped on an error that went out.
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// Reads the next chunk of the body; its complete events wait in [`Parser::next_event`].
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        if self.error.is_some() || self.failed {
            return;
        }
        if let Err(error) = self.read_lines(chunk) {
            self.error = Some(error);
            self.line = Vec::new();
        }
    }

    fn read_lines(&mut self, chunk: &[u8]) -> Result<(), ParseError> {
        let mut rest = chunk;
        if std::mem::take(&mut self.after_cr)
            && let Some(tail) = rest.strip_prefix(b"\n")
        {
            // The LF of a CRLF counts with its line, as it does in one chunk (none for a
            // blank line, which ended the event).
            if self.event_bytes > 0 {
                self.count(1)?;
            }
            rest = tail;
        }
        while let Some(at) = find_line_end(rest) {
            let mut next = at + 1;
            if rest[at] == b'\r' {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let (tail, end) = (&rest[..at], next - at);
            rest = &rest[next..];
            if self.line.is_empty() {
                self.read_line(tail, end)?;
                continue;
            }
            // Counted before the line is joined, so that it never grows past the bound.
            if self.event_bytes + self.line.len() + tail.len() + end > self.max_event {
                return Err(ParseError::EventTooLarge(self.max_event));
            }
            let mut line = std::mem::take(&mut self.line);
            keep(&mut line, tail, self.max_event);
            let read = self.read_line(&line, end);
            if line.capacity() <= KEEP_LINE_CAPACITY {
                line.clear();
                self.line = line;
            }
            read?;
        }
        // Checked before it is kept: an endless line stops at the bound, not past it.
        if self.event_bytes + self.line.len() + rest.len() > self.max_event {
            return Err(ParseError::EventTooLarge(self.max_event));
        }
        keep(&mut self.line, rest, self.max_event);
        Ok(())
    }

    /// `bytes` more of the event being read.
    fn count(&mut self, bytes: usize) -> Result<(), ParseError> {
        self.event_bytes += bytes;
        if self.event_bytes > self.max_event {
            return Err(ParseError::EventTooLarge(self.max_event));
        }
        Ok(())
    }

    /// One complete line, whose line end took `end` bytes.
    fn read_line(&mut self, mut line: &[u8], end: usize) -> Result<(), ParseError> {
        let bytes = line.len() + end;
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.event_bytes = 0;
            self.ready.extend(self.current.take());
            return Ok(());
        }
        self.count(bytes)?;
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            return Err(malformed("invalid line"));
        };
        let (field, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        match field {
            b"data" => {
                let value = utf8(value)?;
                let event = self.current.get_or_insert_default();
                match &mut event.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => event.data = Some(value.to_owned()),
                }
            }
            b"event" => {
                let value = utf8(value)?;
                let event = self.current.get_or_insert_default();
                if event.event.is_some() {
                    return Err(malformed("duplicated event line"));
                }
                event.event = Some(value.to_owned());
            }
            // The spec: an id holding NUL is ignored whole.
            b"id" if value.contains(&0) => {}
            b"id" => {
                let value = utf8(value)?;
                let event = self.current.get_or_insert_default();
                if event.id.is_some() {
                    return Err(malformed("duplicated id line"));
                }
                event.id = Some(value.to_owned());
            }
            b"retry" => {
                let retry = utf8(value)?
                    .trim_ascii()
                    .parse::<u64>()
                    .map_err(|error| malformed(&format!("int parse error: {error}")))?;
                let event = self.current.get_or_insert_default();
                if event.retry.is_some() {
                    return Err(malformed("duplicated retry line"));
                }
                event.retry = Some(retry);
            }
            // A comment.
            b"" => {}
            _ => return Err(malformed("invalid line")),
        }
        Ok(())
    }
}

/// Appends `bytes` to an unfinished line, growing it as a `Vec` does but never past `max`
/// (the bound, checked before), so that its memory is bounded by the bound, not twice it.
fn keep(line: &mut Vec<u8>, bytes: &[u8], max: usize) {
    let needed = line.len() + bytes.len();
    if needed > line.capacity() {
        let target = needed.max(line.capacity() * 2).min(max).max(needed);
        line.reserve_exact(target - line.len());
    }
    line.extend_from_slice(bytes);
}

fn malformed(message: &str) -> ParseError {
    ParseError::Malformed(message.to_owned())
}

fn utf8(bytes: &[u8]) -> Result<&str, ParseError> {
    std::str::from_utf8(bytes).map_err(|error| malformed(&format!("utf8 parse error: {error}")))
}

/// Where the first CR or LF in `bytes` is, eight bytes at a time: a line is a few hundred
/// bytes (one JSON chunk), and a byte-by-byte search was most of the parser's time.
pub(crate) fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    const CR: u64 = u64::from_ne_bytes([b'\r'; 8]);
    // The high bit of each zero byte of `word`, and maybe of bytes above one (a borrow):
    // the lowest bit set is always a real zero byte.
    let zero_bytes = |word: u64| word.wrapping_sub(ONES) & !word & HIGH;
    let (words, tail) = bytes.as_chunks::<8>();
    for (n, word) in words.iter().enumerate() {
        // Little-endian, so that the lowest bit is the first byte.
        let word = u64::from_le_bytes(*word);
        let found = zero_bytes(word ^ LF) | zero_bytes(word ^ CR);
        if found != 0 {
            return Some(n * 8 + found.trailing_zeros() as usize / 8);
        }
    }
    let at = tail
        .iter()
        .position(|&byte| byte == b'\n' || byte == b'\r')?;
    Some(words.len() * 8 + at)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests;
