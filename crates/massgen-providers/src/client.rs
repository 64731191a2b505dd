//! The process's HTTP clients, and which one a configured upstream is called over.
//!
//! - `https://` (and `http://` when the environment names an HTTP proxy): reqwest, for TLS,
//!   ALPN (HTTP/2 where the upstream agrees) and the proxy variables.
//! - `http://` otherwise (vLLM, Ollama, SGLang, a local gateway, the simulator): massgen's
//!   own HTTP/1.1 client ([`crate::h1`]), whose connections have no task, channel or write
//!   buffer of their own. With three agents per session and every session in flight, the
//!   per-connection state of reqwest's and then hyper's client was the largest share of a
//!   session's memory.
//! - A backend's `h2c: true`: hyper's HTTP/2 client with prior knowledge, whose reset-stream
//!   limits massgen sets (see [`H2C_RESET_MEMORY`]).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::h1::{H1Client, HEAD_WITHIN, Target};
use crate::pooling::{MAX_IDLE_PER_HOST, POOL_IDLE_TIMEOUT};
use crate::response::{BodyError, Response, SendError};
use crate::retry::CallPolicy;
use crate::sse::error_chain;
use crate::upstream_http::{H2C_NEEDS_HTTP, UpstreamHttp};
use crate::{ProviderError, ProviderErrorKind};

/// TCP keepalive on upstream connections: a dead peer is noticed while a call waits.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// HTTP/2 PING period and how long an unanswered PING may wait. One h2c connection carries
/// every call to its host: if it silently dies (a restarted server behind a dropped
/// network), new calls would queue on it until TCP gives up, minutes later; an unanswered
/// PING closes it and the pool opens a fresh one.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(20);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The receive window of an h2c connection, shared by every call to its host. The window
/// is credit, not a buffer: memory follows only what arrives unread.
const H2C_CONNECTION_WINDOW: u32 = 32 * 1024 * 1024;

/// How many of its own reset streams an h2c connection remembers. The protocol cancels
/// calls (an agent restarted by a newer answer) while their tokens are still on the way;
/// a frame for a stream h2 no longer remembers is a protocol error it answers with another
/// reset, and past 1,024 of those (h2's default guard against a hostile peer) it closes
/// the connection, failing every call on it: 10,000 sessions at once lost 8,266 that way.
/// Remembered streams are ignored quietly; an entry is a few hundred bytes, kept for h2's
/// reset duration, so this bounds that memory to a few MiB. The guard itself is lifted: the
/// peer is the operator's own upstream, not a client.
const H2C_RESET_MEMORY: usize = 10_000;

type H2c = HyperClient<HttpConnector, Full<Bytes>>;

/// The process's HTTP clients ([`http_client`]). Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Clients>,
}

struct Clients {
    tls: reqwest::Client,
    /// Shared by every provider built over them: providers are built per session.
    plain: Arc<H1Client>,
    h2c: Arc<H2c>,
    /// The environment names a proxy for `http://`: those calls go through reqwest, which
    /// honours it (and `NO_PROXY`) as it always did.
    http_proxy: bool,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("http_proxy", &self.inner.http_proxy)
            .finish_non_exhaustive()
    }
}

/// The process-wide HTTP clients.
///
/// The connect timeout is [`CallPolicy::default`]'s: it is set per client, not per
/// request. A per-call policy still bounds connecting through `first_byte_timeout`.
pub fn http_client() -> Result<HttpClient, ProviderError> {
    static CLIENT: OnceLock<HttpClient> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = HttpClient::build()?;
    // A concurrent first call may have won the race; either is fine, keep one.
    Ok(CLIENT.get_or_init(|| client).clone())
}

impl HttpClient {
    fn build() -> Result<Self, ProviderError> {
        let tls = reqwest::Client::builder()
            .connect_timeout(CallPolicy::default().connect_timeout)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .tcp_keepalive(TCP_KEEPALIVE)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|error| {
                ProviderError::new(
                    ProviderErrorKind::Connection,
                    "http",
                    format!("cannot build the HTTP client: {}", error_chain(&error)),
                )
            })?;
        let plain = H1Client::new(
            CallPolicy::default().connect_timeout,
            TCP_KEEPALIVE,
            HEAD_WITHIN,
            USER_AGENT,
        );
        let h2c = hyper_builder()
            .http2_only(true)
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(HTTP2_PING_INTERVAL)
            .http2_keep_alive_timeout(HTTP2_PING_TIMEOUT)
            .http2_initial_connection_window_size(H2C_CONNECTION_WINDOW)
            .http2_max_concurrent_reset_streams(H2C_RESET_MEMORY)
            .http2_max_local_error_reset_streams(None)
            .build(connector());
        let http_proxy = names_http_proxy(|name| std::env::var_os(name));
        Ok(Self {
            inner: Arc::new(Clients {
                tls,
                plain: Arc::new(plain),
                h2c: Arc::new(h2c),
                http_proxy,
            }),
        })
    }

    /// How `url` is called with `http`: an error for h2c on a URL that is not `http://`,
    /// or a URL hyper cannot read.
    pub(crate) fn route(&self, url: &str, http: UpstreamHttp) -> Result<Route, String> {
        let plain = url
            .get(..7)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
        match http {
            UpstreamHttp::H2c if !plain => Err(H2C_NEEDS_HTTP.to_string()),
            UpstreamHttp::H2c => {
                let uri: Uri = url
                    .parse()
                    .map_err(|error| format!("the upstream URL cannot be read: {error}"))?;
                Ok(Route::H2c(Arc::clone(&self.inner.h2c), uri))
            }
            UpstreamHttp::Negotiated if plain && !self.inner.http_proxy => Ok(Route::Plain(
                Arc::clone(&self.inner.plain),
                Target::parse(url)?,
            )),
            UpstreamHttp::Negotiated => Ok(Route::Reqwest(self.inner.tls.clone())),
        }
    }
}

