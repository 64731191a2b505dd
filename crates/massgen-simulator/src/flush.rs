//! How a streamed body's events reach the socket: each its own write, as a provider flushes
//! every event when it produces it, or, when a test asks for it (`batch=on`), all of them in
//! one write at the end.
//!
//! hyper's HTTP/1.1 connection writes out what its body gives it only once the body has
//! nothing ready: frames yielded back to back (a tail of finish, usage and `[DONE]`, the
//! head frames of a native format, every frame at `token_ms=0`) went out as one write.
//! [`frames`] hands the runtime a turn between two such frames, so that each is flushed on
//! its own; a frame that follows a pause (`token_ms`) costs nothing extra.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::Stream;

/// `events`, one write each, or (with `batch`) all in one write once the last is produced.
pub fn frames<S>(events: S, batch: bool) -> Pin<Box<dyn Stream<Item = Bytes> + Send>>
where
    S: Stream<Item = Bytes> + Send + 'static,
{
    if batch {
        Box::pin(Batched {
            inner: Box::pin(events),
            buffered: Some(BytesMut::new()),
        })
    } else {
        Box::pin(OneWriteEach {
            inner: Box::pin(events),
            held: None,
            ready_run: false,
        })
    }
}

struct OneWriteEach<S> {
    inner: Pin<Box<S>>,
    /// A frame that came ready right after the previous one: given out on the next poll,
    /// after the connection has flushed that one.
    held: Option<Bytes>,
    /// A frame was given out and the inner stream has not been pending since.
    ready_run: bool,
}

impl<S: Stream<Item = Bytes>> Stream for OneWriteEach<S> {
    type Item = Bytes;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = self.get_mut();
        if let Some(frame) = this.held.take() {
            this.ready_run = true;
            return Poll::Ready(Some(frame));
        }
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(frame)) if this.ready_run => {
                // Pending makes the connection write what it has; the wake brings it back
                // at once for this frame.
                this.held = Some(frame);
                this.ready_run = false;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(Some(frame)) => {
                this.ready_run = true;
                Poll::Ready(Some(frame))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                this.ready_run = false;
                Poll::Pending
            }
        }
    }
}

struct Batched<S> {
    inner: Pin<Box<S>>,
    /// Every frame so far; `None` once given out.
    buffered: Option<BytesMut>,
}

impl<S: Stream<Item = Bytes>> Stream for Batched<S> {
    type Item = Bytes;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = self.get_mut();
        loop {
            let Some(buffered) = this.buffered.as_mut() else {
                return Poll::Ready(None);
            };
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(frame)) => buffered.extend_from_slice(&frame),
                Poll::Ready(None) => {
                    let all = this.buffered.take().unwrap_or_default().freeze();
                    return Poll::Ready((!all.is_empty()).then_some(all));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use std::task::Waker;

    use futures::StreamExt;

    use super::*;

    fn three() -> impl Stream<Item = Bytes> + Send + 'static {
        futures::stream::iter([b"a", b"b", b"c"].map(|b: &'static [u8; 1]| Bytes::from_static(b)))
    }

    /// Frames ready back to back come out with a pending poll (and a wake) between each
    /// pair, which is when hyper writes; batched, they come out as one.
    #[test]
    fn back_to_back_frames_are_separated_by_a_pending_poll() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut s = frames(three(), false);
        let mut polls = Vec::new();
        for _ in 0..10 {
            match s.poll_next_unpin(&mut cx) {
                Poll::Ready(Some(b)) => polls.push(String::from_utf8(b.to_vec()).unwrap()),
                Poll::Ready(None) => break,
                Poll::Pending => polls.push("pending".into()),
            }
        }
        assert_eq!(polls, ["a", "pending", "b", "pending", "c"]);
        let all: Vec<Bytes> = futures::executor::block_on(frames(three(), true).collect());
        assert_eq!(all, [Bytes::from_static(b"abc")]);
        let none: Vec<Bytes> =
            futures::executor::block_on(frames(futures::stream::empty(), true).collect());
        assert!(none.is_empty());
    }
}
