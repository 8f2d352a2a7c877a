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
pub struct Durable<'a, 'c, F: MultiwriteNorFlash, C: CacheImpl<()>, M: ?Sized, O = ()> {
    backlog: &'a mut Backlog<'c, F, C>,
    routes: &'a mut M,
    buf: &'a mut [u8],
    ready: Option<Ready>,
    origin: O,
}

/// Where the values of a backlog's routes come from, when that is
/// another node's backlog: a gateway that stores a device's values under
/// the device's ids ([`Backlog::push_from`]) and acknowledges them to
/// the device once stored (a [`Hold`](crate::framed::Hold) on its framed
/// link). `()`: the values are this node's own.
pub trait Origin {
    /// The next value of the routes is being stored, `lagged` values
    /// before it lost: the id it came with, if any.
    fn id(&self, lagged: u64) -> Option<Id>;

    /// The value that came with `id` is stored, or lost (the backlog
    /// full, the value too large: counted there).
    fn stored(&self, id: Id);
}

impl Origin for () {
    #[inline(always)]
    fn id(&self, _lagged: u64) -> Option<Id> {
        None
    }

    #[inline(always)]
    fn stored(&self, _id: Id) {}
}

impl<T: Origin + ?Sized> Origin for &T {
    fn id(&self, lagged: u64) -> Option<Id> {
        (**self).id(lagged)
    }

    fn stored(&self, id: Id) {
        (**self).stored(id);
    }
}

impl<F: MultiwriteNorFlash, C: CacheImpl<()>, M: ?Sized, O> core::fmt::Debug
    for Durable<'_, '_, F, C, M, O>
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
            origin: (),
        }
    }

    /// The same, storing each value under the id it came with from
    /// `origin` (see [`Origin`]).
    pub fn with_origin<O: Origin>(self, origin: O) -> Durable<'a, 'c, F, C, M, O> {
        Durable {
            backlog: self.backlog,
            routes: self.routes,
            buf: self.buf,
            ready: self.ready,
            origin,
        }
    }
}

impl<'c, F, C, M, O> Durable<'_, 'c, F, C, M, O>
where
    F: MultiwriteNorFlash,
    C: CacheImpl<()>,
    M: MessageSource + ?Sized,
    O: Origin,
{
    /// The backlog.
    pub fn backlog(&self) -> &Backlog<'c, F, C> {
        self.backlog
    }

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
            let origin = self.origin.id(m.lagged);
            let stored = match origin {
                None => block_on(self.backlog.push(&m, now, self.buf)),
                Some(id) => block_on(self.backlog.push_from(&m, id, now, self.buf)),
            };
            // A value that cannot be stored is counted by the backlog.
            if let Err(e) = stored {
                log_warn!("backlog: a value was not stored: {}", e);
            }
            if let Some(id) = origin {
                self.origin.stored(id);
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

impl<F, C, M, O> crate::durable::Durable for Durable<'_, '_, F, C, M, O>
where
    F: MultiwriteNorFlash,
    C: CacheImpl<()>,
    M: MessageSource + ?Sized,
    O: Origin,
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

    fn begin(&mut self) {
        self.backlog.resend();
    }
}
