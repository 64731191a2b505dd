//! massgen's own HTTP/1.1 client for plain `http://` upstreams (vLLM, Ollama, SGLang, a
//! local gateway, the simulator).
//!
//! Why not hyper's: every call of a session is in flight at once, one connection each, and
//! hyper's client gives every connection its own task, a dispatch channel (~10 KB) and an
//! 8 KiB write buffer that no option shrinks; that was a third of a session's memory. The
//! calls here are all alike (one POST with a body already in memory, a streamed response),
//! so the connection needs no task of its own: the request is written from the caller's
//! task, the response is read by whoever polls the body, through one fixed 4 KiB buffer.
//! Response heads are parsed by `httparse` (hyper's own parser); bodies are framed by
//! `Content-Length`, chunked transfer coding or the connection's end (RFC 9112 §6).

mod body;
mod framing;
mod pool;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode, Uri};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use self::body::PlainBody;
use self::framing::Framing;
use self::pool::Pool;
use crate::response::{Response, SendError};

/// What one connection reads into at a time. An SSE event is a few hundred bytes and is
/// parsed as it arrives, so a bigger buffer would only save read calls when many events
/// wait at once. A call holds it only while bytes wait to be read or parsed: not while
/// the model thinks, nor between two tokens.
const READ_BUFFER: usize = 4 * 1024;

/// The largest response head read (status line and headers); past it the call fails.
const MAX_HEAD: usize = 64 * 1024;

/// How soon a pooled connection must fail, after the request went out on it, for the
/// request to be sent again on a new one: an upstream that closed the connection while it
/// was idle answers within a round trip.
const RESEND_WITHIN: Duration = Duration::from_secs(1);

/// The most header fields a response head may have.
const MAX_HEADERS: usize = 100;

/// How long a response head may take from its first byte to its end, interim (1xx) heads
/// before it included. Waiting for the first byte is the model's time, bounded by the
/// call's `first_byte_timeout`; once an upstream answers, a real one sends its head in one
/// packet. A head sent a byte a second, or `100 Continue` heads without end, held a call
/// for the turn's whole timeout.
pub(crate) const HEAD_WITHIN: Duration = Duration::from_secs(10);

/// The client: a pool of idle connections per upstream host. Cheap to share by `Arc`.
pub(crate) struct H1Client {
    pool: Arc<Pool>,
    connect_timeout: Duration,
    keepalive: Duration,
    /// [`HEAD_WITHIN`], shorter in tests.
    head_within: Duration,
    user_agent: HeaderValue,
}

/// Where one configured URL is called: parsed once per provider, not per call.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// `host:port`, what is resolved and connected to, and the pool's key.
    address: Arc<str>,
    /// The `Host` header: the URL's host, and its port when the URL names one.
    host: HeaderValue,
    path: Arc<str>,
}

impl Target {
    /// The target of an `http://` URL.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|error| format!("the upstream URL cannot be read: {error}"))?;
        let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
            return Err("the upstream URL names no host".to_string());
        };
        let port = uri.port_u16().unwrap_or(80);
        let address = format!("{host}:{port}");
        let named = match authority.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let host = HeaderValue::from_str(&named)
            .map_err(|_| "the upstream URL's host cannot be a header".to_string())?;
        let path = uri.path_and_query().map_or("/", |path| path.as_str());
        Ok(Self {
            address: address.into(),
            host,
            path: path.into(),
        })
    }
}

impl H1Client {
    pub(crate) fn new(
        connect_timeout: Duration,
        keepalive: Duration,
        head_within: Duration,
        user_agent: &'static str,
    ) -> Self {
        Self {
            pool: Arc::new(Pool::default()),
            connect_timeout,
            keepalive,
            head_within,
            user_agent: HeaderValue::from_static(user_agent),
        }
    }

