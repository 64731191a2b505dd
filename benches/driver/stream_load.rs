//! A closed-loop load generator for streamed HTTP/1.1 responses: N keep-alive connections,
//! each sending the same request again as soon as the previous response has ended, for a
//! fixed time. Each response is timed at the socket: its first body byte, its first token
//! (the first event that carries model output) and its last byte. Raw HTTP over tokio
//! (no client library between the socket and the clock), so that the generator, which
//! shares a core with the simulator, costs as little as it can and the same for every
//! target.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest one response may take before it counts as an error (and its connection is
/// dropped).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection gives up after this many failed requests in a row: the step still ends on
/// time when the target is down.
const MAX_ERRORS_IN_A_ROW: u32 = 20;
/// A head larger than this is not a head.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// A body larger than this is refused: the streams measured here are a few KB.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// One response, in ms from the request's first byte written.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub first_byte_ms: f64,
    /// `None` when no event carried model output (the response is still counted).
    pub first_token_ms: Option<f64>,
    pub last_byte_ms: f64,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub samples: Vec<Sample>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Connections opened, the first of each connection's included.
    pub connects: u64,
    pub elapsed: Duration,
}

/// A POST of `body` (JSON) to `path` as it goes on the wire, keep-alive.
pub fn post(host: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut wire = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    wire.extend_from_slice(body);
    wire
}

/// `connections` connections to `addr`, each sending `request` back to back until
/// `duration` has passed (a response under way then is finished and counted); each sends
/// at least one.
pub async fn run(
    addr: SocketAddr,
    request: Arc<Vec<u8>>,
    connections: usize,
    duration: Duration,
) -> Outcome {
    let started = Instant::now();
    let until = started + duration;
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(connection(addr, Arc::clone(&request), until)))
        .collect();
    let mut all = Outcome::default();
    for task in tasks {
        let one = match task.await {
            Ok(one) => one,
            Err(e) => Outcome {
                errors: 1,
                first_error: Some(format!("load task: {e}")),
                ..Outcome::default()
            },
        };
        all.samples.extend(one.samples);
        all.errors += one.errors;
        all.connects += one.connects;
        if all.first_error.is_none() {
            all.first_error = one.first_error;
        }
    }
    all.elapsed = started.elapsed();
    all
}

