//! Sending a request, retrying before the first byte, handing the body to a decoder:
//! the one retry loop every wire format uses, for streamed and whole responses.
//!
//! Nothing is spawned: the returned stream owns the in-flight request (and later the
//! response body), so dropping it aborts the HTTP call. A whole response is read to its end
//! inside the loop: nothing of it goes out before then, so until then it is "before the
//! first byte", and a body that breaks off or stalls past its deadline is retried like a
//! failed request. What the complete body says (an error in it too) is the call's answer.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http::HeaderMap;
use massgen_core::Secret;
use serde_json::Value;

use super::errors::{retryable_before_first_byte, truncate};
use super::retry::{self, AttemptFailure, CallPolicy, RetryObserver, RetryStep};
use super::whole;
use super::{ChunkStream, ProviderChunk, ProviderError, ProviderErrorKind};

/// Error bodies longer than this are cut: we only quote them.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// How long an error body may take to arrive (or `idle_timeout`, when shorter); what came
/// by then is quoted. A real one is a few hundred bytes sent with its head; sent a byte
/// every 2 s, under any idle limit, a 64 KiB one held a call for the turn's whole timeout.
const ERROR_BODY_WITHIN: Duration = Duration::from_secs(10);

use super::client::Route;
use super::response::{Body, Response};

/// Where and how one configured upstream is called.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub provider: String,
    pub model: String,
    /// Where streamed responses are asked for.
    pub streamed: Place,
    /// Where whole responses are asked for (Gemini's other method, a JSON `Accept`).
    pub whole: Place,
    /// How the URLs could show in an error text (see [`Endpoint::hidden`]), worked out at
    /// the first error: parsing and formatting the URLs' forms was a third of a
    /// session's start (23,000 instructions for two URLs) and most calls never fail.
    pub hidden: OnceLock<Vec<String>>,
    /// Redacted from every error message.
    pub key: Option<Secret>,
    pub policy: CallPolicy,
    /// The wire format's reading of a non-2xx response: status, headers (for retry hints),
    /// body text.
    pub http_error: fn(&str, u16, &HeaderMap, &str) -> ProviderError,
    /// The wire format's decoder of a 2xx streamed body.
    pub decode: fn(String, Body, Duration) -> ChunkStream,
    /// The wire format's decoder of a 2xx whole body.
    pub decode_whole: fn(&str, &[u8]) -> Result<Vec<ProviderChunk>, ProviderError>,
    /// Told of each retry, when the application asked to hear of them.
    pub on_retry: Option<RetryObserver>,
}

impl Endpoint {
    /// Every form of both URLs an error text may hold, longest first: replaced before any
    /// error leaves the provider, since errors reach clients and the URL is the operator's.
    fn hidden(&self) -> &[String] {
        self.hidden.get_or_init(|| {
            let mut hidden = locations(&self.streamed.url);
            hidden.extend(locations(&self.whole.url));
            hidden.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
            hidden.dedup();
            hidden
        })
    }
}

/// One URL of an upstream, the client that calls it and the headers sent there.
#[derive(Clone)]
pub(crate) struct Place {
    pub url: String,
    pub http: Route,
    /// Authentication and version headers (values holding the key are marked sensitive),
    /// and the `Accept` of a whole response.
    pub headers: HeaderMap,
}

/// Starts the call lazily (on first poll) and streams its chunks; with `whole`, asks for
/// one whole response and hands on its chunks once it has all come.
pub(crate) fn call(endpoint: Arc<Endpoint>, body: Value, whole: bool) -> ChunkStream {
    let scrub = Arc::clone(&endpoint);
    let opened = async move {
        match open(&endpoint, body, whole).await {
            Ok(stream) => stream,
            Err(error) => Box::pin(futures::stream::iter([Err(error)])),
        }
    };
    let stream = futures::stream::once(opened).flatten();
    Box::pin(stream.map(move |item| item.map_err(|error| redact(error, &scrub))))
}

