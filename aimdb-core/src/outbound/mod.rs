//! `Routes`: records → transport.
//!
//! Each declared route (a record reader, a topic, an encoder) owns one bit
//! of a [`Readiness`] bitmap. A record write wakes the route's waker, which
//! sets the bit and wakes the transport's single waker: no task per route,
//! no allocation per wake. The transport task awaits [`Routes::next`], which
//!
//! 1. takes ready bits (one atomic swap per 32 routes, found through a
//!    summary word, so the cost does not grow with the route count);
//! 2. serves them round-robin from a rotating cursor, so an always-ready
//!    route cannot starve the others;
//! 3. drains the route's reader (`Ring`: every value still held, reporting
//!    lag; `Latest`: the newest), resolves the topic (static, or written
//!    into the topic scratch), encodes into the payload scratch shared by the
//!    whole connector;
//! 4. returns a borrowed [`Message`]: route index, topic, payload.
//!
//! When nothing is ready it parks: its waker stored (once per waker, not per
//! park) and a `PARKED` flag set in the bitmap's summary word by the same
//! compare-and-swap that finds no route ready, so a write that races with
//! the park is never lost (checked by the loom model in
//! `loom_model.rs` beside this file).
//!
//! Encode and topic failures skip that one value, are counted per route and
//! in [`OutboundStats`], and never stall other routes.
//!
//! # Priority
//!
//! Routes come in two classes. A route added with
//! [`Builder::link_urgent`] is *urgent* (up to [`MAX_URGENT`], linked
//! before the normal routes, so they are routes `0..u`): on every pull, a
//! ready urgent
//! route is served before any normal one (round-robin among the urgent
//! routes), so a value written on it while thousands of normal routes are
//! ready comes out on the next pull instead of after a full round. Normal
//! routes keep moving: after [`URGENT_BURST`] (8) urgent messages in a row
//! while a normal route is ready, the next pull serves one normal route.
//! So with `k` normal routes ready, each of them is served within
//! `(URGENT_BURST + 1) * k` pulls however busy the urgent routes are
//! (within `k` pulls with no urgent traffic). The class is decided by the
//! route index in the transport's private copy of the bitmap: marking,
//! parking and taking bits are the same for both classes, a pull costs one
//! masked test of the first word more than without priorities (b2
//! `outbound_next_*` rows), and an urgent pull is as flat in the route
//! count as a normal one (b2 `outbound_urgent_*`); zero allocations.
//!
//! Memory: two bytes of tag and one bit per route in the [`Readiness`], one
//! fat pointer per route here, plus the link itself (its reader, topic and
//! an error counter); the encode and topic scratches are one per connector.
//!
//! ```
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::outbound::{Link, Routes};
//! use aimdb_core::record::{Latest, Record};
//! use aimdb_core::sync::Readiness;
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
//!
//! static TEMP: Record<CriticalSectionRawMutex, Latest<i16>, 1> = Record::new("temp");
//! static READY: Readiness<1> = Readiness::new();
//!
//! let mut link = Link::new(TEMP.subscribe().unwrap(), "sensors/temp", Postcard);
//! let (mut payload, mut topic) = ([0u8; 32], [0u8; 64]);
//! let mut b = Routes::<_, 1, 4>::builder(&READY, &mut payload).written_topics(&mut topic);
//! b.link(&mut link);
//! let mut routes = b.build().unwrap();
//!
//! TEMP.write(215);
//! let m = futures::executor::block_on(routes.next());
//! assert_eq!((m.route, m.topic, m.payload), (0, "sensors/temp", &[0xae, 0x03][..]));
//! ```
#![forbid(unsafe_code)]

mod link;
mod scheduler;
// The loom model of the wake-up path (a write racing a parked `next()`).
#[cfg(all(test, aimdb_loom))]
mod loom_model;
// Outside a loom model the loom atomics of `Readiness` panic: the model
// of this module is `outbound/loom_model.rs`.
#[cfg(all(test, not(aimdb_loom)))]
mod tests;

use core::fmt;
use core::future::poll_fn;
use core::task::{Context, Poll};