/// Whether the environment (`var`) names a proxy that reqwest would use for `http://`.
fn names_http_proxy(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|name| var(name).is_some_and(|value| !value.is_empty()))
}

const USER_AGENT: &str = concat!("massgen/", env!("CARGO_PKG_VERSION"));

fn hyper_builder() -> hyper_util::client::legacy::Builder {
    let mut builder = HyperClient::builder(TokioExecutor::new());
    builder
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .pool_timer(TokioTimer::new());
    builder
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CallPolicy::default().connect_timeout));
    connector.set_keepalive(Some(TCP_KEEPALIVE));
    connector.set_nodelay(true);
    connector
}

/// Which client one upstream's calls go over ([`HttpClient::route`]).
#[derive(Clone)]
pub(crate) enum Route {
    Reqwest(reqwest::Client),
    Plain(Arc<H1Client>, Target),
    H2c(Arc<H2c>, Uri),
}

impl Route {
    /// POSTs `body` (JSON) asking for an event stream, with `headers` besides.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, SendError> {
        match self {
            Route::Reqwest(client) => {
                let sent = client
                    .post(url)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .header(http::header::ACCEPT, "text/event-stream")
                    .headers(headers.clone())
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(response) => Ok(Response {
                        status: response.status(),
                        headers: response.headers().clone(),
                        body: Box::pin(futures::StreamExt::map(response.bytes_stream(), |item| {
                            item.map_err(BodyError::from)
                        })),
                    }),
                    Err(error) => Err(SendError {
                        timeout: error.is_timeout(),
                        // reqwest names the URL; the error reaches clients.
                        message: error_chain(&error.without_url()),
                    }),
                }
            }
            Route::Plain(client, target) => client.post(target, headers, body).await,
            Route::H2c(client, uri) => {
                let mut request = http::Request::post(uri.clone())
                    .body(Full::new(body))
                    .map_err(|error| SendError {
                        timeout: false,
                        message: format!("cannot build the request: {error}"),
                    })?;
                let fields = request.headers_mut();
                fields.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                fields.insert(
                    http::header::ACCEPT,
                    HeaderValue::from_static("text/event-stream"),
                );
                fields.insert(
                    http::header::USER_AGENT,
                    HeaderValue::from_static(USER_AGENT),
                );
                // As reqwest's `headers`: a name given here replaces the defaults above.
                fields.extend(headers.clone());
                match client.request(request).await {
                    Ok(response) => {
                        let (parts, body) = response.into_parts();
                        Ok(Response {
                            status: parts.status,
                            headers: parts.headers,
                            body: Box::pin(futures::StreamExt::map(
                                body.into_data_stream(),
                                |item| item.map_err(BodyError::from),
                            )),
                        })
                    }
                    Err(error) => Err(SendError {
                        timeout: timed_out(&error),
                        message: error_chain(&error),
                    }),
                }
            }
        }
    }
}

/// Whether connecting timed out (hyper reports it as an I/O error of kind `TimedOut`).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    fn kind(route: Result<Route, String>) -> Result<&'static str, String> {
        route.map(|route| match route {
            Route::Reqwest(_) => "reqwest",
            Route::Plain(..) => "plain",
            Route::H2c(..) => "h2c",
        })
    }

    #[tokio::test]
    async fn http_goes_over_hyper_https_over_reqwest_h2c_over_http_only() {
        let client = http_client().unwrap();
        let route = |url: &str, http| kind(client.route(url, http));
        let plain = UpstreamHttp::Negotiated;
        assert_eq!(route("https://api.example/v1/x", plain), Ok("reqwest"));
        // Without a proxy in the environment (as in CI), plain HTTP is hyper's.
        if !client.inner.http_proxy {
            assert_eq!(route("http://127.0.0.1:8000/v1/x", plain), Ok("plain"));
            assert_eq!(route("HTTP://vllm:8000/v1/x", plain), Ok("plain"));
        }
        assert_eq!(route("http://vllm/v1/x", UpstreamHttp::H2c), Ok("h2c"));
        assert_eq!(
            route("https://api.example/v1/x", UpstreamHttp::H2c),
            Err(H2C_NEEDS_HTTP.to_string())
        );
        assert!(
            route("http://bad host/v1", UpstreamHttp::H2c)
                .unwrap_err()
                .starts_with("the upstream URL cannot be read")
        );
    }

    #[test]
    fn an_http_proxy_in_the_environment_keeps_plain_http_on_reqwest() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| std::ffi::OsString::from(value))
            }
        };
        assert!(!names_http_proxy(env(&[])));
        assert!(!names_http_proxy(env(&[("HTTPS_PROXY", "http://p:3128")])));
        assert!(!names_http_proxy(env(&[("HTTP_PROXY", "")])));
        assert!(names_http_proxy(env(&[("HTTP_PROXY", "http://p:3128")])));
        assert!(names_http_proxy(env(&[("all_proxy", "socks5://p")])));
    }
}
