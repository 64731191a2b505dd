//! The accept loop (instead of `axum::serve`, which has no timeouts): HTTP/1 and HTTP/2,
//! caps on open connections (in all and per client address), a limit on the time a client
//! takes to send its request headers, an idle timeout for connections with no request in
//! flight, HTTP/2 keep-alive pings, and graceful shutdown (stop accepting, let open
//! connections finish their responses).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::limits::ClientAddr;
use super::refuse::Refuser;
use crate::telemetry::metrics;

/// HTTP/2 PING period and how long an unanswered PING may wait before the connection is
/// closed: finds peers that vanished without closing (a window of 0 held forever, a
/// dropped network), which TCP alone notices only after hours.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(20);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a connection told to close (idle, or shutting down) may take to do so.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Connection limits and timeouts (`ProductionSettings`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
}

/// hyper's connection builders: for HTTP/1, for HTTP/2, and detecting it. Shared by `Arc`:
/// every connection's task holds them while it lives.
struct Builders {
    h1: Builder<TokioExecutor>,
    h2: Builder<TokioExecutor>,
    either: Builder<TokioExecutor>,
}

#[derive(Debug, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// The protocol a connection's first bytes name, when they are enough to tell: HTTP/2's
/// preface starts `PRI `, a method no HTTP/1 request has.
fn protocol(first: &[u8]) -> Option<Protocol> {
    match first {
        [b'P', b'R', b'I', b' ', ..] => Some(Protocol::Http2),
        _ if first.len() < 4 && b"PRI ".starts_with(first) => None,
        _ => Some(Protocol::Http1),
    }
}

/// Serves `app` until `shutdown` resolves, then until every open connection is done.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    // hyper's own header timeout also runs while a keep-alive connection waits for its
    // next request, cutting it long before the idle timeout: `watch_requests` times the
    // headers from their first byte instead.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(HTTP2_PING_INTERVAL))
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
    // When the first bytes name the protocol (see `protocol`), it is not read again: hyper's
    // own detection reads the first 24 bytes by themselves and hands them back as a prefix,
    // so the connection's first read returned 24 bytes and hyper doubled its read buffer
    // to 16 KiB for the rest of the request: 8 KiB more per open connection.
    let builders = Arc::new(Builders {
        h1: builder.clone().http1_only(),
        h2: builder.clone().http2_only(),
        either: builder,
    });
    let slots = Arc::new(Semaphore::new(connection_cap(limits.max_connections)));
    let per_address = Arc::new(PerAddress::new(limits.max_connections_per_address));
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    let refuser = Refuser::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let ip = peer.ip().to_canonical();
        // One address cannot take every slot: past its own cap only its new connections
        // are closed, and other clients (a health probe) still get in.
        let Some(address_slot) = per_address.try_open(ip) else {
            refuser.refuse(stream, true, &connections);
            if let Some(m) = metrics() {
                m.rejected
                    .with_label_values(&["max_connections_per_address"])
                    .inc();
            }
            tracing::debug!("refusing a connection over --max-connections-per-address");
            continue;
        };
        // Over the cap the connection is answered with a 503 and closed: a client (a
        // health probe) fails fast instead of waiting in the backlog, and the cap holds
        // below the fd limit.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            refuser.refuse(stream, false, &connections);
            if let Some(m) = metrics() {
                m.rejected.with_label_values(&["max_connections"]).inc();
            }
            tracing::debug!("refusing a connection over --max-connections");
            continue;
        };
        // SSE chunks are small: without this, Nagle can hold one back for an ACK (up to
        // 40 ms on a real network).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let from = ClientAddr(ip);
        let (in_flight, idle) = watch::channel(Requests::default());
        let in_flight = Arc::new(in_flight);
        let arrivals = Arc::new(Arrivals::new());
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut request: Request<Incoming>| {
                // The per-address limits read it (see `limits`).
                request.extensions_mut().insert(from);
                request.map(Body::new)
            },
        ));
        let service = InFlight::wrap(service, in_flight, Arc::clone(&arrivals));
        let builders = Arc::clone(&builders);
        let stopping = stopping.clone();
        connections.spawn(async move {
            let _slot = slot;
            let _address_slot = address_slot;
            let _open = Open::new();
            // hyper's header timeout starts after the protocol is detected: a client that
            // connects and sends nothing is cut here instead.
            let mut first = [0u8; 4];
            let Ok(peeked) =
                tokio::time::timeout(limits.header_timeout, stream.peek(&mut first)).await
            else {
                tracing::debug!("closing a connection that sent nothing");
                return;
            };
            // An HTTP/2 client may open its connection ahead of its first request (pool
            // warming): its preface is no request headers, so only the idle timeout applies.
            let builder = match protocol(&first[..peeked.unwrap_or(0)]) {
                Some(Protocol::Http2) => {
                    arrivals.http2.store(true, Ordering::Relaxed);
                    &builders.h2
                }
                Some(Protocol::Http1) => &builders.h1,
                None => &builders.either,
            };
            let stream = Watched {
                inner: stream,
                arrivals: Arc::clone(&arrivals),
            };
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            let mut connection = std::pin::pin!(connection);
            let why = tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                why = watch_requests(idle, &arrivals, limits) => why,
                () = stopping.cancelled() => "shutting down",
            };
            if why == HEADER_TIMEOUT {
                // As hyper did: a client that is still sending its headers gets no answer.
                tracing::debug!("closing a connection: {why}");
                return;
            }
            tracing::debug!("closing a connection: {why}");
            connection.as_mut().graceful_shutdown();
            // Idle connections close at once; on shutdown, running responses finish first
            // (the server's grace period bounds that).
            let bound = if why == "idle" {
                CLOSE_GRACE
            } else {
                Duration::MAX
            };
            let _ = tokio::time::timeout(bound, connection).await;
        });
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
}

