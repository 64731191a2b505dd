//! Idle upstream connections, kept for the next call to the same host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::pooling::{MAX_IDLE_PER_HOST, POOL_IDLE_TIMEOUT};

/// How often idle connections are looked over for age and for an upstream that closed them.
const REAP_EVERY: Duration = Duration::from_secs(15);

#[derive(Default)]
pub(super) struct Pool {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Per `host:port` (hosts come from the configuration, not from requests), oldest first.
    hosts: HashMap<Arc<str>, Vec<Idle>>,
    reaper: Option<JoinHandle<()>>,
}

struct Idle {
    stream: TcpStream,
    since: Instant,
}

impl Pool {
    /// The most recently used idle connection to `address` that is still open.
    pub(super) fn checkout(&self, address: &str) -> Option<TcpStream> {
        let mut dropped = Vec::new();
        let found = {
            let mut inner = self.lock();
            let idle = inner.hosts.get_mut(address)?;
            let mut found = None;
            while let Some(conn) = idle.pop() {
                if conn.since.elapsed() < POOL_IDLE_TIMEOUT && open(&conn.stream) {
                    found = Some(conn.stream);
                    break;
                }
                dropped.push(conn);
            }
            found
        };
        // Closed outside the lock: closing deregisters the socket, a system call.
        drop(dropped);
        found
    }

    /// Keeps `stream` for the next call to `address`, unless as many are kept already.
    pub(super) fn checkin(self: &Arc<Self>, address: Arc<str>, stream: TcpStream) {
        let mut inner = self.lock();
        let idle = inner.hosts.entry(address).or_default();
        if idle.len() >= MAX_IDLE_PER_HOST {
            drop(inner);
            drop(stream);
            return;
        }
        idle.push(Idle {
            stream,
            since: Instant::now(),
        });
        // One reaper per runtime that keeps connections here (tests run several).
        if inner.reaper.as_ref().is_none_or(JoinHandle::is_finished)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            inner.reaper = Some(runtime.spawn(reap(Arc::downgrade(self))));
        }
    }

    /// Drops the connections idle too long or closed by their upstream.
    fn reap(&self) -> usize {
        let mut dropped = Vec::new();
        {
            let mut inner = self.lock();
            inner.hosts.retain(|_, idle| {
                let (keep, gone) = std::mem::take(idle).into_iter().partition(|conn| {
                    conn.since.elapsed() < POOL_IDLE_TIMEOUT && open(&conn.stream)
                });
                *idle = keep;
                dropped.extend::<Vec<Idle>>(gone);
                !idle.is_empty()
            });
        }
        dropped.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    pub(super) fn idle(&self, address: &str) -> usize {
        self.lock().hosts.get(address).map_or(0, Vec::len)
    }
}

async fn reap(pool: Weak<Pool>) {
    let mut every = tokio::time::interval(REAP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let dropped = pool.reap();
        if dropped > 0 {
            tracing::debug!(dropped, "closed idle upstream connections");
        }
    }
}

/// Whether an idle connection is still open: nothing to read and no end of stream. (An
/// idle connection has nothing to say; if the upstream said something, the connection
/// cannot be trusted with a call either.)
fn open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock)
}
