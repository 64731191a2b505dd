//! The process's HTTP clients: one connection pool for every upstream, and a second one for
//! the backends that speak HTTP/2 over cleartext with prior knowledge (h2c).

use std::sync::OnceLock;
use std::time::Duration;

use crate::retry::CallPolicy;
use crate::{ProviderError, ProviderErrorKind};

/// How long an idle pooled connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per upstream host. Unbounded, a burst of 10,000 sessions × 3
/// agents left 30,000 idle HTTP/1.1 connections (a descriptor and ~25 KiB of buffers each)
/// for [`POOL_IDLE_TIMEOUT`]. 256 still lets a steady load of ~85 three-agent sessions per
/// host reuse every connection; past it a finished call's connection is closed at once and
/// the next burst pays a handshake instead of holding descriptors. An HTTP/2 host needs one.
pub const MAX_IDLE_PER_HOST: usize = 256;

/// HTTP/2 PING period and how long an unanswered PING may wait. One h2c connection carries
/// every call to its host: if it silently dies (a restarted server behind a dropped
/// network), new calls would queue on it until TCP gives up, minutes later; an unanswered
/// PING closes it and the pool opens a fresh one.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(20);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The receive window of an h2c connection, shared by every call to its host. h2 closes a
/// connection whose peer sends more small DATA frames than it has read (its budget is half
/// this window), and an SSE token is a small frame: with hyper's 5 MiB, a loaded server
/// with thousands of calls on one connection would close it on its own upstream. The
/// window is credit, not a buffer: memory follows only what arrives unread.
const H2C_CONNECTION_WINDOW: u32 = 32 * 1024 * 1024;

/// The process-wide HTTP client: HTTP/1.1 over `http://`; over `https://`, HTTP/2 where TLS
/// (ALPN) agrees on it, else HTTP/1.1.
///
/// Its connect timeout is [`CallPolicy::default`]'s: reqwest sets it per client, not per
/// request. A per-call policy still bounds connecting through `first_byte_timeout`.
pub fn http_client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    shared(&CLIENT, base)
}

/// The process-wide client for `http://` upstreams that speak HTTP/2 with prior knowledge
/// (h2c, a backend's `h2c: true`): every call to one host is a stream of one connection,
/// where [`http_client`] holds one connection per in-flight call.
///
/// Never for `https://`: there it would skip the TLS negotiation that picks HTTP/2 already.
pub fn h2c_client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    shared(&CLIENT, || {
        base()
            .http2_prior_knowledge()
            .http2_keep_alive_interval(HTTP2_PING_INTERVAL)
            .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
            .http2_initial_connection_window_size(H2C_CONNECTION_WINDOW)
    })
}

fn base() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(CallPolicy::default().connect_timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .tcp_keepalive(Duration::from_secs(30))
        .user_agent(concat!("massgen/", env!("CARGO_PKG_VERSION")))
}

fn shared(
    cell: &OnceLock<reqwest::Client>,
    builder: impl FnOnce() -> reqwest::ClientBuilder,
) -> Result<reqwest::Client, ProviderError> {
    if let Some(client) = cell.get() {
        return Ok(client.clone());
    }
    let client = builder().build().map_err(|error| {
        ProviderError::new(
            ProviderErrorKind::Connection,
            "http",
            format!(
                "cannot build the HTTP client: {}",
                crate::sse::error_chain(&error)
            ),
        )
    })?;
    // A concurrent first call may have won the race; either client is fine, keep one.
    Ok(cell.get_or_init(|| client).clone())
}