async fn open(endpoint: &Endpoint, body: Value, whole: bool) -> Result<ChunkStream, ProviderError> {
    let policy = &endpoint.policy;
    let provider = &endpoint.provider;
    let place = if whole {
        &endpoint.whole
    } else {
        &endpoint.streamed
    };
    let mut bytes = serde_json::to_vec(&body).map_err(|error| {
        ProviderError::new(
            ProviderErrorKind::InvalidRequest,
            provider.clone(),
            format!("cannot serialize the request: {error}"),
        )
    })?;
    // With a big question, the JSON value and the buffer's spare room would each hold
    // another copy of it for the whole call.
    drop(body);
    bytes.shrink_to_fit();
    let body = Bytes::from(bytes);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (error, failure) = match attempt(endpoint, place, &body, whole).await {
            Ok(response) if !whole => {
                return Ok((endpoint.decode)(
                    provider.clone(),
                    response.body,
                    policy.idle_timeout,
                ));
            }
            Ok(response) => {
                let within = policy.idle_timeout;
                match whole::read_body(provider, response.body, within).await {
                    Ok(bytes) => {
                        let chunks = match (endpoint.decode_whole)(provider, &bytes) {
                            Ok(chunks) => chunks.into_iter().map(Ok).collect(),
                            Err(error) => vec![Err(error)],
                        };
                        return Ok(Box::pin(futures::stream::iter(chunks)));
                    }
                    Err(error) => failed(error, None),
                }
            }
            Err(failed) => failed,
        };
        match retry::next_step(policy, attempts, failure, rand::random()) {
            RetryStep::Retry(delay) => {
                if let Some(on_retry) = &endpoint.on_retry {
                    on_retry(provider, error.kind);
                }
                tracing::warn!(
                    provider = %provider,
                    model = %endpoint.model,
                    url = %place.url,
                    status = ?error.status,
                    kind = ?error.kind,
                    attempt = attempts,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    error = %own_words(&error),
                    "retrying upstream call"
                );
                log_upstream_words(endpoint, &error);
                tokio::time::sleep(delay).await;
            }
            RetryStep::GiveUp => {
                tracing::warn!(
                    provider = %provider,
                    model = %endpoint.model,
                    url = %place.url,
                    status = ?error.status,
                    kind = ?error.kind,
                    attempts,
                    error = %own_words(&error),
                    "upstream call failed"
                );
                log_upstream_words(endpoint, &error);
                return Err(error);
            }
        }
    }
}

/// One attempt up to the response headers. A non-2xx response is read and classified.
async fn attempt(
    endpoint: &Endpoint,
    place: &Place,
    body: &Bytes,
    whole: bool,
) -> Result<Response, (ProviderError, AttemptFailure)> {
    let policy = &endpoint.policy;
    let head_within = if whole {
        policy.whole_timeout
    } else {
        policy.first_byte_timeout
    };
    let provider = endpoint.provider.as_str();
    let request = place.http.post(&place.url, &place.headers, body.clone());
    let sent = tokio::time::timeout(head_within, request).await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            let kind = if error.timeout {
                ProviderErrorKind::Timeout
            } else {
                ProviderErrorKind::Connection
            };
            let error = ProviderError::new(kind, provider, error.message);
            return Err(failed(error, None));
        }
        Err(_) => {
            let error = ProviderError::new(
                ProviderErrorKind::Timeout,
                provider,
                format!("no response headers within {head_within:?}"),
            );
            let mut failure = failed(error, None);
            // A whole call's head comes once its answer is generated: one that ran out
            // of time may have been generated (and billed), and another would cost as much.
            failure.1.retryable &= !whole;
            return Err(failure);
        }
    };
    let status = response.status;
    if status.is_success() {
        return Ok(response);
    }
    let should_retry = retry::parse_should_retry(&response.headers);
    let text = read_error_body(response.body, policy.idle_timeout).await;
    let error = (endpoint.http_error)(provider, status.as_u16(), &response.headers, &text);
    Err(failed(error, should_retry))
}

/// The wait the headers ask for (`retry-after-ms`, `Retry-After`), for `http_error`s.
pub(crate) fn header_retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry::parse_retry_after(headers, SystemTime::now())
}

fn failed(error: ProviderError, should_retry: Option<bool>) -> (ProviderError, AttemptFailure) {
    let failure = AttemptFailure {
        retryable: retryable_before_first_byte(&error),
        server_wait: error.retry_after,
        should_retry,
    };
    (error, failure)
}