#[cfg(feature = "alloc")]
pub use link::Owned;
pub use link::{default_qos, Borrowed, Link, Route, RouteError, TopicSpec, TopicWriter, Written};
// What a route produces into is the table's business: reachable (and
// nameable) only inside the crate, so `Route` cannot be implemented
// outside it (it is sealed, see `Route`).
pub(crate) use link::{Out, Produced};
use scheduler::Scheduler;

use crate::connector::{Message, MessageSource, OutboundStats, Ready};
use crate::sync::{Readiness, ReadinessHandle};
use crate::topic::{Topic, TopicError};

/// A configuration mistake found while building.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A static topic is not a valid topic name.
    InvalidTopic(TopicError),
    /// More routes than `N` or than the bitmap's `32 * W`.
    TooManyRoutes,
    /// Another table is built on the same `Readiness` and not dropped yet
    /// (one consumer per bitmap); `index` is the number of links.
    ReadinessInUse,
    /// An urgent route linked after a normal one (urgent routes come first).
    UrgentAfterNormal,
    /// More than [`MAX_URGENT`] urgent routes.
    TooManyUrgent,
    /// A route writes its topic per value ([`Written`]) and the table has
    /// no scratch to write it into ([`Builder::written_topics`]).
    NoTopicScratch,
}

/// Every configuration mistake of a build; each issue's name is the
/// route's record name.
pub type ConfigErrors = crate::ConfigErrors<'static, ConfigError>;

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidTopic(e) => write!(f, "invalid topic: {e}"),
            Self::TooManyRoutes => {
                f.write_str("more routes than the table's N or its bitmap's 32 * W")
            }
            Self::ReadinessInUse => {
                f.write_str("another table consumes this Readiness (one consumer per bitmap)")
            }
            Self::UrgentAfterNormal => {
                f.write_str("urgent routes must be linked before any normal route")
            }
            Self::TooManyUrgent => write!(f, "more than {MAX_URGENT} urgent routes"),
            Self::NoTopicScratch => {
                f.write_str("a written topic needs a topic scratch (Builder::written_topics)")
            }
        }
    }
}
impl core::error::Error for ConfigError {}

/// Most urgent routes a table may have (they share the bitmap's first
/// word).
pub const MAX_URGENT: usize = 32;

/// Urgent messages served in a row while a normal route is ready, before
/// the next pull serves one normal route: the bound that keeps normal
/// routes moving under urgent load (see [Priority](self#priority)).
pub const URGENT_BURST: u8 = 8;

/// The readiness words (`W` of [`Routes`] and [`Readiness`]) for `routes`
/// routes: one bit per route, 32 per word.
///
/// ```
/// use aimdb_core::outbound::words;
/// use aimdb_core::sync::Readiness;
/// const ROUTES: usize = 40;
/// static READY: Readiness<{ words(ROUTES) }> = Readiness::new();
/// assert_eq!(words(ROUTES), 2);
/// ```
pub const fn words(routes: usize) -> usize {
    routes.div_ceil(32)
}

/// Outbound routes for up to `N` routes over a `Readiness<W>` reached
/// through handle `H` (`&'static Readiness<W>` or `Arc<Readiness<W>>`).
///
/// `D` is the type-erased route the table holds (see [Threading](crate#threading-model)):
/// `dyn Route + Send` by default, so the table, and a connector future
/// that owns or borrows it, is `Send` when its records are `Sync`;
/// [`LocalRoutes`] (`dyn Route`) for routes over `NoopRawMutex` records.
pub struct Routes<
    'a,
    H: ReadinessHandle<W>,
    const W: usize,
    const N: usize,
    D = dyn Route + Send + 'a,
> where
    D: Route + ?Sized + 'a,
{
    ready: H,
    /// Which ready route is served next.
    schedule: Scheduler<W>,
    routes: heapless::Vec<&'a mut D, N>,
    /// The scratches and what the last route polled produced, kept here
    /// (not built per pull) and lent to each route.
    out: Out<'a>,
    /// Route of the message readied by the last successful poll, which
    /// its route described in `produced`.
    current: Option<usize>,
    stats: OutboundStats,
    /// Routes `0..urgent` are urgent.
    urgent: usize,
    /// This table holds its bitmap's consumer claim (released on drop).
    claimed: bool,
}

