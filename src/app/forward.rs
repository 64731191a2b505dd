//! The one task between the engine and a door: every event is seen by the session's
//! observers (record, metrics, spend, what the session holds) in turn, then moved to the
//! door through a small channel, read ahead of a slow client so the session never waits
//! on it for long. A client that goes away, or leaves the channel full for the stall time,
//! is dropped; the rest of the session is still observed, so its record gets the end.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// How much [`spawn`] holds, and how long it waits for its reader.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The reader's channel.
    pub capacity: usize,
    /// Items read from the source ahead of the reader.
    pub ahead: usize,
    /// A reader that leaves its channel full this long is dropped.
    pub stall: Duration,
}

/// What sees every item, in order, whether or not anyone still reads.
pub trait Observe<T>: Send + 'static {
    /// One item, before it is passed on (it may be changed).
    fn see(&mut self, item: &mut T);
    /// After the source ended.
    fn end(self) -> impl Future<Output = ()> + Send;
}

/// Moves `from` to the returned receiver on a task of `tasks`, `observer` seeing each item
/// first. Items are read as they come, up to `bounds.ahead` held for a reader that is
/// behind. When the reader is gone, or leaves its channel full for `bounds.stall` (then
/// `on_stall` is told the item that waits and the returned flag is set), `cancel` is
/// dropped and the rest of `from` is observed to its end.
pub fn spawn<T, C, O>(
    tasks: &TaskTracker,
    mut from: mpsc::Receiver<T>,
    bounds: Bounds,
    cancel: C,
    mut observer: O,
    on_stall: impl FnOnce(&T) + Send + 'static,
) -> (mpsc::Receiver<T>, Arc<AtomicBool>)
where
    T: Send + 'static,
    C: Send + 'static,
    O: Observe<T>,
{
    let Bounds {
        capacity,
        ahead,
        stall,
    } = bounds;
    let (to, received) = mpsc::channel(capacity);
    let stalled = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stalled);
    tasks.spawn(async move {
        let mut queue = VecDeque::new();
        let mut ended = false;
        // When the oldest waiting item started to wait for room.
        let mut waiting_since = tokio::time::Instant::now();
        let mut on_stall = Some(on_stall);
        loop {
            if ended && queue.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                () = to.closed() => break,
                room = to.reserve(), if !queue.is_empty() => match (room, queue.pop_front()) {
                    (Ok(room), Some(item)) => {
                        room.send(item);
                        waiting_since = tokio::time::Instant::now();
                    }
                    _ => break,
                },
                () = tokio::time::sleep_until(waiting_since + stall), if !queue.is_empty() => {
                    flag.store(true, Ordering::Relaxed);
                    if let (Some(tell), Some(item)) = (on_stall.take(), queue.front()) {
                        tell(item);
                    }
                    break;
                }
                item = from.recv(), if !ended && queue.len() < ahead.max(1) => match item {
                    Some(mut item) => {
                        observer.see(&mut item);
                        if queue.is_empty() {
                            waiting_since = tokio::time::Instant::now();
                        }
                        queue.push_back(item);
                    }
                    None => ended = true,
                },
            }
        }
        // The reader is gone or stalled (or all was delivered): stop the session, and
        // observe it to its end.
        drop(cancel);
        drop(queue);
        drop(to);
        while !ended && let Some(mut item) = from.recv().await {
            observer.see(&mut item);
        }
        observer.end().await;
    });
    (received, stalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Releases `held` at item 99 (as a session's slots go with its last event); counts
    /// what it saw; says when it ended.
    struct Watch {
        held: Option<Arc<()>>,
        seen: Arc<std::sync::atomic::AtomicU32>,
        ended: Arc<AtomicBool>,
    }

    impl Observe<u32> for Watch {
        fn see(&mut self, item: &mut u32) {
            self.seen.fetch_add(1, Ordering::Relaxed);
            if *item == 99 {
                self.held = None;
            }
        }
        async fn end(self) {
            self.ended.store(true, Ordering::Relaxed);
        }
    }

    fn watch() -> (
        Watch,
        Arc<()>,
        Arc<std::sync::atomic::AtomicU32>,
        Arc<AtomicBool>,
    ) {
        let held = Arc::new(());
        let seen = Arc::default();
        let ended = Arc::new(AtomicBool::new(false));
        let w = Watch {
            held: Some(Arc::clone(&held)),
            seen: Arc::clone(&seen),
            ended: Arc::clone(&ended),
        };
        (w, held, seen, ended)
    }

    #[tokio::test]
    async fn what_is_held_goes_with_the_last_item_not_when_the_reader_caught_up() {
        let (tx, from) = mpsc::channel(4);
        let (observer, held, seen, ended) = watch();
        let bounds = Bounds {
            capacity: 2,
            ahead: 1_000,
            stall: Duration::from_secs(60),
        };
        let tasks = TaskTracker::new();
        let (mut reader, stalled) = spawn(&tasks, from, bounds, (), observer, |_| {});
        // The source never waits on the reader (channel of 4, reader of 2, nobody reads).
        for i in 0..100u32 {
            tokio::time::timeout(Duration::from_secs(5), tx.send(i))
                .await
                .unwrap()
                .unwrap();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&held) > 1 {
            assert!(tokio::time::Instant::now() < deadline, "held past the end");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.load(Ordering::Relaxed), 100);
        drop(tx);
        for i in 0..100u32 {
            assert_eq!(reader.recv().await, Some(i));
        }
        assert_eq!(reader.recv().await, None);
        assert!(!stalled.load(Ordering::Relaxed));
        tasks.close();
        tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .unwrap();
        assert!(ended.load(Ordering::Relaxed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_reader_is_dropped_and_the_rest_is_still_observed() {
        let (tx, from) = mpsc::channel(4);
        let (observer, _held, seen, ended) = watch();
        let cancel = Arc::new(());
        let stall = Duration::from_secs(30);
        let bounds = Bounds {
            capacity: 1,
            ahead: 1_000,
            stall,
        };
        let tasks = TaskTracker::new();
        let (reader, stalled) = spawn(&tasks, from, bounds, Arc::clone(&cancel), observer, |_| {});
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        tokio::time::sleep(stall + Duration::from_secs(1)).await;
        assert!(stalled.load(Ordering::Relaxed));
        assert_eq!(Arc::strong_count(&cancel), 1, "the session is cancelled");
        assert!(
            !ended.load(Ordering::Relaxed),
            "but observed until it ended"
        );
        tx.send(3).await.unwrap();
        drop(tx);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(seen.load(Ordering::Relaxed), 3);
        assert!(ended.load(Ordering::Relaxed));
        drop(reader);
    }
}
