//! The one task between a source and its reader: between the engine and a door, every
//! event is seen by the session's observers (record, metrics, spend, what the session
//! holds) as soon as the engine emits it, then moved to the door through a small channel;
//! between a session's record and a reader of its events (`/v1/sessions/{id}/events`),
//! chunks move the same way with nobody observing. The session runs on its own clock:
//! the forwarder never stops reading the engine, so a session's end (its record, its slot,
//! its spend) never waits on a client. What a slow client has not read yet is held for it,
//! bounded in bytes; a client that goes away, lets that bound fill, or leaves its channel
//! full for the stall time is dropped, and the rest of the session is still observed.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// How much [`spawn`] holds, and how long it waits for its reader.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The reader's channel.
    pub capacity: usize,
    /// Bytes ([`Weigh::weight`]) held for a reader that is behind; one more item than fits
    /// drops the reader (a single item is always taken, whatever its weight).
    pub ahead_bytes: usize,
    /// The source may wait for the reader: it is read only while nothing is held (a
    /// record being copied for a reader, not an engine that must run on its own clock).
    pub source_waits: bool,
    /// A reader that leaves its channel full this long is dropped.
    pub stall: Duration,
}

/// What sees every item, in order, whether or not anyone still reads.
pub trait Observe<T>: Send + 'static {
    /// One item, before it is passed on (it may be changed).
    fn see(&mut self, item: &mut T);
    /// After the source ended.
    fn end(self) -> impl Future<Output = ()> + Send;
    /// Whether the source is still read to its end once the reader is gone (a session's
    /// record must get its end; a mere copy for a reader need not).
    fn needs_the_rest(&self) -> bool {
        true
    }
}

/// Nobody observes: the items only move to the reader, and the source is left once the
/// reader is gone.
impl<T> Observe<T> for () {
    fn see(&mut self, _: &mut T) {}
    async fn end(self) {}
    fn needs_the_rest(&self) -> bool {
        false
    }
}

/// About how many bytes an item holds (its heap text included): what the read-ahead is
/// bounded by.
pub trait Weigh {
    fn weight(&self) -> usize;
}

/// Why a reader was dropped before it had everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// It left its channel full for the stall time.
    Stalled,
    /// It fell further behind than the read-ahead holds.
    TooFarBehind,
}

