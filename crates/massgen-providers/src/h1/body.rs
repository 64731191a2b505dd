//! A response body read straight off its connection, cut out by its framing
//! ([`Deframer`]); read to its end, the connection goes back to the pool, dropped early it
//! is closed (which is how a cancelled call stops the upstream generating).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;

use super::READ_BUFFER;
use super::framing::{Deframer, Framing, Step};
use super::pool::Pool;
use crate::response::BodyError;

pub(super) struct PlainBody {
    stream: Option<TcpStream>,
    frames: Deframer,
    /// Where the connection goes once the body is read to its end, when it may be reused.
    reuse: Option<(Arc<Pool>, Arc<str>)>,
}

impl PlainBody {
    pub(super) fn new(
        stream: TcpStream,
        buf: BytesMut,
        framing: Framing,
        reuse: Option<(Arc<Pool>, Arc<str>)>,
    ) -> Self {
        Self {
            stream: Some(stream),
            frames: Deframer::new(buf, framing),
            reuse,
        }
    }

    /// The body was read to its end: its connection may carry the next call.
    fn finish(&mut self) {
        let stream = self.stream.take();
        if let (Some(stream), Some((pool, address))) = (stream, self.reuse.take()) {
            // Bytes past the end would be read as the next call's response.
            if self.frames.buf.is_empty() {
                pool.checkin(address, stream);
            }
        }
    }

    fn fail(&mut self, error: std::io::Error) -> Poll<Option<Result<Bytes, BodyError>>> {
        self.stream = None;
        self.reuse = None;
        self.frames.stop();
        Poll::Ready(Some(Err(BodyError::Plain(error))))
    }
}

impl futures::Stream for PlainBody {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match this.frames.step() {
                Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(data))),
                Ok(Step::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Err(message) => {
                    return this.fail(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        message,
                    ));
                }
                Ok(Step::NeedMore) => {}
            }
            let Some(stream) = this.stream.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = &mut this.frames.buf;
            if buf.is_empty() && buf.capacity() > 0 {
                // Nothing unread: no buffer held while the next token is awaited.
                *buf = BytesMut::new();
            }
            if let Err(error) = ready!(stream.poll_read_ready(cx)) {
                return this.fail(error);
            }
            let buf = &mut this.frames.buf;
            if buf.capacity() - buf.len() < READ_BUFFER / 4 {
                buf.reserve(READ_BUFFER);
            }
            // tokio's own read: a read that leaves room in the buffer drained the socket,
            // so the next token is waited for without a read that finds nothing (one
            // syscall per upstream chunk instead of two).
            match tokio_util::io::poll_read_buf(Pin::new(stream), cx, buf) {
                Poll::Pending => {
                    // The readiness was stale: waiting again, holding no buffer.
                    if buf.is_empty() {
                        *buf = BytesMut::new();
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Ok(0)) => {
                    if !this.frames.closed() {
                        return this.fail(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the upstream closed the connection before the response ended",
                        ));
                    }
                    // Read to the close: the connection cannot carry another call.
                    this.reuse = None;
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => return this.fail(error),
            }
        }
    }
}
