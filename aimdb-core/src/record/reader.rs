//! [`Reader`]: one subscription to a record.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use embassy_sync::blocking_mutex::raw::RawMutex;

use super::{Buffer, Kind, Record, RecvError, Take, TryRecvError};

/// One reader slot of a record. Dropping it frees the slot.
pub struct Reader<'a, M: RawMutex, B: Buffer, const R: usize> {
    record: &'a Record<M, B, R>,
    idx: u8,
}

impl<'a, M: RawMutex, B: Buffer, const R: usize> Reader<'a, M, B, R> {
    pub(super) fn new(record: &'a Record<M, B, R>, idx: u8) -> Self {
        Self { record, idx }
    }

    /// The record read from.
    pub fn record(&self) -> &'a Record<M, B, R> {
        self.record
    }

    /// Takes the next value if there is one.
    pub fn try_recv(&mut self) -> Result<B::Item, TryRecvError> {
        match self.record.take(self.idx as usize, None, false).take {
            Take::Value(v) => Ok(v),
            Take::Empty => Err(TryRecvError::Empty),
            Take::Lagged(n) => Err(TryRecvError::Lagged(n)),
        }
    }

    /// Polls for the next value; on `Pending` the waker is registered and is
    /// woken by the next write.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<B::Item, RecvError>> {
        match self
            .record
            .take(self.idx as usize, Some(cx.waker()), false)
            .take
        {
            Take::Value(v) => Poll::Ready(Ok(v)),
            Take::Empty => Poll::Pending,
            Take::Lagged(n) => Poll::Ready(Err(RecvError::Lagged(n))),
        }
    }

    /// [`Self::poll_recv`] that also registers the waker when it returns
    /// the reader's last value (`Ready((v, true))`): the caller need not
    /// poll again until the waker is woken. `Ready((v, false))`: more may
    /// follow, poll again.
    pub fn poll_recv_armed(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<(Result<B::Item, RecvError>, bool)> {
        let t = self.record.take(self.idx as usize, Some(cx.waker()), true);
        match t.take {
            Take::Value(v) => Poll::Ready((Ok(v), t.armed)),
            Take::Empty => Poll::Pending,
            Take::Lagged(n) => Poll::Ready((Err(RecvError::Lagged(n)), false)),
        }
    }

    /// Makes the current value deliverable again if the buffer kind
    /// re-publishes state (`Latest`); a no-op for `Ring` and `Mailbox`.
    pub fn replay(&mut self) {
        self.record.replay(self.idx as usize);
    }

    /// Waits for the next value.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a value is only taken when the future completes.
    pub fn recv(&mut self) -> Recv<'_, 'a, M, B, R> {
        Recv { reader: self }
    }
}

impl<M: RawMutex, B: Buffer, const R: usize> Drop for Reader<'_, M, B, R> {
    fn drop(&mut self) {
        self.record.unsubscribe(self.idx as usize);
    }
}

impl<M: RawMutex, B: Buffer, const R: usize> fmt::Debug for Reader<'_, M, B, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("record", &self.record.name())
            .field("slot", &self.idx)
            .finish()
    }
}

/// The future of [`Reader::recv`].
#[must_use = "futures do nothing unless polled"]
pub struct Recv<'r, 'a, M: RawMutex, B: Buffer, const R: usize> {
    reader: &'r mut Reader<'a, M, B, R>,
}

impl<M: RawMutex, B: Buffer, const R: usize> Future for Recv<'_, '_, M, B, R> {
    type Output = Result<B::Item, RecvError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.reader.poll_recv(cx)
    }
}

/// A poll-style source of values: what an outbound route drains. Implemented
/// by [`Reader`]; implement it to route other sources.
pub trait Source {
    /// The value type.
    type Item;
    /// The record's name.
    fn name(&self) -> &'static str;
    /// See [`Reader::poll_recv`].
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::Item, RecvError>>;
    /// See [`Reader::poll_recv_armed`]. The default never arms: the caller
    /// polls once more and parks on that `Pending`.
    fn poll_recv_armed(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<(Result<Self::Item, RecvError>, bool)> {
        self.poll_recv(cx).map(|r| (r, false))
    }
    /// See [`Reader::replay`].
    fn replay(&mut self) {}
    /// The record's buffer kind, if the source is a record (a `Ring` is
    /// assumed otherwise: a stream, nothing retained).
    fn kind(&self) -> Kind {
        Kind::Ring
    }
}

impl<M: RawMutex, B: Buffer, const R: usize> Source for Reader<'_, M, B, R> {
    type Item = B::Item;
    fn kind(&self) -> Kind {
        B::KIND
    }
    fn name(&self) -> &'static str {
        self.record.name()
    }
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<B::Item, RecvError>> {
        Reader::poll_recv(self, cx)
    }
    fn poll_recv_armed(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<(Result<B::Item, RecvError>, bool)> {
        Reader::poll_recv_armed(self, cx)
    }
    fn replay(&mut self) {
        Reader::replay(self);
    }
}