    /// POSTs `body` (JSON) to `target` asking for an event stream, with `headers` besides
    /// (a name given there replaces the default). A pooled connection the upstream closed
    /// while idle fails before any byte of a response, within a round trip: the call is
    /// then made once more, on a new connection. One that fails later (the upstream may
    /// have been generating) is the call's error, not sent twice.
    pub(crate) async fn post(
        &self,
        target: &Target,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, SendError> {
        let head = self.request_head(target, headers, body.len());
        let mut pooled = self.pool.checkout(&target.address);
        loop {
            let (stream, reused) = match pooled.take() {
                Some(stream) => (stream, true),
                None => (self.connect(&target.address).await?, false),
            };
            let sent = tokio::time::Instant::now();
            match exchange(stream, &head, &body, self.head_within).await {
                Ok((stream, head, buf)) => {
                    let reuse = head
                        .reusable
                        .then(|| (Arc::clone(&self.pool), Arc::clone(&target.address)));
                    let body = PlainBody::new(stream, buf, head.framing, reuse);
                    return Ok(Response {
                        status: head.status,
                        headers: head.headers,
                        body: Box::pin(body),
                    });
                }
                Err(failed) if reused && !failed.answered && sent.elapsed() < RESEND_WITHIN => {
                    tracing::debug!(error = %failed.message, "pooled upstream connection was closed; calling on a new one");
                }
                Err(failed) => {
                    return Err(SendError {
                        timeout: failed.timeout,
                        message: failed.message,
                    });
                }
            }
        }
    }

    fn request_head(&self, target: &Target, headers: &HeaderMap, length: usize) -> Vec<u8> {
        let mut head = Vec::with_capacity(256 + target.path.len() + 64 * headers.len());
        head.extend_from_slice(b"POST ");
        head.extend_from_slice(target.path.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        let defaults = [
            (header::HOST, &target.host),
            (header::CONTENT_TYPE, &APPLICATION_JSON),
            (header::ACCEPT, &EVENT_STREAM),
            (header::USER_AGENT, &self.user_agent),
        ];
        for (name, value) in defaults {
            if !headers.contains_key(&name) {
                field(&mut head, &name, value);
            }
        }
        for (name, value) in headers {
            // The framing is this client's: the body's length, on a connection it keeps.
            if !FRAMING.contains(name) {
                field(&mut head, name, value);
            }
        }
        head.extend_from_slice(b"content-length: ");
        head.extend_from_slice(length.to_string().as_bytes());
        head.extend_from_slice(b"\r\n\r\n");
        head
    }

    async fn connect(&self, address: &str) -> Result<TcpStream, SendError> {
        let connecting = async {
            let mut last = None;
            for addr in tokio::net::lookup_host(address).await? {
                match TcpStream::connect(addr).await {
                    Ok(stream) => return Ok(stream),
                    Err(error) => last = Some(error),
                }
            }
            Err(last.unwrap_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the upstream host has no address",
                )
            }))
        };
        let stream = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                return Err(SendError {
                    timeout: error.kind() == std::io::ErrorKind::TimedOut,
                    message: format!("cannot connect to the upstream: {error}"),
                });
            }
            Err(_) => {
                return Err(SendError {
                    timeout: true,
                    message: format!(
                        "cannot connect to the upstream within {:?}",
                        self.connect_timeout
                    ),
                });
            }
        };
        tracing::debug!(address, "connected to the upstream");
        // Both best effort, as hyper's connector: a call works without them.
        let _ = stream.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new().with_time(self.keepalive);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        Ok(stream)
    }
}

const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");
const FRAMING: [HeaderName; 3] = [
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
];

fn field(head: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    head.extend_from_slice(name.as_str().as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value.as_bytes());
    head.extend_from_slice(b"\r\n");
}

/// A response head as read.
struct Head {
    status: StatusCode,
    headers: HeaderMap,
    framing: Framing,
    /// Whether the connection may carry another call once this body is read to its end.
    reusable: bool,
}

/// Why a call got no response head, whether any byte of one had arrived, and whether it
/// took too long.
struct Failed {
    message: String,
    answered: bool,
    timeout: bool,
}

impl Failed {
    fn new(message: String, answered: bool) -> Self {
        Self {
            message,
            answered,
            timeout: false,
        }
    }
}

