//! A [`Backlog`] with the routes that feed it: what the runner drives
//! ([`crate::durable::Durable`]).

use core::task::{Context, Poll};

use embassy_futures::block_on;

use aimdb_core::connector::{MessageSource, Ready};
use embedded_storage_async::nor_flash::MultiwriteNorFlash;
use sequential_storage::cache::CacheImpl;

use super::Backlog;
use crate::clock::Instant;
use crate::engine::{Engine, Id, Offer};
use crate::runner::BURST;

/// Durable routes: every value of `routes` is stored in `backlog` as
/// soon as it is ready and leaves it once delivered. Give it to
/// `Mqtt::run_durable` (or [`Drive::durable`](crate::runner::Drive::durable)
/// under the runner).
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

impl<F, C, M> Durable<'_, '_, F, C, M>
where
    F: MultiwriteNorFlash,
    C: CacheImpl<()>,
    M: MessageSource + ?Sized,
{
    /// Stores what the routes have ready, a burst at most; the routes then
    /// hold `cx`'s waker.
    fn store(&mut self, now: Instant, cx: &mut Context<'_>) {
        for _ in 0..BURST {
            let ready = match self.ready.take() {
                Some(r) => r,
                None => match self.routes.poll_ready(cx) {
                    Poll::Ready(r) => r,
                    Poll::Pending => return,
                },
            };
            let m = self.routes.message(ready);
            // A value that cannot be stored is counted by the backlog.
            if let Err(e) = block_on(self.backlog.push(&m, now, self.buf)) {
                log_warn!("backlog: a value was not stored: {}", e);
            }
        }
    }

    /// Hands stored values to `engine` while it takes them.
    fn offer<E: Engine>(&mut self, engine: &mut E, now: Instant) {
        for _ in 0..BURST {
            if !engine.accepting() {
                return;
            }
            let entry = match block_on(self.backlog.next(self.buf)) {
                Ok(Some(e)) => e,
                Ok(None) => return,
                Err(e) => {
                    log_warn!("backlog: a stored value could not be read: {}", e);
                    return;
                }
            };
            let id = Id {
                boot: entry.stamp.boot,
                seq: entry.stamp.seq,
            };
            match engine.offer_tracked(&entry.message(), id, now) {
                Offer::Accepted => self.backlog.sent(),
                Offer::Busy => return,
                Offer::TooLarge => {
                    if let Err(e) = block_on(self.backlog.discard(now, self.buf)) {
                        log_warn!("backlog: a value too large to send stays: {}", e);
                        return;
                    }
                }
            }
        }
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

    fn round<E: Engine>(
        &mut self,
        engine: &mut E,
        offer: bool,
        now: Instant,
        cx: &mut Context<'_>,
    ) {
        let delivery = engine.delivered();
        if delivery.acked > 0 {
            if let Err(e) = block_on(self.backlog.delivered(delivery.acked, now, self.buf)) {
                log_warn!("backlog: delivered values not removed: {}", e);
            }
        }
        if delivery.lost {
            self.backlog.resend();
        }
        self.store(now, cx);
        if offer {
            self.offer(engine, now);
        }
    }

    fn keep(&mut self, now: Instant, cx: &mut Context<'_>) {
        self.store(now, cx);
    }
}
