//! Sending the request, retrying before the first byte, handing the body to the decoder.
//!
//! Nothing is spawned: the returned stream owns the in-flight request (and later the
//! response body), so dropping it aborts the HTTP call.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;

use super::decode::{decode_stream, error_chain};
use super::{Inner, errors};
use crate::providers::retry::{self, AttemptFailure, RetryStep};
use crate::providers::{ChunkStream, ProviderError, ProviderErrorKind};
use crate::secret::Secret;

/// Error bodies longer than this are cut: we only quote them.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Starts the call lazily (on first poll) and streams its chunks.
pub(super) fn call(inner: Arc<Inner>, body: Value) -> ChunkStream {
    let key = inner.config.api_key.clone();
    let opened = async move {
        match open(&inner, body).await {
            Ok(stream) => stream,
            Err(error) => Box::pin(futures::stream::iter([Err(error)])),
        }
    };
    let stream = futures::stream::once(opened).flatten();
    Box::pin(stream.map(move |item| item.map_err(|error| redact(error, key.as_ref()))))
}

async fn open(inner: &Inner, body: Value) -> Result<ChunkStream, ProviderError> {
    let policy = &inner.config.policy;
    let provider = &inner.config.provider_name;
    let body = Bytes::from(serde_json::to_vec(&body).map_err(|error| {
        ProviderError::new(
            ProviderErrorKind::InvalidRequest,
            provider.clone(),
            format!("cannot serialize the request: {error}"),
        )
    })?);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (error, failure) = match attempt(inner, &body).await {
            Ok(response) => {
                return Ok(decode_stream(
                    provider.clone(),
                    response.bytes_stream(),
                    policy.idle_timeout,
                ));
            }
            Err(failed) => failed,
        };
        match retry::next_step(policy, attempts, failure, rand::random()) {
            RetryStep::Retry(delay) => {
                crate::telemetry::record_retry(provider, error.kind);
                tracing::warn!(
                    provider = %provider,
                    model = %inner.config.model,
                    status = ?error.status,
                    kind = ?error.kind,
                    attempt = attempts,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    message = %errors::truncate(&error.message),
                    "retrying upstream call"
                );
                tokio::time::sleep(delay).await;
            }
            RetryStep::GiveUp => return Err(error),
        }
    }
}

/// One attempt up to the response headers. A non-2xx response is read and classified.
async fn attempt(
    inner: &Inner,
    body: &Bytes,
) -> Result<reqwest::Response, (ProviderError, AttemptFailure)> {
    let policy = &inner.config.policy;
    let provider = inner.config.provider_name.as_str();
    let mut request = inner
        .http
        .post(&inner.url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(body.clone());
    if let Some(key) = &inner.config.api_key {
        request = request.bearer_auth(key.expose());
    }
    let sent = tokio::time::timeout(policy.first_byte_timeout, request.send()).await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            let kind = if error.is_timeout() {
                ProviderErrorKind::Timeout
            } else {
                ProviderErrorKind::Connection
            };
            let error = ProviderError::new(kind, provider, error_chain(&error));
            return Err(failed(error, None));
        }
        Err(_) => {
            let error = ProviderError::new(
                ProviderErrorKind::Timeout,
                provider,
                format!("no response headers within {:?}", policy.first_byte_timeout),
            );
            return Err(failed(error, None));
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry::parse_retry_after(response.headers(), SystemTime::now());
    let should_retry = retry::parse_should_retry(response.headers());
    let text = read_error_body(response, policy.idle_timeout).await;
    let error = errors::http_error(provider, status.as_u16(), &text, retry_after);
    Err(failed(error, should_retry))
}

fn failed(error: ProviderError, should_retry: Option<bool>) -> (ProviderError, AttemptFailure) {
    let failure = AttemptFailure {
        retryable: errors::retryable_before_first_byte(&error),
        server_wait: error.retry_after,
        should_retry,
    };
    (error, failure)
}

/// The (start of the) body of an error response; a broken or stalled body yields what
/// arrived, since the status already tells the story.
async fn read_error_body(response: reqwest::Response, idle_timeout: Duration) -> String {
    let mut body = std::pin::pin!(response.bytes_stream());
    let mut bytes = Vec::new();
    while bytes.len() < MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout(idle_timeout, body.next()).await {
            Ok(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Upstreams sometimes quote the key they rejected; never pass it on.
fn redact(mut error: ProviderError, key: Option<&Secret>) -> ProviderError {
    if let Some(key) = key.map(Secret::expose).filter(|key| key.len() >= 8)
        && error.message.contains(key)
    {
        error.message = error.message.replace(key, "***");
    }
    error
}
