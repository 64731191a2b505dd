//! A reader that stops reading never holds what feeds it: the chat streams (issue 11, item
//! one) and the session event readers (item three) both move items through a small channel
//! and give up on a reader that leaves it full for the stall time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::SendTimeoutError;

/// Moves `from` into a channel of `capacity` on a task of its own. The task ends, dropping
/// `guard` (a session's cancel guard, a reader's place), when `from` ends, when the receiver
/// goes away (at once, not at the next item), or when the receiver leaves the channel full
/// for `stall`: then `on_stall` is told the item that could not be sent and the returned
/// flag is set, so the reader's side can end with an error rather than look complete.
pub fn forward<T, G>(
    from: impl Stream<Item = T> + Send + 'static,
    capacity: usize,
    stall: Duration,
    guard: G,
    on_stall: impl FnOnce(&T) + Send + 'static,
) -> (mpsc::Receiver<T>, Arc<AtomicBool>)
where
    T: Send + 'static,
    G: Send + 'static,
{
    let (to, received) = mpsc::channel(capacity);
    let stalled = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stalled);
    tokio::spawn(async move {
        let _guard = guard;
        let mut from = std::pin::pin!(from);
        loop {
            let item = tokio::select! {
                item = from.next() => match item {
                    Some(item) => item,
                    None => return,
                },
                () = to.closed() => return,
            };
            match to.send_timeout(item, stall).await {
                Ok(()) => {}
                Err(SendTimeoutError::Closed(_)) => return,
                Err(SendTimeoutError::Timeout(item)) => {
                    flag.store(true, Ordering::Relaxed);
                    on_stall(&item);
                    return;
                }
            }
        }
    });
    (received, stalled)
}

/// How much [`read_ahead`] holds, and how long it waits for its reader.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The reader's channel.
    pub capacity: usize,
    /// Items read from the source ahead of the reader.
    pub ahead: usize,
    /// A reader that leaves its channel full this long is dropped.
    pub stall: Duration,
}

/// [`forward`] for a session's events, which must not wait on the client: items are read
/// from `from` as they come, up to `read_ahead` of them held for a reader that is behind,
/// so the session runs to its end while a slow client still reads. `watch` sees every item
/// as it is read, with `held` (the session's slots and cost reservation); `held` is
/// dropped as soon as `watch` says an item was the last one (or `from` ends), before that
/// item is passed on, so a reader that sees the end may count on `held` being free.
/// `cancel` is dropped when the reader is gone or stalled, after which the rest of `from`
/// is still watched (the session ends, cancelled) before `held` goes.
pub fn read_ahead<T, C, H>(
    mut from: mpsc::Receiver<T>,
    bounds: Bounds,
    cancel: C,
    held: H,
    mut watch: impl FnMut(&mut H, &T) -> bool + Send + 'static,
    on_stall: impl FnOnce(&T) + Send + 'static,
) -> (mpsc::Receiver<T>, Arc<AtomicBool>)
where
    T: Send + 'static,
    C: Send + 'static,
    H: Send + 'static,
{
    let Bounds {
        capacity,
        ahead,
        stall,
    } = bounds;
    let (to, received) = mpsc::channel(capacity);
    let stalled = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stalled);
    tokio::spawn(async move {
        let mut held = Some(held);
        let mut seen = move |held: &mut Option<H>, item: &T| {
            if let Some(h) = held.as_mut()
                && watch(h, item)
            {
                *held = None;
            }
        };
        let mut queue = std::collections::VecDeque::new();
        let mut ended = false;
        // When the oldest waiting item started to wait for room.
        let mut waiting_since = tokio::time::Instant::now();
        let mut on_stall = Some(on_stall);
        loop {
            if ended && queue.is_empty() {
                return;
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
                    Some(item) => {
                        seen(&mut held, &item);
                        if queue.is_empty() {
                            waiting_since = tokio::time::Instant::now();
                        }
                        queue.push_back(item);
                    }
                    None => {
                        ended = true;
                        held = None;
                    }
                },
            }
        }
        // The reader is gone or stalled: stop the session, and keep its slots until it
        // ended.
        drop(cancel);
        drop(queue);
        drop(to);
        while held.is_some()
            && !ended
            && let Some(item) = from.recv().await
        {
            seen(&mut held, &item);
        }
        drop(held);
    });
    (received, stalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dropped: tells `held` so.
    struct Held(Arc<AtomicBool>);
    impl Drop for Held {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn what_is_held_goes_with_the_last_item_not_when_the_reader_caught_up() {
        let (tx, from) = mpsc::channel(4);
        let released = Arc::new(AtomicBool::new(false));
        let held = Held(Arc::clone(&released));
        let stall = Duration::from_secs(60);
        let bounds = Bounds {
            capacity: 2,
            ahead: 1_000,
            stall,
        };
        let last = |_: &mut Held, i: &u32| *i == 99;
        let (mut reader, stalled) = read_ahead(from, bounds, (), held, last, |_| {});
        // The source never waits on the reader (channel of 4, reader of 2, nobody reads).
        for i in 0..100u32 {
            tokio::time::timeout(Duration::from_secs(5), tx.send(i))
                .await
                .unwrap()
                .unwrap();
        }
        // Released at the last item, though the source is still open.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !released.load(Ordering::Relaxed) {
            assert!(tokio::time::Instant::now() < deadline, "held past the end");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(tx);
        // The reader still gets everything, in order.
        for i in 0..100u32 {
            assert_eq!(reader.recv().await, Some(i));
        }
        assert_eq!(reader.recv().await, None);
        assert!(!stalled.load(Ordering::Relaxed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_reader_is_dropped_and_what_is_held_waits_for_the_source() {
        let (tx, from) = mpsc::channel(4);
        let (released, cancelled) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (held, cancel) = (Held(Arc::clone(&released)), Held(Arc::clone(&cancelled)));
        let stall = Duration::from_secs(30);
        let bounds = Bounds {
            capacity: 1,
            ahead: 1_000,
            stall,
        };
        let never = |_: &mut Held, _: &u32| false;
        let (reader, stalled) = read_ahead(from, bounds, cancel, held, never, |_| {});
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        tokio::time::sleep(stall + Duration::from_secs(1)).await;
        assert!(stalled.load(Ordering::Relaxed));
        assert!(
            cancelled.load(Ordering::Relaxed),
            "the session is cancelled"
        );
        assert!(
            !released.load(Ordering::Relaxed),
            "but holds its place until it ended"
        );
        drop(tx);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(released.load(Ordering::Relaxed));
        drop(reader);
    }
}
