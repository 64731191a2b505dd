//! PostgreSQL: following a session that runs on another replica. One LISTEN connection per
//! process (`LISTEN massgen_records`); every replica's writer sends `pg_notify` ([`notify`])
//! with the session id in the transaction that commits its events (and upkeep when it
//! marks a session interrupted), and this process wakes the readers of that session here. While
//! the listening connection is down, readers look every second instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{Any, Transaction};
use tokio::sync::watch;

use crate::app::store::lock;

/// The PostgreSQL channel: one notification per changed session, its id as payload.
pub const CHANNEL: &str = "massgen_records";

/// Pause before connecting again after the listening connection failed.
const RECONNECT: Duration = Duration::from_secs(1);
/// Entries for sessions nobody follows any more are swept once the map is this large.
const SWEEP_AT: usize = 64;

/// The sessions followed in this process, each with the signal its readers wait on.
#[derive(Default)]
pub struct Wakeups {
    followed: Mutex<HashMap<Arc<str>, Weak<watch::Sender<()>>>>,
    /// The listening connection is up (readers wait for wake-ups, not the clock).
    up: AtomicBool,
}

/// A reader's hold on one session's wake-ups: the map entry lives as long as a reader
/// holds one.
pub struct Subscription {
    _sender: Arc<watch::Sender<()>>,
    pub changes: watch::Receiver<()>,
}

impl Wakeups {
    pub fn subscribe(&self, id: &Arc<str>) -> Subscription {
        let mut followed = lock(&self.followed);
        if followed.len() >= SWEEP_AT {
            followed.retain(|_, sender| sender.strong_count() > 0);
        }
        let sender = match followed.get(id).and_then(Weak::upgrade) {
            Some(sender) => sender,
            None => {
                let sender = Arc::new(watch::Sender::new(()));
                followed.insert(Arc::clone(id), Arc::downgrade(&sender));
                sender
            }
        };
        Subscription {
            changes: sender.subscribe(),
            _sender: sender,
        }
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    fn wake(&self, id: &str) {
        let mut followed = lock(&self.followed);
        match followed.get(id).map(Weak::upgrade) {
            Some(Some(sender)) => {
                sender.send_replace(());
            }
            Some(None) => {
                followed.remove(id);
            }
            None => {}
        }
    }

    /// Wakes every reader (after a reconnection: notifications may have been missed).
    fn wake_all(&self) {
        for sender in lock(&self.followed).values().filter_map(Weak::upgrade) {
            sender.send_replace(());
        }
    }

    /// Listens on `url` until the process ends, connecting again after a failure.
    pub async fn run(self: Arc<Self>, url: String) {
        let mut warned = false;
        loop {
            match self.listen(&url).await {
                Ok(()) => {}
                Err(e) => {
                    if !warned {
                        tracing::warn!(
                            "the records database's notifications stopped ({}): readers of sessions on other replicas look every second until they are back",
                            super::safe_error(&e)
                        );
                        warned = true;
                    }
                }
            }
            self.up.store(false, Ordering::Relaxed);
            tokio::time::sleep(RECONNECT).await;
        }
    }

    async fn listen(&self, url: &str) -> Result<(), sqlx::Error> {
        let mut listener = PgListener::connect(url).await?;
        listener.listen(CHANNEL).await?;
        self.up.store(true, Ordering::Relaxed);
        self.wake_all();
        loop {
            // `try_recv` reports a lost connection as `None` instead of reconnecting
            // silently, so the readers know to poll until we are back.
            match listener.try_recv().await? {
                Some(notification) => {
                    if let Some(m) = crate::telemetry::metrics() {
                        m.records_notifications.inc();
                    }
                    self.wake(notification.payload());
                }
                None => return Ok(()),
            }
        }
    }
}

/// PostgreSQL: tells every replica's listener which sessions changed; delivered at
/// commit, so a woken reader finds the rows.
pub async fn notify<'a>(
    tx: &mut Transaction<'static, Any>,
    ids: impl Iterator<Item = &'a str>,
) -> Result<(), sqlx::Error> {
    for id in ids {
        // Counted, not selected: the `Any` driver has no type for pg_notify's `void`.
        sqlx::query("SELECT COUNT(*) FROM (SELECT pg_notify($1, $2)) AS sent")
            .bind(CHANNEL)
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
