//! One reader's place in a session record: the stored events in order, page by page, then
//! (while the session runs) the ones that follow as they are stored. Pages share the
//! record's events, so a thousand readers of a large record cost a thousand cursors, not a
//! thousand copies. A record not live in this process is read from the database by seq,
//! page by page, the same way.

use std::sync::Arc;
use std::time::Duration;

use massgen_core::coordination::SessionEvent;
use tokio::sync::watch;

use super::SessionRecord;
use crate::app::store::db::listen::Subscription;
use crate::app::store::db::{RecordDb, safe_error};

/// How often a reader of a session running elsewhere looks for new events when nothing
/// can wake it: PostgreSQL's notifications are down, or SQLite (where such a session
/// belongs to a stopped process and is about to be `interrupted`).
const POLL: Duration = Duration::from_secs(1);
/// With notifications up, a reader still looks this often (one lost in a reconnection
/// must not stall it).
const SAFETY: Duration = Duration::from_secs(10);
/// Database reads that may fail in a row before the reader's stream ends.
const MAX_READ_FAILURES: u32 = 10;
/// Events one database read takes at most: read back, a call's token deltas are merged
/// rows of up to 4 KiB of text each (`MERGED_TEXT_BYTES`), and a reader holds its page.
const STORED_PAGE: usize = 16;

pub struct Cursor {
    from: From,
}

enum From {
    Live {
        record: Arc<SessionRecord>,
        next: usize,
        changes: watch::Receiver<()>,
    },
    Stored {
        db: Arc<RecordDb>,
        id: Arc<str>,
        /// The seq of the next event to read.
        next: u64,
        failures: u32,
        /// PostgreSQL: woken when a replica commits events of this session.
        wake: Option<Subscription>,
    },
}

impl Cursor {
    pub fn new(record: Arc<SessionRecord>) -> Self {
        let changes = record.changes();
        Self {
            from: From::Live {
                record,
                next: 0,
                changes,
            },
        }
    }

    /// A cursor over session `id` in `db` (a record this process does not hold).
    pub fn stored(db: Arc<RecordDb>, id: Arc<str>) -> Self {
        let wake = db.wakeups().map(|w| w.subscribe(&id));
        Self {
            from: From::Stored {
                db,
                id,
                next: 0,
                failures: 0,
                wake,
            },
        }
    }

    /// The next at most `max` events, waiting for them while the session runs; empty once
    /// the session ended and every stored event was read. Cancel-safe: the place only
    /// moves when events are returned.
    pub async fn next_page(&mut self, max: usize) -> Vec<Arc<SessionEvent>> {
        let max = max.max(1);
        match &mut self.from {
            From::Live {
                record,
                next,
                changes,
            } => loop {
                // Marked seen before reading, so an event stored after the read wakes us.
                changes.borrow_and_update();
                let page = record.read(*next, max);
                if !page.events.is_empty() {
                    *next += page.events.len();
                    return page.events;
                }
                if page.finished || changes.changed().await.is_err() {
                    return Vec::new();
                }
            },
            From::Stored {
                db,
                id,
                next,
                failures,
                wake,
            } => loop {
                // Marked seen before reading, so a commit after the read wakes us.
                if let Some(w) = wake.as_mut() {
                    w.changes.borrow_and_update();
                }
                match stored_page(db, id, *next, max.min(STORED_PAGE)).await {
                    Ok(Page::Events(events)) => {
                        *failures = 0;
                        if let Some(last) = events.last() {
                            *next = last.seq + 1;
                        }
                        return events.into_iter().map(Arc::new).collect();
                    }
                    Ok(Page::Ended) => return Vec::new(),
                    Ok(Page::Running) => *failures = 0,
                    Err(e) => {
                        *failures += 1;
                        if *failures >= MAX_READ_FAILURES {
                            tracing::warn!(
                                session_id = %id,
                                "stopped following a session: its record cannot be read ({})",
                                safe_error(&e)
                            );
                            return Vec::new();
                        }
                    }
                }
                match wake.as_mut() {
                    Some(w) if db.wakeups().is_some_and(|ws| ws.is_up()) => {
                        // A closed channel cannot happen while we hold the sender.
                        let _ = tokio::time::timeout(SAFETY, w.changes.changed()).await;
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            },
        }
    }
}

enum Page {
    Events(Vec<SessionEvent>),
    /// Nothing new and the session is still running.
    Running,
    /// Nothing new and nothing will come.
    Ended,
}

async fn stored_page(db: &RecordDb, id: &str, next: u64, max: usize) -> Result<Page, sqlx::Error> {
    let events = db.events(id, next, max).await?;
    if !events.is_empty() {
        return Ok(Page::Events(events));
    }
    if db.status(id).await? == Some("running") {
        return Ok(Page::Running);
    }
    // The final status was committed with the last events: read once more, in case they
    // arrived between the two reads above.
    let events = db.events(id, next, max).await?;
    Ok(if events.is_empty() {
        Page::Ended
    } else {
        Page::Events(events)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use massgen_core::coordination::EventKind;

    use super::*;
    use crate::app::Caller;
    use crate::app::store::sessions::RecordStore;
    use crate::app::store::sessions::{event, failed};

    #[tokio::test]
    async fn reads_the_past_then_waits_for_the_live_events_then_ends() {
        let store = RecordStore::new(10, Duration::from_secs(60), None);
        let r = store.insert("s".into(), Caller::default());
        r.push(event(0, EventKind::FinalDelta { text: "a".into() }));
        let mut cursor = Cursor::new(r.clone());
        assert_eq!(cursor.next_page(10).await.len(), 1);
        let waiting = tokio::spawn(async move {
            let page = cursor.next_page(10).await;
            (page, cursor)
        });
        tokio::task::yield_now().await;
        r.push(event(1, failed()));
        let (page, mut cursor) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(page[0].seq, 1);
        assert!(cursor.next_page(10).await.is_empty(), "ended");
    }
}
