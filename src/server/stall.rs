//! A reader that stops reading never holds what feeds it: the session event readers move
//! items through a small channel and give up on a reader that leaves it full for the stall
//! time (a door's stream does the same through [`crate::app::forward`]).

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
