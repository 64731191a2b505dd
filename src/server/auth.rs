//! API keys, sent as `Authorization: Bearer <key>` or `x-api-key: <key>`. Keys are kept only as SHA-256 hashes and a presented key is hashed and
//! compared with every stored hash in constant time, so neither timing nor memory dumps
//! give a key away. Nothing here logs a key.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use massgen_core::Secret;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use std::sync::Arc;

use super::Edge;
use super::error::ApiError;
pub use crate::app::{Caller, KeyId, Owner};
use crate::telemetry::metrics;

#[derive(Clone, Default)]
pub struct ApiKeys {
    hashes: Vec<[u8; 32]>,
    /// Each key's owner id, computed once here so a request only copies it.
    owners: Vec<Owner>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.hashes.len())
    }
}

impl ApiKeys {
    pub fn new(keys: &[Secret]) -> Self {
        Self {
            hashes: keys.iter().map(|k| hash(k.expose())).collect(),
            owners: keys.iter().map(|k| Owner::of_key(k.expose())).collect(),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.hashes.is_empty()
    }

    /// The key `presented` matches, checked against every stored hash without early exit.
    pub fn verify(&self, presented: &str) -> Option<KeyId> {
        let wanted = hash(presented);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, stored) in self.hashes.iter().enumerate() {
            let equal = stored.ct_eq(&wanted);
            index = u32::conditional_select(&index, &u32::try_from(i).unwrap_or(u32::MAX), equal);
            found |= equal;
        }
        if !bool::from(found) {
            return None;
        }
        let owner = *self.owners.get(usize::try_from(index).ok()?)?;
        Some(KeyId::new(index, owner))
    }
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Anthropic's key header, accepted on every route like a bearer token.
pub const X_API_KEY: &str = "x-api-key";

/// `Authorization: Bearer <key>` (scheme case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The key a request presents: a bearer token, else `x-api-key` (Claude Code and the
/// Anthropic SDKs; the Python SDK 2.x sends a bearer token).
fn presented(headers: &HeaderMap) -> Option<&str> {
    bearer(headers).or_else(|| {
        headers
            .get(X_API_KEY)?
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|k| !k.is_empty())
    })
}

/// Paths that never need a key: liveness, and `/metrics` unless protected. The web page
/// and its static files hold no data; the page sends the key itself on API calls. CORS
/// preflights carry no credentials: the CORS layer, in front of this one, answers them
/// (for the origins it allows); any other `OPTIONS` needs a key like any request.
fn is_open(edge: &Edge, method: &Method, path: &str) -> bool {
    path == "/health"
        || (path == "/metrics" && !edge.protect_metrics)
        || ((method == Method::GET || method == Method::HEAD) && super::ui::is_page_path(path))
}

pub async fn authenticate(
    State(edge): State<Arc<Edge>>,
    mut request: Request,
    next: Next,
) -> Response {
    let keys = &edge.keys;
    if !keys.enabled() || is_open(&edge, request.method(), request.uri().path()) {
        request.extensions_mut().insert(Caller::default());
        return next.run(request).await;
    }
    let error = match presented(request.headers()) {
        None => ApiError::Unauthorized {
            message: "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
                .to_string(),
        },
        Some(token) => match keys.verify(token) {
            Some(key) => {
                request.extensions_mut().insert(Caller { key: Some(key) });
                return next.run(request).await;
            }
            None => ApiError::Unauthorized {
                message: "Incorrect API key provided.".to_string(),
            },
        },
    };
    // Counted per client address: past the limit the answer is a 429, and no longer logged
    // (a flood of wrong keys must not flood the logs either).
    let from = super::limits::ClientAddr::of(&request);
    if let Err(limited) = edge.limits.auth_failed(from) {
        return limited.into_response();
    }
    if let Some(m) = metrics() {
        m.rejected.with_label_values(&["unauthorized"]).inc();
    }
    tracing::info!(path = %request.uri().path(), "request refused: missing or wrong API key");
    error.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_finds_the_right_key_and_only_it() {
        let keys = ApiKeys::new(&[Secret::new("k-one"), Secret::new("k-two")]);
        assert!(keys.enabled());
        let two = keys.verify("k-two").unwrap();
        assert_eq!(two, KeyId::new(1, Owner::of_key("k-two")));
        assert_eq!(
            keys.verify("k-one"),
            Some(KeyId::new(0, Owner::of_key("k-one")))
        );
        // Same key, a fresh load (a restart, another replica): same owner.
        let again = ApiKeys::new(&[Secret::new("k-zero"), Secret::new("k-two")]);
        assert_eq!(again.verify("k-two").unwrap().owner(), two.owner());
        assert_ne!(two.owner(), keys.verify("k-one").unwrap().owner());
        assert_eq!(keys.verify("k-on"), None);
        assert_eq!(keys.verify(""), None);
        assert!(!ApiKeys::new(&[]).enabled());
        assert!(!format!("{keys:?}").contains("k-one"));
    }

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(X_API_KEY, " k-x ".parse().unwrap());
        assert_eq!(presented(&h), Some("k-x"));
        h.insert(header::AUTHORIZATION, "Bearer k-b".parse().unwrap());
        assert_eq!(presented(&h), Some("k-b"));
    }
}