async fn connection(addr: SocketAddr, request: Arc<Vec<u8>>, until: Instant) -> Outcome {
    let mut out = Outcome::default();
    let mut conn: Option<TcpStream> = None;
    let mut in_a_row = 0;
    let mut buf = vec![0; 64 * 1024];
    let mut tries = 0u64;
    while (tries == 0 || Instant::now() < until) && in_a_row < MAX_ERRORS_IN_A_ROW {
        tries += 1;
        let stream = match conn.as_mut() {
            Some(s) => s,
            None => match TcpStream::connect(addr).await {
                Ok(s) => {
                    // The request is one write; the option only keeps it from waiting.
                    let _ = s.set_nodelay(true);
                    out.connects += 1;
                    conn.insert(s)
                }
                Err(e) => {
                    fail(&mut out, format!("connect {addr}: {e}"));
                    in_a_row += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        match tokio::time::timeout(RESPONSE_TIMEOUT, exchange(stream, &request, &mut buf)).await {
            Ok(Ok((sample, keep_alive))) => {
                out.samples.push(sample);
                in_a_row = 0;
                if !keep_alive {
                    conn = None;
                }
            }
            Ok(Err(e)) => {
                fail(&mut out, e);
                in_a_row += 1;
                conn = None;
            }
            Err(_) => {
                fail(&mut out, format!("no end within {RESPONSE_TIMEOUT:?}"));
                in_a_row += 1;
                conn = None;
            }
        }
    }
    out
}

fn fail(out: &mut Outcome, error: String) {
    out.errors += 1;
    out.first_error.get_or_insert(error);
}

/// One request and its whole response: the sample and whether the connection stays open.
async fn exchange(
    conn: &mut TcpStream,
    request: &[u8],
    buf: &mut [u8],
) -> Result<(Sample, bool), String> {
    let start = Instant::now();
    conn.write_all(request)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut head = Vec::new();
    let head_end = loop {
        let n = conn.read(buf).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed before a response head".into());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = find(&head, b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > MAX_HEAD_BYTES {
            return Err("response head over 64 KiB".into());
        }
    };
    let now = Instant::now();
    let ms = |t: Instant| (t - start).as_secs_f64() * 1e3;
    let Head {
        status,
        framing,
        keep_alive,
    } = parse_head(&head[..head_end])?;
    let mut body = Body::new(framing);
    let mut first_byte = None;
    let mut first_token = None;
    let mut last = now;
    if head.len() > head_end {
        first_byte = Some(now);
        body.feed(&head[head_end..])?;
    }
    while !body.done() {
        let n = conn.read(buf).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("closed mid-body".into());
        }
        last = Instant::now();
        first_byte.get_or_insert(last);
        body.feed(&buf[..n])?;
        if first_token.is_none() && body.has_token() {
            first_token = Some(last);
        }
    }
    if first_token.is_none() && body.has_token() {
        first_token = first_byte;
    }
    let text = String::from_utf8_lossy(&body.payload);
    if status != 200 {
        return Err(format!("status {status}: {:.300}", text));
    }
    if text.contains("data: {\"error\"") {
        return Err(format!("error event: {:.300}", text));
    }
    if !text.contains("data: [DONE]") {
        return Err(format!("no [DONE]: {:.300}", text));
    }
    Ok((
        Sample {
            first_byte_ms: ms(first_byte.unwrap_or(last)),
            first_token_ms: first_token.map(ms),
            last_byte_ms: ms(last),
        },
        keep_alive,
    ))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Chunked,
    Length(usize),
}

struct Head {
    status: u16,
    framing: Framing,
    keep_alive: bool,
}

fn parse_head(head: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(head).map_err(|_| "response head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut framing = None;
    let mut keep_alive = status_line.starts_with("HTTP/1.1");
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "transfer-encoding" if value.eq_ignore_ascii_case("chunked") => {
                framing = Some(Framing::Chunked);
            }
            "content-length" if framing.is_none() => {
                let n = value
                    .parse()
                    .map_err(|_| format!("content-length {value:?}"))?;
                framing = Some(Framing::Length(n));
            }
            "connection" => keep_alive = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let framing = framing.ok_or("a body framed by the connection's close")?;
    Ok(Head {
        status,
        framing,
        keep_alive,
    })
}

/// Where the chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Reading a chunk-size line.
    Size,
    Data(usize),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines up to the empty one.
    Trailer,
    Done,
}

/// A response body as it arrives: its payload (chunk framing removed) and its end.
struct Body {
    framing: Framing,
    state: State,
    line: Vec<u8>,
    payload: Vec<u8>,
    /// How far `has_token` has looked.
    scanned: usize,
}

/// Events whose field opens with a character carry model output; `"content":""` (a role
/// chunk) does not.
const TOKEN_FIELDS: [&[u8]; 3] = [b"\"content\":\"", b"\"arguments\":\"", b"\"text\":\""];

impl Body {
    fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Data(n),
            Framing::Chunked => State::Size,
        };
        Self {
            framing,
            state,
            line: Vec::new(),
            payload: Vec::new(),
            scanned: 0,
        }
    }

    fn done(&self) -> bool {
        self.state == State::Done
    }

    fn feed(&mut self, mut input: &[u8]) -> Result<(), String> {
        while !input.is_empty() {
            match self.state {
                State::Done => return Err("bytes past the end of the body".into()),
                State::Data(n) => {
                    let k = n.min(input.len());
                    self.payload.extend_from_slice(&input[..k]);
                    if self.payload.len() > MAX_BODY_BYTES {
                        return Err("body over 16 MiB".into());
                    }
                    input = &input[k..];
                    self.state = match (n - k, self.framing) {
                        (0, Framing::Chunked) => State::DataEnd,
                        (0, Framing::Length(_)) => State::Done,
                        (left, _) => State::Data(left),
                    };
                }
                State::Size | State::DataEnd | State::Trailer => {
                    let Some(i) = input.iter().position(|&b| b == b'\n') else {
                        self.line.extend_from_slice(input);
                        if self.line.len() > 4096 {
                            return Err("a chunk line over 4 KiB".into());
                        }
                        return Ok(());
                    };
                    self.line.extend_from_slice(&input[..i]);
                    input = &input[i + 1..];
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    self.state = match self.state {
                        State::Size => {
                            let hex = line.split(|&b| b == b';').next().unwrap_or_default();
                            let hex = std::str::from_utf8(hex).unwrap_or_default().trim();
                            match usize::from_str_radix(hex, 16) {
                                Ok(0) => State::Trailer,
                                Ok(n) => State::Data(n),
                                Err(_) => return Err(format!("chunk size {hex:?}")),
                            }
                        }
                        State::DataEnd if line.is_empty() => State::Size,
                        State::DataEnd => return Err("no CRLF after a chunk".into()),
                        _ if line.is_empty() => State::Done,
                        _ => State::Trailer,
                    };
                }
            }
        }
        Ok(())
    }

    /// Whether the payload so far holds an event with model output.
    fn has_token(&mut self) -> bool {
        let from = self.scanned.saturating_sub(16);
        self.scanned = self.payload.len();
        let new = &self.payload[from..];
        TOKEN_FIELDS.iter().any(|field| {
            let mut at = 0;
            while let Some(i) = find(&new[at..], field) {
                let next = at + i + field.len();
                match new.get(next) {
                    Some(b'"') => at = next,
                    Some(_) => return true,
                    // Its first character has not come: the next look starts 16 bytes back.
                    None => return false,
                }
            }
            false
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoder finds the body's end and payload however the bytes are cut.
    #[test]
    fn chunked_bodies_end_where_they_end_in_any_pieces() {
        let wire = b"6\r\ndata: \r\n1d;ext=1\r\n{\"content\":\"x\"}\n\ndata: [DONE]\r\n0\r\nTrailer: y\r\n\r\n";
        for cut in 1..wire.len() {
            let mut body = Body::new(Framing::Chunked);
            let mut token_at = None;
            for (i, piece) in wire.chunks(cut).enumerate() {
                assert!(!body.done());
                body.feed(piece).unwrap();
                if token_at.is_none() && body.has_token() {
                    token_at = Some(i);
                }
            }
            assert!(body.done(), "cut {cut}");
            assert!(token_at.is_some(), "cut {cut}");
            assert_eq!(
                body.payload,
                b"data: {\"content\":\"x\"}\n\ndata: [DONE]".to_vec()
            );
        }
        let mut role = Body::new(Framing::Length(22));
        role.feed(b"{\"content\":\"\",\"x\":1}\n\n").unwrap();
        assert!(role.done() && !role.has_token());
        let mut bad = Body::new(Framing::Chunked);
        assert!(bad.feed(b"zz\r\n").is_err());
    }
}
