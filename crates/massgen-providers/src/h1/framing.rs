//! A response body's framing (RFC 9112 §6): which one its head gives ([`framing`]), and
//! the state machine that cuts the body out of the bytes read off its connection
//! ([`Deframer`]). No I/O here: [`super::body::PlainBody`] reads the bytes, and the
//! property tests (`framing_tests`) feed the same machine every split of recorded
//! responses.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, StatusCode, header};

/// The longest chunk-size line (with extensions) and the most trailer bytes read.
const MAX_CHUNK_LINE: usize = 4 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;

/// How a response body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// After this many bytes.
    Length(u64),
    Chunked,
    /// When the upstream closes the connection.
    Close,
}

/// The framing of a response with `status` and `headers`.
pub(super) fn framing(status: StatusCode, headers: &HeaderMap) -> Result<Framing, String> {
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::Length(0));
    }
    let mut codings = headers.get_all(header::TRANSFER_ENCODING).iter().peekable();
    if codings.peek().is_some() {
        // Chunked only when it is the last coding; otherwise the body runs to the close.
        let last = codings
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|coding| !coding.is_empty())
            .last();
        return Ok(match last {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => Framing::Chunked,
            _ => Framing::Close,
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for item in value.to_str().unwrap_or("").split(',') {
            let item = item.trim();
            let parsed = (!item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()))
                .then(|| item.parse::<u64>().ok())
                .flatten();
            match (parsed, length) {
                (Some(n), None) => length = Some(n),
                (Some(n), Some(m)) if n == m => {}
                _ => {
                    return Err("the upstream's response has an invalid Content-Length".to_string());
                }
            }
        }
    }
    Ok(length.map_or(Framing::Close, Framing::Length))
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Bytes left of a `Content-Length` body.
    Length(u64),
    /// Until the connection closes.
    Close,
    ChunkSize,
    /// Bytes left of the current chunk.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// Trailer fields after the last chunk, and their bytes so far.
    Trailers(usize),
    Done,
}

/// What the bytes buffered so far give.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The next piece of the body.
    Data(Bytes),
    /// Nothing until more bytes are read.
    NeedMore,
    /// The body ended; what is still buffered is past it.
    End,
}

/// A body being cut out of its connection's bytes: those read and not yet taken (`buf`),
/// and where in its framing it is.
pub(super) struct Deframer {
    /// Bytes read off the connection, not yet taken. The reader appends to it (and may
    /// replace an empty one, to hold no buffer while it waits).
    pub(super) buf: BytesMut,
    state: State,
}

impl Deframer {
    /// A body framed as `framing` whose first bytes (read with its head) are `buf`.
    pub(super) fn new(buf: BytesMut, framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::Close => State::Close,
        };
        Self { buf, state }
    }

    /// The next piece of the body from what is buffered.
    pub(super) fn step(&mut self) -> Result<Step, &'static str> {
        loop {
            match self.state {
                State::Done => return Ok(Step::End),
                State::Length(0) => self.state = State::Done,
                State::Length(left) => {
                    let Some(data) = self.take(left) else {
                        return Ok(Step::NeedMore);
                    };
                    self.state = State::Length(left - data.len() as u64);
                    return Ok(Step::Data(data));
                }
                State::Close => {
                    return Ok(self.take(u64::MAX).map_or(Step::NeedMore, Step::Data));
                }
                State::ChunkSize => {
                    let Some(line) = self.line(MAX_CHUNK_LINE, "a chunk size line is too long")?
                    else {
                        return Ok(Step::NeedMore);
                    };
                    let size = line.split(|&b| b == b';').next().unwrap_or(&[]);
                    let size =
                        chunk_size(size.trim_ascii()).ok_or("a chunk size cannot be read")?;
                    self.state = if size == 0 {
                        State::Trailers(0)
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::ChunkData(left) => {
                    let Some(data) = self.take(left) else {
                        return Ok(Step::NeedMore);
                    };
                    let left = left - data.len() as u64;
                    self.state = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                    return Ok(Step::Data(data));
                }
                State::ChunkEnd => match self.buf.first() {
                    None => return Ok(Step::NeedMore),
                    Some(b'\n') => {
                        self.buf.advance(1);
                        self.state = State::ChunkSize;
                    }
                    Some(b'\r') if self.buf.len() < 2 => return Ok(Step::NeedMore),
                    Some(b'\r') if self.buf[1] == b'\n' => {
                        self.buf.advance(2);
                        self.state = State::ChunkSize;
                    }
                    Some(_) => return Err("a chunk is longer than its size"),
                },
                State::Trailers(read) => {
                    let before = self.buf.len();
                    let line = self.line(MAX_TRAILERS - read, "the trailer fields are too long")?;
                    let Some(line) = line else {
                        return Ok(Step::NeedMore);
                    };
                    self.state = if line.is_empty() {
                        State::Done
                    } else {
                        State::Trailers(read + before - self.buf.len())
                    };
                }
            }
        }
    }

    /// The connection ended (a read found nothing more): true when that is the body's end
    /// (it runs to the close), false when the body was cut short.
    pub(super) fn closed(&mut self) -> bool {
        let ends = matches!(self.state, State::Close);
        self.state = State::Done;
        ends
    }

    /// Nothing more of this body is read (its connection failed).
    pub(super) fn stop(&mut self) {
        self.state = State::Done;
    }

    /// Up to `most` buffered bytes, or `None` when none are buffered.
    fn take(&mut self, most: u64) -> Option<Bytes> {
        if self.buf.is_empty() {
            return None;
        }
        let n = usize::try_from(most)
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        // Split off, not copied: the SSE parser reads the piece and drops it at once, and
        // an emptied buffer is given back anyway (see `PlainBody::poll_next`), so sharing
        // costs nothing and saves an allocation and a copy per token.
        Some(self.buf.split_to(n).freeze())
    }

    /// The next line without its line ending, when a whole one is buffered.
    fn line(
        &mut self,
        limit: usize,
        too_long: &'static str,
    ) -> Result<Option<Vec<u8>>, &'static str> {
        let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
            return if self.buf.len() >= limit {
                Err(too_long)
            } else {
                Ok(None)
            };
        };
        if end >= limit {
            return Err(too_long);
        }
        let mut line = self.buf.split_to(end + 1).to_vec();
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(Some(line))
    }
}

/// A chunk size: hexadecimal digits, at most 16 of them.
fn chunk_size(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let text = std::str::from_utf8(digits).ok()?;
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}