/// The (start of the) body of an error response; a broken, stalled or slow body yields
/// what arrived, since the status already tells the story.
async fn read_error_body(mut body: Body, idle_timeout: Duration) -> String {
    let deadline = tokio::time::Instant::now() + ERROR_BODY_WITHIN.min(idle_timeout);
    let mut bytes = Vec::new();
    while bytes.len() < MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Upstreams sometimes quote the key they rejected; never pass it on. Nor where the
/// upstream is: the URL and host are the operator's, and errors reach clients.
fn redact(mut error: ProviderError, endpoint: &Endpoint) -> ProviderError {
    if let Some(key) = endpoint
        .key
        .as_ref()
        .map(Secret::expose)
        .filter(|key| key.len() >= 8)
        && error.message.contains(key)
    {
        error.message = error.message.replace(key, "***");
    }
    for place in endpoint.hidden() {
        if error.message.contains(place.as_str()) {
            error.message = error.message.replace(place.as_str(), "<upstream>");
        }
    }
    error
}

/// The forms of `url` an error text may hold, longest first: the URL (as given and as
/// parsed), without its query, its origin, `host:port` and (when it cannot be an ordinary
/// word: it has a dot or a colon) the host.
pub(crate) fn locations(url: &str) -> Vec<String> {
    let mut places = vec![url.to_string()];
    if let Ok(parsed) = reqwest::Url::parse(url) {
        places.push(parsed.to_string());
        if let Some(host) = parsed.host_str() {
            let authority = match parsed.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            };
            places.push(format!("{}://{authority}", parsed.scheme()));
            if parsed.port().is_some() {
                places.push(authority);
            }
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.contains(['.', ':']) {
                places.push(host.to_string());
            }
        }
    }
    for place in places.clone() {
        if let Some((path, _query)) = place.split_once('?') {
            places.push(path.to_string());
        }
    }
    places.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    places.dedup();
    places
}

/// What the log may say at any level: our own description of a failure with no HTTP
/// status (a refused connection, a timeout); an upstream's words can quote the question.
fn own_words(error: &ProviderError) -> &str {
    if error.status.is_none() {
        &error.message
    } else {
        "(the upstream's words are logged with --debug)"
    }
}

/// An upstream's error text, at debug level only (it may quote the question or answer).
fn log_upstream_words(endpoint: &Endpoint, error: &ProviderError) {
    if error.status.is_some() {
        tracing::debug!(
            provider = %endpoint.provider,
            message = %truncate(&error.message),
            "the upstream's error"
        );
    }
}

/// A header value holding a secret: never printed by reqwest/http debug output.
pub(crate) fn secret_header(value: &str) -> Result<http::HeaderValue, String> {
    let mut value = http::HeaderValue::from_str(value)
        .map_err(|_| "the API key contains characters not allowed in a header".to_string())?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_error_body_sent_slowly_is_quoted_as_far_as_it_came_by_its_deadline() {
        // A byte every 3 s, under any idle limit: 64 KiB of it took 55 hours.
        let body: Body = Box::pin(async_stream::stream! {
            for _ in 0..MAX_ERROR_BODY_BYTES {
                yield Ok(Bytes::from_static(b"x"));
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        });
        let start = tokio::time::Instant::now();
        let text = read_error_body(body, Duration::from_secs(120)).await;
        assert_eq!(start.elapsed(), ERROR_BODY_WITHIN);
        assert_eq!(text, "xxxx");
        // A shorter idle limit is the deadline.
        let body: Body = Box::pin(async_stream::stream! {
            yield Ok(Bytes::from_static(b"late"));
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let start = tokio::time::Instant::now();
        let text = read_error_body(body, Duration::from_secs(3)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert_eq!(text, "late");
    }

    #[test]
    fn every_form_of_the_upstream_url_is_hidden_from_error_texts() {
        let url = "http://10.0.0.7:8443/openai/deployments/d/chat/completions?api-version=1";
        let places = locations(url);
        let hide = |text: &str| {
            let mut text = text.to_string();
            for place in &places {
                text = text.replace(place.as_str(), "<upstream>");
            }
            text
        };
        assert_eq!(
            hide(&format!("error sending request for url ({url})")),
            "error sending request for url (<upstream>)"
        );
        assert_eq!(
            hide("POST http://10.0.0.7:8443/openai/x failed"),
            "POST <upstream>/openai/x failed"
        );
        assert_eq!(hide("tcp connect 10.0.0.7:8443"), "tcp connect <upstream>");
        assert_eq!(hide("no route to 10.0.0.7"), "no route to <upstream>");
        // A one-word host is an ordinary word too: only its `host:port` form is hidden.
        let places = locations("http://vllm:8000/v1/chat/completions");
        assert!(places.contains(&"vllm:8000".to_string()), "{places:?}");
        assert!(!places.contains(&"vllm".to_string()), "{places:?}");
        let places = locations("http://vllm/v1/chat/completions");
        assert!(places.contains(&"http://vllm".to_string()), "{places:?}");
        assert!(!places.contains(&"vllm".to_string()), "{places:?}");
    }
}
