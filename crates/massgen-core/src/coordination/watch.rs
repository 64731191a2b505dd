//! What ends a call's read loop early (the session cancelled, its reader gone, its
//! deadline), made once per call. A `cancelled()`, a `closed()` and a `timeout_at` made
//! anew for every chunk registered and removed two waiters and a timer per token: on a
//! plain call that was most of the engine's own share of a streamed token's CPU.

use std::future::Future;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::emit::Emitter;

pub(super) struct Watch {
    cancelled: Pin<Box<WaitForCancellationFutureOwned>>,
    closed: Pin<Box<dyn Future<Output = ()> + Send>>,
    expiry: Pin<Box<Sleep>>,
}

/// What [`Watch::next`] found.
pub(super) enum Next<T> {
    /// The stream's next item (`None`: it ended).
    Item(Option<T>),
    /// The session was cancelled or its reader went away.
    Gone,
    /// The deadline passed with no item ready.
    Elapsed,
}

impl Watch {
    pub(super) fn new(cancel: &CancellationToken, em: &Emitter, deadline: Instant) -> Self {
        Self {
            cancelled: Box::pin(cancel.clone().cancelled_owned()),
            closed: Box::pin(em.closed_owned()),
            expiry: Box::pin(sleep_until(deadline)),
        }
    }

    /// The next item of `stream`, unless the session stops first. In the order the
    /// per-chunk `select!` had: a cancellation or a gone reader wins over a ready item, a
    /// ready item over a passed deadline.
    pub(super) async fn next<S: Stream + Unpin>(&mut self, stream: &mut S) -> Next<S::Item> {
        tokio::select! {
            biased;
            () = self.cancelled.as_mut() => Next::Gone,
            () = self.closed.as_mut() => Next::Gone,
            item = stream.next() => Next::Item(item),
            () = self.expiry.as_mut() => Next::Elapsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;
    use crate::coordination::spec::SystemClock;

    fn emitter(
        cancel: &CancellationToken,
    ) -> (
        Emitter,
        mpsc::Receiver<Box<crate::coordination::SessionEvent>>,
    ) {
        let (tx, rx) = mpsc::channel(4);
        (
            Emitter::new(tx, "s".into(), Arc::new(SystemClock), cancel.clone()),
            rx,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn items_then_the_end_then_each_stop_in_its_order() {
        let cancel = CancellationToken::new();
        let (em, rx) = emitter(&cancel);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut watch = Watch::new(&cancel, &em, deadline);
        let mut items = futures::stream::iter([1, 2]);
        assert!(matches!(watch.next(&mut items).await, Next::Item(Some(1))));
        assert!(matches!(watch.next(&mut items).await, Next::Item(Some(2))));
        assert!(matches!(watch.next(&mut items).await, Next::Item(None)));
        // Nothing comes: the deadline, once, however many chunks were read before.
        let mut never = futures::stream::pending::<u8>();
        assert!(matches!(watch.next(&mut never).await, Next::Elapsed));
        // A ready item still wins over a passed deadline.
        assert!(matches!(
            watch.next(&mut futures::stream::iter([3])).await,
            Next::Item(Some(3))
        ));

        let mut watch = Watch::new(&cancel, &em, deadline + Duration::from_secs(60));
        drop(rx);
        assert!(
            matches!(
                watch.next(&mut futures::stream::iter([4])).await,
                Next::Gone
            ),
            "the reader left"
        );

        let cancel = CancellationToken::new();
        let (em, _rx) = emitter(&cancel);
        let mut watch = Watch::new(&cancel, &em, Instant::now() + Duration::from_secs(60));
        cancel.cancel();
        assert!(
            matches!(
                watch.next(&mut futures::stream::iter([5])).await,
                Next::Gone
            ),
            "cancelled"
        );
    }
}
