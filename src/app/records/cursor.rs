//! One reader's place in a session record: the stored events in order, page by page, then
//! (while the session runs) the ones that follow as they are stored. Pages share the
//! record's events, so a thousand readers of a large record cost a thousand cursors, not a
//! thousand copies. A store that keeps records elsewhere can feed the same pages.

use std::sync::Arc;

use massgen_core::coordination::SessionEvent;
use tokio::sync::watch;

use super::SessionRecord;

pub struct Cursor {
    record: Arc<SessionRecord>,
    next: usize,
    changes: watch::Receiver<()>,
}

impl Cursor {
    pub fn new(record: Arc<SessionRecord>) -> Self {
        let changes = record.changes();
        Self {
            record,
            next: 0,
            changes,
        }
    }

    /// The next at most `max` events, waiting for them while the session runs; empty once
    /// the session ended and every stored event was read. Cancel-safe: the place only
    /// moves when events are returned.
    pub async fn next_page(&mut self, max: usize) -> Vec<Arc<SessionEvent>> {
        loop {
            // Marked seen before reading, so an event stored after the read wakes us.
            self.changes.borrow_and_update();
            let page = self.record.read(self.next, max.max(1));
            if !page.events.is_empty() {
                self.next += page.events.len();
                return page.events;
            }
            if page.finished || self.changes.changed().await.is_err() {
                return Vec::new();
            }
        }
    }

    pub fn record(&self) -> &Arc<SessionRecord> {
        &self.record
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use massgen_core::coordination::EventKind;

    use super::*;
    use crate::app::Caller;
    use crate::app::records::RecordStore;
    use crate::app::records::store::tests::{event, failed};

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