impl<'a, H: ReadinessHandle<W>, const W: usize, const N: usize, D> Drop for Routes<'a, H, W, N, D>
where
    D: Route + ?Sized + 'a,
{
    fn drop(&mut self) {
        if self.claimed {
            self.ready.readiness().release();
        }
    }
}

/// [`Routes`] over routes that need not be `Send` (records over
/// `NoopRawMutex`): for firmware on one executor, or a tokio `LocalSet`.
pub type LocalRoutes<'a, H, const W: usize, const N: usize> = Routes<'a, H, W, N, dyn Route + 'a>;

/// Declares the links of a [`Routes`]; see [`Routes::builder`].
pub struct Builder<
    'a,
    H: ReadinessHandle<W>,
    const W: usize,
    const N: usize,
    D = dyn Route + Send + 'a,
> where
    D: Route + ?Sized + 'a,
{
    routes: Routes<'a, H, W, N, D>,
    calls: usize,
    errors: ConfigErrors,
}

impl<'a, H, const W: usize, const N: usize, D> Routes<'a, H, W, N, D>
where
    H: ReadinessHandle<W>,
    D: Route + ?Sized + 'a,
{
    /// Starts declaring routes over `ready`. `payload` is the encode
    /// scratch shared by every route of this connector: size it for the
    /// largest encoded value. Routes with written topics also need
    /// [`Builder::written_topics`].
    pub fn builder(ready: H, payload: &'a mut [u8]) -> Builder<'a, H, W, N, D> {
        Builder {
            routes: Routes {
                ready,
                schedule: Scheduler::new(),
                routes: heapless::Vec::new(),
                out: Out {
                    topic: &mut [],
                    payload,
                    #[cfg(feature = "alloc")]
                    owned: alloc::vec::Vec::new(),
                    produced: Produced::EMPTY,
                },
                current: None,
                stats: OutboundStats::default(),
                urgent: 0,
                claimed: false,
            },
            calls: 0,
            errors: ConfigErrors::new(),
        }
    }

    /// Waits for the next message.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a value is taken from its record only in the poll that
    /// returns it, so dropping the future before completion loses nothing.
    pub async fn next(&mut self) -> Message<'_> {
        let i = poll_fn(|cx| self.poll_ready(cx)).await;
        self.message(i)
    }

    /// Poll-style [`Self::next`].
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Message<'_>> {
        match self.poll_ready(cx) {
            Poll::Ready(i) => Poll::Ready(self.message(i)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The message produced by the last successful poll, again (for a
    /// transport whose write failed and that wants to retry it). A later
    /// poll that finds nothing ready keeps it; one that polls a route
    /// (which writes the scratches) forgets it first.
    pub fn last(&self) -> Option<Message<'_>> {
        self.current.map(|i| self.message(i))
    }

    /// Marks every route ready, so each is polled again: `Latest` routes
    /// re-deliver nothing they already delivered, but a route whose waker
    /// was lost (or a transport that restarted) gets looked at.
    pub fn mark_all(&mut self) {
        for i in 0..self.routes.len() {
            self.schedule.set(i);
        }
    }

    /// After a transport reconnects: every `Latest` route delivers its
    /// current value again (state is re-published); `Ring` and `Mailbox`
    /// routes deliver only what they have not delivered yet.
    pub fn replay_latest(&mut self) {
        for (i, r) in self.routes.iter_mut().enumerate() {
            r.replay();
            self.schedule.set(i);
        }
    }

    /// Counters.
    pub fn stats(&self) -> &OutboundStats {
        &self.stats
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Whether route `i` was linked urgent ([`Builder::link_urgent`]).
    pub fn is_urgent(&self, i: usize) -> bool {
        i < self.urgent
    }

    /// Route `i` (for its name and error count).
    pub fn route(&self, i: usize) -> Option<&D> {
        self.routes.get(i).map(|r| &**r)
    }

    /// The readiness bitmap.
    pub fn readiness(&self) -> &Readiness<W> {
        self.ready.readiness()
    }

    /// Readies the next message; `Ready(i)`: route `i` produced it.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        loop {
            // Take new ready bits on every pull, not only when the private
            // set ran dry: a route armed while delivering its last value is
            // only ever re-polled through its bit, and must not wait behind
            // a `Ring` burst for longer than one round. Nothing ready costs
            // one load.
            let Some(i) = self.schedule.take(self.ready.readiness()) else {
                // Park: store the waker and set `PARKED` in one
                // compare-and-swap that also finds no route ready; a mark
                // that lands after it finds `PARKED` and wakes us.
                if self.schedule.park(self.ready.readiness(), cx.waker()) {
                    return Poll::Pending;
                }
                continue;
            };
            let Some(route) = self.routes.get_mut(i) else {
                continue;
            };
            // The route writes the scratches: the last message is gone.
            // (A poll that finds nothing ready leaves it, intact.)
            self.current = None;
            let out = &mut self.out;
            let polled = self.ready.with_route_waker(i, |waker| {
                route.poll_produce(&mut Context::from_waker(waker), out)
            });
            match polled {
                // The reader registered the route waker.
                Poll::Pending => continue,
                Poll::Ready(Ok(more)) => {
                    // The reader holds more (a `Ring` burst): look again
                    // after the other ready routes had their turn. Otherwise
                    // it registered the route waker while taking the value,
                    // so no second poll is needed to park it.
                    if more {
                        self.schedule.set(i);
                    }
                    self.stats.sent = self.stats.sent.wrapping_add(1);
                    self.stats.lagged += self.out.produced.lagged;
                    self.current = Some(i);
                    return Poll::Ready(i);
                }
                Poll::Ready(Err(e)) => {
                    // Whether the reader was armed is not carried by an
                    // error (rare): look again.
                    self.schedule.set(i);
                    self.count(e);
                }
            }
        }
    }

    fn count(&mut self, e: RouteError) {
        let c = match e {
            RouteError::Encode(_) => &mut self.stats.encode_errors,
            RouteError::TopicTooLong => &mut self.stats.topic_too_long,
            RouteError::TopicInvalid => &mut self.stats.topic_invalid,
        };
        *c = c.wrapping_add(1);
    }

    /// The message route `i` produced in the last successful poll (`i` is
    /// `current`).
    fn message(&self, i: usize) -> Message<'_> {
        let c = &self.out.produced;
        let topic = if c.topic_len != 0 {
            // The route validated these bytes as a topic before returning.
            core::str::from_utf8(&self.out.topic[..c.topic_len]).unwrap_or("")
        } else {
            // `i` is in range when it comes from `poll_ready`.
            self.routes
                .get(i)
                .and_then(|r| r.fixed_topic())
                .unwrap_or("")
        };
        let payload: &[u8] = if c.owned {
            #[cfg(feature = "alloc")]
            let owned: &[u8] = &self.out.owned;
            #[cfg(not(feature = "alloc"))]
            let owned: &[u8] = &[];
            owned
        } else {
            &self.out.payload[..c.payload_len]
        };
        Message {
            route: i,
            topic,
            payload,
            lagged: c.lagged,
            qos: c.qos,
            retain: c.retain,
            urgent: i < self.urgent,
        }
    }
}

