//! How long and how many idle upstream connections every HTTP client of the crate keeps:
//! reqwest's and hyper's (built in [`crate::client`]) and massgen's own HTTP/1.1 client's
//! pool (`h1::pool`) alike.

use std::time::Duration;

/// How long an idle pooled connection is kept for reuse.
pub(crate) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per upstream host. Unbounded, a burst of 10,000 sessions × 3
/// agents left 30,000 idle HTTP/1.1 connections (a descriptor and their buffers each)
/// for [`POOL_IDLE_TIMEOUT`]. 256 still lets a steady load of ~85 three-agent sessions per
/// host reuse every connection; past it a finished call's connection is closed at once and
/// the next burst pays a handshake instead of holding descriptors. An HTTP/2 host needs one.
pub const MAX_IDLE_PER_HOST: usize = 256;
