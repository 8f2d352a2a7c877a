//! What the [runner](crate::runner) asks of a durable backlog: values of
//! the durable routes are stored as soon as they are ready (online or
//! not), offered to the engine from storage oldest first, and removed
//! only when the engine reports them delivered.
//!
//! `backlog::Durable` (feature `backlog`) is the implementation over
//! flash or a file; `()` is no backlog, and costs a connector without one
//! nothing.

use core::task::{Context, Poll};

use crate::clock::Instant;
use crate::engine::{Engine, Id};

/// A durable backlog with the routes that feed it, as the runner drives
/// it.
///
/// Its calls are synchronous: flash operations run to completion inside
/// them (a flash driver that waits for an interrupt is polled until it is
/// done, the runner's task doing nothing else meanwhile). So a backlog
/// adds no waiting point to the runner's round, and `()` adds nothing at
/// all.
pub trait Durable {
    /// Whether there is a backlog (`()`: none, and the runner skips every
    /// step).
    const ON: bool = true;

    /// `Ready` when a durable route has a value to store; `Pending` with
    /// the task's waker registered.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// One round beside a connection: what `engine` reports delivered is
    /// removed (what it lost is offered again), what the routes have
    /// ready is stored (the routes then hold `cx`'s waker), and, with
    /// `offer`, stored values go to the engine while it takes them.
    fn round<E: Engine>(&mut self, engine: &mut E, offer: bool, now: Instant, cx: &mut Context<'_>);

    /// Stores what the durable routes have ready (they then hold `cx`'s
    /// waker): what the runner does beside a connection attempt and a
    /// backoff, each time the task is woken.
    fn keep(&mut self, now: Instant, cx: &mut Context<'_>);

    /// A run begins: what an earlier run handed to its engine and saw no
    /// acknowledgement for is offered again, oldest first (the engine of
    /// this run may be a new one, which knows nothing of it).
    fn begin(&mut self) {}
}

impl<T: Durable + ?Sized> Durable for &mut T {
    const ON: bool = T::ON;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        (**self).poll_ready(cx)
    }

    fn round<E: Engine>(
        &mut self,
        engine: &mut E,
        offer: bool,
        now: Instant,
        cx: &mut Context<'_>,
    ) {
        (**self).round(engine, offer, now, cx);
    }

    fn keep(&mut self, now: Instant, cx: &mut Context<'_>) {
        (**self).keep(now, cx);
    }

    fn begin(&mut self) {
        (**self).begin();
    }
}

impl Durable for () {
    const ON: bool = false;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }

    #[inline(always)]
    fn round<E: Engine>(&mut self, _: &mut E, _: bool, _: Instant, _: &mut Context<'_>) {}

    #[inline(always)]
    fn keep(&mut self, _: Instant, _: &mut Context<'_>) {}
}

/// Drops duplicates of one node's tracked messages at a consumer, by
/// their [`Id`] (MQTT: the `aimdb-id` user property).
///
/// A backlog sends in the order it stored, and sends again only from its
/// oldest unacknowledged value on, so a duplicate is always a value seen
/// before. A broker orders each topic but not topics among themselves,
/// so values are accepted in any order within the last 64 sequences of
/// the newest boot seen; older ones (and every earlier boot's, once a
/// newer boot is seen) count as duplicates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dedupe {
    /// The newest id seen, and which of the 64 sequences up to it were.
    newest: Option<Id>,
    seen: u64,
}

impl Dedupe {
    /// Nothing seen yet.
    pub const fn new() -> Self {
        Self {
            newest: None,
            seen: 0,
        }
    }

    /// `true` the first time `id` arrives (deliver it), `false` for a
    /// duplicate (drop it).
    pub fn first(&mut self, id: Id) -> bool {
        let Some(n) = self.newest else {
            (self.newest, self.seen) = (Some(id), 1);
            return true;
        };
        if id.boot != n.boot {
            if id.boot < n.boot {
                return false;
            }
            (self.newest, self.seen) = (Some(id), 1);
            return true;
        }
        if id.seq > n.seq {
            let shift = id.seq - n.seq;
            self.seen = if shift >= 64 { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.newest = Some(id);
            return true;
        }
        let back = n.seq - id.seq;
        if back >= 64 || self.seen & (1 << back) != 0 {
            return false;
        }
        self.seen |= 1 << back;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use super::*;

    fn id(boot: u32, seq: u32) -> Id {
        Id { boot, seq }
    }

    #[test]
    fn each_id_passes_once_in_any_order_within_the_window() {
        let mut d = Dedupe::new();
        // In order, a resend of a suffix, a swap across topics.
        let arrivals = [
            (0, 0),
            (0, 1),
            (0, 2),
            (0, 1),
            (0, 2),
            (0, 4),
            (0, 3),
            (0, 3),
            (0, 5),
        ];
        let passed: Vec<bool> = arrivals.iter().map(|&(b, s)| d.first(id(b, s))).collect();
        assert_eq!(
            passed,
            [true, true, true, false, false, true, true, false, true]
        );
        // A new boot; the old boot's values again are duplicates.
        assert!(d.first(id(1, 0)));
        assert!(!d.first(id(0, 6)));
        assert!(!d.first(id(1, 0)));
        // Far ahead, then too far behind to tell: a duplicate.
        assert!(d.first(id(1, 100)));
        assert!(!d.first(id(1, 36)));
        assert!(d.first(id(1, 37)));
        assert!(!d.first(id(1, 37)));
    }
}
