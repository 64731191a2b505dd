//! The one HTTP client of the process: a single connection pool for every upstream.

use std::sync::OnceLock;
use std::time::Duration;

use crate::retry::CallPolicy;
use crate::{ProviderError, ProviderErrorKind};

/// How long an idle pooled connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The process-wide HTTP client (one connection pool for every upstream).
///
/// Its connect timeout is [`CallPolicy::default`]'s: reqwest sets it per client, not per
/// request. A per-call policy still bounds connecting through `first_byte_timeout`.
pub fn http_client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(CallPolicy::default().connect_timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_keepalive(Duration::from_secs(30))
        .user_agent(concat!("massgen/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| {
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
    Ok(CLIENT.get_or_init(|| client).clone())
}