const HEADER_TIMEOUT: &str = "request headers not received in time";

/// `--max-connections`, within the client connections' share of the open-file limit where
/// `serve` installed a descriptor budget (it warned at start-up if that clamps it): every
/// connection accepted then has its descriptor, and sessions keep theirs.
fn connection_cap(max_connections: usize) -> usize {
    crate::app::descriptors::installed().map_or(max_connections, |b| {
        b.split().connections.min(max_connections)
    })
}

/// Resolves with why the connection should close: it had no request in flight for the
/// idle timeout, or the headers of an HTTP/1 request (the first, or the next one on a
/// keep-alive connection) did not all arrive within the header timeout of their first
/// byte. A keep-alive connection waiting for its next request is idle, not late.
async fn watch_requests(
    mut in_flight: watch::Receiver<Requests>,
    arrivals: &Arrivals,
    limits: ConnectionLimits,
) -> &'static str {
    let mut seen = arrivals.sender.subscribe();
    let mut idle_since = Instant::now();
    // The first request's bytes are already here (the caller peeked).
    let mut head_since = Some(idle_since);
    let mut started = 0;
    loop {
        let now = *in_flight.borrow_and_update();
        if now.started != started {
            // A request came (and may be done already): its headers are in.
            started = now.started;
            head_since = None;
            idle_since = Instant::now();
        }
        if now.in_flight > 0 {
            if in_flight.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            idle_since = Instant::now();
            continue;
        }
        let idle_end = idle_since + limits.idle_timeout;
        if let Some(since) = head_since.filter(|_| !arrivals.http2.load(Ordering::Relaxed)) {
            let head_end = since + limits.header_timeout;
            match tokio::time::timeout_at(head_end.min(idle_end), in_flight.changed()).await {
                Err(_) if head_end <= idle_end => return HEADER_TIMEOUT,
                Err(_) => return "idle",
                Ok(Ok(())) => continue,
                Ok(Err(_)) => std::future::pending::<()>().await,
            }
        }
        // Idle: the next request's first byte starts its header timeout.
        seen.mark_unchanged();
        arrivals.armed.store(true, Ordering::Relaxed);
        tokio::select! {
            () = tokio::time::sleep_until(idle_end) => return "idle",
            changed = in_flight.changed() => {
                if changed.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            // HTTP/2 frames between requests (PINGs) leave the connection idle.
            Ok(()) = seen.changed(), if !arrivals.http2.load(Ordering::Relaxed) => {
                idle_since = Instant::now();
                head_since = Some(idle_since);
            }
        }
        arrivals.armed.store(false, Ordering::Relaxed);
    }
}

/// A connection's requests: in flight now, and started in all (a request can start and
/// end between two looks at the count).
#[derive(Debug, Clone, Copy, Default)]
struct Requests {
    in_flight: usize,
    started: u64,
}

/// Tells the connection's watcher when bytes arrive while it waits for a request.
struct Arrivals {
    /// Set while the connection is idle; the first read then clears it and signals.
    armed: AtomicBool,
    sender: watch::Sender<()>,
    /// The connection speaks HTTP/2: frames between requests (PINGs, SETTINGS) are no
    /// request headers, so only the idle timeout applies.
    http2: AtomicBool,
}

impl Arrivals {
    fn new() -> Self {
        Self {
            armed: AtomicBool::new(false),
            sender: watch::Sender::new(()),
            http2: AtomicBool::new(false),
        }
    }
}

