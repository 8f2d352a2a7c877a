//! A [`Backlog`] with the routes that feed it: what the runner drives
//! ([`crate::durable::Durable`]).

use core::future::poll_fn;
use core::task::{Context, Poll};

use aimdb_core::connector::{Message, MessageSource, Ready};
use embedded_storage_async::nor_flash::MultiwriteNorFlash;
use sequential_storage::cache::CacheImpl;

use super::Backlog;
use crate::clock::Instant;
use crate::engine::{Delivery, Id};
use crate::runner::BURST;

/// Durable routes: every value of `routes` is stored in `backlog` as
/// soon as it is ready and leaves it once delivered. Give it to
/// `Mqtt::run_durable` (or [`Runner::run_durable`](crate::runner::Runner::run_durable)).
///
/// `buf` holds one entry: [`HEAD`](super::HEAD) plus the longest topic
/// and payload of `routes`.
pub struct Durable<'a, 'c, F: MultiwriteNorFlash, C: CacheImpl<()>, M: ?Sized> {
    backlog: &'a mut Backlog<'c, F, C>,
    routes: &'a mut M,
    buf: &'a mut [u8],
    ready: Option<Ready>,
}

impl<F: MultiwriteNorFlash, C: CacheImpl<()>, M: ?Sized> core::fmt::Debug
    for Durable<'_, '_, F, C, M>
{
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Durable")
            .field("backlog", &self.backlog)
            .finish_non_exhaustive()
    }
}

impl<'a, 'c, F, C, M> Durable<'a, 'c, F, C, M>
where
    F: MultiwriteNorFlash,
    C: CacheImpl<()>,
    M: MessageSource + ?Sized,
{
    /// `routes`' values through `backlog`; `buf` holds one entry.
    pub fn new(backlog: &'a mut Backlog<'c, F, C>, routes: &'a mut M, buf: &'a mut [u8]) -> Self {
        Self {
            backlog,
            routes,
            buf,
            ready: None,
        }
    }

    /// The backlog.
    pub fn backlog(&self) -> &Backlog<'c, F, C> {
        self.backlog
    }
}

impl<F, C, M> crate::durable::Durable for Durable<'_, '_, F, C, M>
where
    F: MultiwriteNorFlash,
    C: CacheImpl<()>,
    M: MessageSource + ?Sized,
{
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.ready.is_none() {
            match self.routes.poll_ready(cx) {
                Poll::Ready(r) => self.ready = Some(r),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }

    async fn store(&mut self, now: Instant) {
        for _ in 0..BURST {
            let ready = match self.ready.take() {
                Some(r) => r,
                // Pending leaves this task's waker with the routes.
                None => match poll_fn(|cx| Poll::Ready(self.routes.poll_ready(cx))).await {
                    Poll::Ready(r) => r,
                    Poll::Pending => return,
                },
            };
            let m = self.routes.message(ready);
            // A value that cannot be stored is counted by the backlog.
            if let Err(e) = self.backlog.push(&m, now, self.buf).await {
                log_warn!("backlog: a value was not stored: {}", e);
            }
        }
    }

    async fn settle(&mut self, delivery: Delivery, now: Instant) {
        if let Err(e) = self.backlog.delivered(delivery.acked, now, self.buf).await {
            log_warn!("backlog: delivered values not removed: {}", e);
        }
        if delivery.lost {
            self.backlog.resend();
        }
    }

    async fn next(&mut self) -> Option<(Message<'_>, Id)> {
        match self.backlog.next(self.buf).await {
            Ok(Some(e)) => Some((
                e.message(),
                Id {
                    boot: e.stamp.boot,
                    seq: e.stamp.seq,
                },
            )),
            Ok(None) => None,
            Err(e) => {
                log_warn!("backlog: a stored value could not be read: {}", e);
                None
            }
        }
    }

    fn sent(&mut self) {
        self.backlog.sent();
    }

    async fn discard(&mut self, now: Instant) {
        if let Err(e) = self.backlog.discard(now, self.buf).await {
            log_warn!("backlog: a value too large to send was not removed: {}", e);
        }
    }
}