/// Moves `from` to the returned receiver on a task of `tasks`, `observer` seeing each item
/// as it comes and its end as soon as `from` ends, whatever the reader has taken. Up to
/// `bounds.ahead_bytes` are held for a reader that is behind. When the reader is gone, or
/// is dropped (then `on_drop` is told why and the item that waits, and the returned flag
/// is set), `cancel` is dropped and the rest of `from` is observed to its end.
pub fn spawn<T, C, O>(
    tasks: &TaskTracker,
    from: impl Stream<Item = T> + Send + 'static,
    bounds: Bounds,
    cancel: C,
    observer: O,
    on_drop: impl FnOnce(Dropped, &T) + Send + 'static,
) -> (mpsc::Receiver<T>, Arc<AtomicBool>)
where
    T: Weigh + Send + 'static,
    C: Send + 'static,
    O: Observe<T>,
{
    let Bounds {
        capacity,
        ahead_bytes,
        source_waits,
        stall,
    } = bounds;
    let (to, received) = mpsc::channel(capacity);
    let stalled = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stalled);
    tasks.spawn(async move {
        let mut from = std::pin::pin!(from);
        let mut observer = Some(observer);
        let mut queue: VecDeque<(T, usize)> = VecDeque::new();
        let mut queued = 0usize;
        let mut ended = false;
        // When the oldest waiting item started to wait for room.
        let mut waiting_since = tokio::time::Instant::now();
        let mut on_drop = Some(on_drop);
        let mut drop_reader = |why: Dropped, waiting: &T| {
            flag.store(true, Ordering::Relaxed);
            if let Some(tell) = on_drop.take() {
                tell(why, waiting);
            }
        };
        {
            // Made once: a `closed()` per item registered and removed a waiter for every token.
            let closed = to.closed();
            tokio::pin!(closed);
            loop {
                if ended && queue.is_empty() {
                    break;
                }
                tokio::select! {
                    biased;
                    () = &mut closed => break,
                    room = to.reserve(), if !queue.is_empty() => match (room, queue.pop_front()) {
                        (Ok(room), Some((item, weight))) => {
                            room.send(item);
                            queued -= weight;
                            waiting_since = tokio::time::Instant::now();
                        }
                        _ => break,
                    },
                    () = tokio::time::sleep_until(waiting_since + stall), if !queue.is_empty() => {
                        if let Some((item, _)) = queue.front() {
                            drop_reader(Dropped::Stalled, item);
                        }
                        break;
                    }
                    item = from.next(), if !ended && (!source_waits || queue.is_empty()) => match item {
                        Some(mut item) => {
                            if let Some(observer) = observer.as_mut() {
                                observer.see(&mut item);
                            }
                            let weight = item.weight();
                            if !queue.is_empty() && queued.saturating_add(weight) > ahead_bytes {
                                drop_reader(Dropped::TooFarBehind, &item);
                                break;
                            }
                            if queue.is_empty() {
                                waiting_since = tokio::time::Instant::now();
                            }
                            queued += weight;
                            queue.push_back((item, weight));
                        }
                        None => {
                            ended = true;
                            // The session is over: its end is recorded now, not when the
                            // client has read it.
                            if let Some(observer) = observer.take() {
                                observer.end().await;
                            }
                        }
                    },
                }
            }
        }
        // The reader is gone or dropped (or all was delivered): stop the session, and
        // observe it to its end.
        drop(cancel);
        drop(queue);
        drop(to);
        if let Some(mut observer) = observer.filter(Observe::needs_the_rest) {
            while let Some(mut item) = from.next().await {
                observer.see(&mut item);
            }
            observer.end().await;
        }
    });
    (received, stalled)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Weigh for u32 {
        fn weight(&self) -> usize {
            1
        }
    }

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
            ahead_bytes: 1_000,
            source_waits: false,
            stall: Duration::from_secs(60),
        };
        let tasks = TaskTracker::new();
        let (mut reader, stalled) = spawn(
            &tasks,
            tokio_stream::wrappers::ReceiverStream::new(from),
            bounds,
            (),
            observer,
            |_, _| {},
        );
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
            ahead_bytes: 1_000,
            source_waits: false,
            stall,
        };
        let tasks = TaskTracker::new();
        let (reader, stalled) = spawn(
            &tasks,
            tokio_stream::wrappers::ReceiverStream::new(from),
            bounds,
            Arc::clone(&cancel),
            observer,
            |_, _| {},
        );
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

    #[tokio::test]
    async fn the_end_is_observed_when_the_source_ends_whatever_the_reader_read() {
        let (tx, from) = mpsc::channel(4);
        let (observer, _held, seen, ended) = watch();
        let bounds = Bounds {
            capacity: 1,
            ahead_bytes: 1_000,
            source_waits: false,
            stall: Duration::from_secs(60),
        };
        let tasks = TaskTracker::new();
        let (mut reader, stalled) = spawn(
            &tasks,
            tokio_stream::wrappers::ReceiverStream::new(from),
            bounds,
            (),
            observer,
            |_, _| {},
        );
        for i in 0..10u32 {
            tx.send(i).await.unwrap();
        }
        drop(tx);
        // Nobody has read anything: the end is observed all the same.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !ended.load(Ordering::Relaxed) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "end waited on the reader"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.load(Ordering::Relaxed), 10);
        // And the reader still gets every item afterwards.
        for i in 0..10u32 {
            assert_eq!(reader.recv().await, Some(i));
        }
        assert_eq!(reader.recv().await, None);
        assert!(!stalled.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_reader_further_behind_than_the_read_ahead_is_dropped() {
        let (tx, from) = mpsc::channel(4);
        let (observer, _held, seen, ended) = watch();
        let cancel = Arc::new(());
        let bounds = Bounds {
            capacity: 1,
            ahead_bytes: 10,
            source_waits: false,
            stall: Duration::from_secs(3600),
        };
        let tasks = TaskTracker::new();
        let why = Arc::new(std::sync::Mutex::new(None));
        let told = Arc::clone(&why);
        let (reader, stalled) = spawn(
            &tasks,
            tokio_stream::wrappers::ReceiverStream::new(from),
            bounds,
            Arc::clone(&cancel),
            observer,
            move |dropped, _| *told.lock().unwrap() = Some(dropped),
        );
        // One in the channel, ten held, the twelfth is one too many.
        for i in 0..12u32 {
            tx.send(i).await.unwrap();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&cancel) > 1 {
            assert!(tokio::time::Instant::now() < deadline, "not dropped");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(stalled.load(Ordering::Relaxed));
        assert_eq!(*why.lock().unwrap(), Some(Dropped::TooFarBehind));
        // The source is still observed to its end.
        for i in 12..20u32 {
            tx.send(i).await.unwrap();
        }
        drop(tx);
        while !ended.load(Ordering::Relaxed) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not observed to its end"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.load(Ordering::Relaxed), 20);
        drop(reader);
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_waits_is_read_only_as_the_reader_takes() {
        let read = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = Arc::clone(&read);
        let source = futures::stream::iter(0..100u32).inspect(move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        let guard = Arc::new(());
        let bounds = Bounds {
            capacity: 2,
            ahead_bytes: 0,
            source_waits: true,
            stall: Duration::from_secs(30),
        };
        let tasks = TaskTracker::new();
        let (mut reader, stalled) =
            spawn(&tasks, source, bounds, Arc::clone(&guard), (), |_, _| {});
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Two in the channel, one held: nothing more is read, and nobody is dropped yet.
        assert_eq!(read.load(Ordering::Relaxed), 3);
        assert!(!stalled.load(Ordering::Relaxed));
        assert_eq!(reader.recv().await, Some(0));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(read.load(Ordering::Relaxed), 4);
        // A reader that then takes nothing for the stall time is dropped, and the source is
        // left (nothing observes the rest).
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert!(stalled.load(Ordering::Relaxed));
        assert_eq!(
            Arc::strong_count(&guard),
            1,
            "the reader's place is given back"
        );
        assert_eq!(read.load(Ordering::Relaxed), 4);
        drop(reader);
    }
}