/// The TCP stream, telling [`Arrivals`] of bytes read while the connection is idle.
struct Watched {
    inner: TcpStream,
    arrivals: Arc<Arrivals>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && self.arrivals.armed.swap(false, Ordering::Relaxed)
        {
            self.arrivals.sender.send_replace(());
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What counts as one client address for `--max-connections-per-address`: an IPv4
/// address, or an IPv6 address's /64 (one host is routinely given a whole /64, so
/// counting /128s would let it open the cap once per address it picks).
fn client_network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(bits))
        }
    }
}

/// Open connections per client address, for `--max-connections-per-address`.
struct PerAddress {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerAddress {
    fn new(max: usize) -> Self {
        Self {
            max,
            open: Mutex::default(),
        }
    }

    /// A place for one more connection from `ip`, or `None` when it has its maximum.
    fn try_open(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        let ip = client_network(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            of: Arc::clone(self),
            ip,
        })
    }
}

/// One connection's place among its address's; the entry leaves with its last one, so the
/// map holds only addresses with open connections.
struct AddressSlot {
    of: Arc<PerAddress>,
    ip: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.of.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Counts a connection's requests from their arrival until their response body is done
/// (a streamed answer is in flight until its last byte), for the idle timeout.
#[derive(Clone)]
struct InFlight<S> {
    inner: S,
    count: Arc<watch::Sender<Requests>>,
    arrivals: Arc<Arrivals>,
}

/// Held by a request and then its response body; lowers the count when dropped.
struct Busy(Arc<watch::Sender<Requests>>);

impl Busy {
    fn new(count: &Arc<watch::Sender<Requests>>) -> Self {
        count.send_modify(|r| {
            r.in_flight += 1;
            r.started += 1;
        });
        Self(Arc::clone(count))
    }
}

impl Busy {
    fn pass<T>(&self, frame: T) -> T {
        frame
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0
            .send_modify(|r| r.in_flight = r.in_flight.saturating_sub(1));
    }
}

impl<S> InFlight<S> {
    fn wrap(inner: S, count: Arc<watch::Sender<Requests>>, arrivals: Arc<Arrivals>) -> Self {
        Self {
            inner,
            count,
            arrivals,
        }
    }
}

impl<S> hyper::service::Service<Request<Incoming>> for InFlight<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = axum::response::Response>,
    S::Future: Send + 'static,
{
    type Response = axum::response::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<axum::response::Response, S::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        if request.version() == hyper::Version::HTTP_2 {
            self.arrivals.http2.store(true, Ordering::Relaxed);
        }
        let busy = Busy::new(&self.count);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                // The body owns `busy`: the count drops when the body is done.
                Body::new(body.map_frame(move |frame| busy.pass(frame)))
            }))
        })
    }
}

/// The open-connections gauge, decremented however the connection ends.
struct Open;

impl Open {
    fn new() -> Self {
        if let Some(m) = metrics() {
            m.open_connections.inc();
        }
        Self
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(m) = metrics() {
            m.open_connections.dec();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_name_the_protocol_when_they_can() {
        assert_eq!(protocol(b"PRI "), Some(Protocol::Http2));
        assert_eq!(protocol(b"POST"), Some(Protocol::Http1));
        assert_eq!(protocol(b"GET "), Some(Protocol::Http1));
        assert_eq!(protocol(b"G"), Some(Protocol::Http1));
        assert_eq!(protocol(b"PR"), None);
        assert_eq!(protocol(b""), None);
    }

    #[test]
    fn an_ipv6_slash_64_is_one_address_and_ipv4_addresses_are_their_own() {
        let caps = Arc::new(PerAddress::new(2));
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        let first = caps.try_open(v6("2001:db8:1:2::1")).unwrap();
        let second = caps.try_open(v6("2001:db8:1:2:ffff::9")).unwrap();
        assert!(caps.try_open(v6("2001:db8:1:2::abcd")).is_none());
        // Another /64, and IPv4 addresses, each have their own cap.
        let _other = caps.try_open(v6("2001:db8:1:3::1")).unwrap();
        let _a = caps.try_open(v4("10.0.0.1")).unwrap();
        let _b = caps.try_open(v4("10.0.0.2")).unwrap();
        drop(first);
        let again = caps.try_open(v6("2001:db8:1:2::abcd"));
        assert!(again.is_some());
        drop((second, again));
        assert!(
            !caps
                .open
                .lock()
                .unwrap()
                .contains_key(&client_network(v6("2001:db8:1:2::1")))
        );
    }
}