/// Writes the request and reads the response head, which must end within `head_within`
/// of its first byte; what was read past it is the body's.
async fn exchange(
    mut stream: TcpStream,
    head: &[u8],
    body: &Bytes,
    head_within: Duration,
) -> Result<(TcpStream, Head, BytesMut), Failed> {
    let mut request = Buf::chain(head, &body[..]);
    stream.write_all_buf(&mut request).await.map_err(|error| {
        Failed::new(format!("cannot send the request upstream: {error}"), false)
    })?;
    let mut buf = BytesMut::new();
    // Set by the head's first byte.
    let mut deadline = None;
    loop {
        match take_head(&mut buf) {
            Ok(Some(head)) => return Ok((stream, head, buf)),
            Ok(None) => {}
            Err(message) => return Err(answered(message)),
        }
        let had = deadline.is_some();
        let read = async {
            // The buffer is taken only once there is something to read: while the model
            // thinks (seconds, with every session's calls in flight) a call holds none.
            stream.readable().await?;
            if buf.capacity() - buf.len() < READ_BUFFER / 4 {
                buf.reserve(READ_BUFFER);
            }
            // tokio's read (not `try_read`): a read that leaves room clears the readiness,
            // so the body's first read waits for the socket instead of finding nothing.
            stream.read_buf(&mut buf).await
        };
        let read = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
                Ok(read) => read,
                Err(_) => {
                    return Err(Failed {
                        message: format!(
                            "the upstream's response head did not end within {head_within:?} of its first byte"
                        ),
                        answered: true,
                        timeout: true,
                    });
                }
            },
            None => read.await,
        };
        match read {
            Ok(0) => {
                return Err(Failed::new(
                    "the upstream closed the connection before responding".to_string(),
                    had,
                ));
            }
            Ok(_) => {
                deadline.get_or_insert_with(|| tokio::time::Instant::now() + head_within);
            }
            Err(error) => {
                return Err(Failed::new(
                    format!("reading the upstream's response: {error}"),
                    had,
                ));
            }
        }
    }
}

/// The final response head at the start of `buf`, taken off it with the interim (1xx)
/// heads before it; `None` until one is whole. What stays in `buf` is the body's.
fn take_head(buf: &mut BytesMut) -> Result<Option<Head>, String> {
    while !buf.is_empty() {
        match parse_head(buf)? {
            Parsed::Final(len, head) => {
                buf.advance(len);
                return Ok(Some(head));
            }
            Parsed::Interim(len) => buf.advance(len),
            Parsed::Partial if buf.len() >= MAX_HEAD => {
                return Err(format!(
                    "the upstream's response head is larger than {} KiB",
                    MAX_HEAD / 1024
                ));
            }
            Parsed::Partial => return Ok(None),
        }
    }
    Ok(None)
}

fn answered(message: String) -> Failed {
    Failed::new(message, true)
}

enum Parsed {
    Partial,
    /// A 1xx response (`100 Continue`, `103 Early Hints`) of this many bytes: skipped.
    Interim(usize),
    Final(usize, Head),
}

fn parse_head(buf: &[u8]) -> Result<Parsed, String> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(error) => {
            return Err(format!(
                "the upstream's response head cannot be read: {error}"
            ));
        }
    };
    let code = response.code.unwrap_or(0);
    if (100..200).contains(&code) && code != 101 {
        return Ok(Parsed::Interim(len));
    }
    let status = StatusCode::from_u16(code)
        .ok()
        .filter(|status| *status != StatusCode::SWITCHING_PROTOCOLS)
        .ok_or_else(|| format!("the upstream answered with status {code}"))?;
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for field in response.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes());
        let value = HeaderValue::from_bytes(field.value);
        let (Ok(name), Ok(value)) = (name, value) else {
            return Err("the upstream's response has an unreadable header".to_string());
        };
        headers.append(name, value);
    }
    let framing = framing::framing(status, &headers)?;
    let keep_alive =
        response.version == Some(1) && !has_token(&headers, &header::CONNECTION, "close");
    // RFC 9112 §6.3: a response with both Transfer-Encoding and Content-Length may be an
    // attempt at smuggling; it is read as chunked, and its connection is not reused.
    let ambiguous = headers.contains_key(header::TRANSFER_ENCODING)
        && headers.contains_key(header::CONTENT_LENGTH);
    let reusable = keep_alive && framing != Framing::Close && !ambiguous;
    Ok(Parsed::Final(
        len,
        Head {
            status,
            headers,
            framing,
            reusable,
        },
    ))
}

/// Whether a comma-separated header has `token` (case-insensitive) in any of its values.
fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value
            .to_str()
            .unwrap_or("")
            .split(',')
            .any(|item| item.trim().eq_ignore_ascii_case(token))
    })
}

#[cfg(test)]
mod framing_tests;
#[cfg(test)]
mod tests;