impl<'a, H, const W: usize, const N: usize, D> Builder<'a, H, W, N, D>
where
    H: ReadinessHandle<W>,
    D: Route + ?Sized + 'a,
{
    /// Adds a route; its index is the number of routes added before it.
    pub fn link(&mut self, route: &'a mut D) -> &mut Self {
        self.add(route, false)
    }

    /// Adds an urgent route (a setpoint, an emergency stop): served before
    /// every normal route on each pull, round-robin among the urgent ones.
    /// Urgent routes come first: link them before any normal route, at
    /// most [`MAX_URGENT`] ([`ConfigError::UrgentAfterNormal`],
    /// [`ConfigError::TooManyUrgent`] otherwise). See
    /// [Priority](self#priority) for the bound that keeps normal routes
    /// moving.
    pub fn link_urgent(&mut self, route: &'a mut D) -> &mut Self {
        self.add(route, true)
    }

    /// The scratch into which routes with written topics ([`Written`])
    /// write each value's topic, shared by every route of this connector:
    /// size it for the longest topic (at most
    /// [`MAX_TOPIC_LEN`](crate::topic::MAX_TOPIC_LEN)). A table whose
    /// topics are all fixed needs none.
    #[must_use]
    pub fn written_topics(mut self, scratch: &'a mut [u8]) -> Self {
        self.routes.out.topic = scratch;
        self
    }

    fn add(&mut self, route: &'a mut D, urgent: bool) -> &mut Self {
        let index = self.calls;
        self.calls += 1;
        let name = route.name();
        let routes = &self.routes;
        let fixed = route.fixed_topic();
        let err = if let Some(Err(e)) = fixed.map(Topic::new) {
            Some(ConfigError::InvalidTopic(e))
        } else if fixed.is_none() && routes.out.topic.is_empty() {
            Some(ConfigError::NoTopicScratch)
        } else if urgent && routes.urgent < routes.routes.len() {
            Some(ConfigError::UrgentAfterNormal)
        } else if urgent && routes.urgent >= MAX_URGENT {
            Some(ConfigError::TooManyUrgent)
        } else if self.routes.routes.len() >= Readiness::<W>::CAPACITY {
            Some(ConfigError::TooManyRoutes)
        } else {
            self.routes
                .routes
                .push(route)
                .err()
                .map(|_| ConfigError::TooManyRoutes)
        };
        if let Some(error) = err {
            self.errors.push(index, name, error);
            return self;
        }
        if let Some(r) = self.routes.routes.last_mut() {
            r.settle();
        }
        if urgent {
            self.routes.urgent += 1;
        }
        self
    }

    /// Finishes: the routes, or every configuration error at once. Every
    /// route starts marked ready, so values written before the build (and a
    /// `Latest` record's current value) are delivered.
    // Built once at start-up and `no_std` has no `Box`: the large error
    // (every issue, by value) is the point.
    #[allow(clippy::result_large_err)]
    pub fn build(self) -> Result<Routes<'a, H, W, N, D>, ConfigErrors> {
        if self.errors.total > 0 {
            return Err(self.errors);
        }
        let mut r = self.routes;
        // One consumer per bitmap: a second table pulling from the same
        // `Readiness` would steal its bits and could miss wake-ups.
        if !r.ready.readiness().claim() {
            let mut errors = ConfigErrors::new();
            errors.push(self.calls, "", ConfigError::ReadinessInUse);
            return Err(errors);
        }
        r.claimed = true;
        r.schedule.set_urgent(r.urgent, URGENT_BURST);
        r.mark_all();
        Ok(r)
    }
}

impl<'a, H, const W: usize, const N: usize, D> MessageSource for Routes<'a, H, W, N, D>
where
    H: ReadinessHandle<W>,
    D: Route + ?Sized + 'a,
{
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Ready> {
        Routes::poll_ready(self, cx).map(Ready::new)
    }
    fn message(&self, ready: Ready) -> Message<'_> {
        Routes::message(self, ready.route())
    }
    fn replay_latest(&mut self) {
        Routes::replay_latest(self);
    }
    fn stats(&self) -> &OutboundStats {
        Routes::stats(self)
    }
}

impl<'a, H, const W: usize, const N: usize, D> fmt::Debug for Routes<'a, H, W, N, D>
where
    H: ReadinessHandle<W>,
    D: Route + ?Sized + 'a,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("routes", &self.routes.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'a, H, const W: usize, const N: usize, D> fmt::Debug for Builder<'a, H, W, N, D>
where
    H: ReadinessHandle<W>,
    D: Route + ?Sized + 'a,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("routes", &self.routes.routes.len())
            .field("errors", &self.errors.total)
            .finish()
    }
}
