//! `Dispatch`: transport → records.
//!
//! Built once at start-up from declared inbound links; after that
//! [`Dispatch::dispatch`]`(topic, payload)` takes no heap and no lock that
//! can block (a record's own `RawMutex` aside):
//!
//! - **exact** topics are found in a chained hash table with four buckets
//!   per route slot: one FNV-1a pass over the topic, one bucket, one compare,
//!   whatever the route count;
//! - **pattern** filters (`+`, `#`) live in a topic trie whose edges are in a
//!   second hash table keyed by (parent node, level): per message the cost
//!   is one hash per topic level plus the branches that actually match, not
//!   a scan of the filters. Overlapping filters all receive the message, as
//!   a broker delivers overlapping subscriptions, and the `$`-topic rule
//!   holds;
//! - **keyed** filters are patterns whose `+` level at `key_level` names the
//!   slot of a keyed record ([`crate::record::Keyed`]).
//!
//! Every bad input returns a [`DispatchError`], bumps its counter in
//! [`Dispatch::stats`], writes nothing to the rejected link's record, and
//! leaves the table ready for the next frame. Nothing panics or allocates.
//!
//! Capacities are const parameters: `N` routes, `NODES` trie nodes (one per
//! distinct filter prefix, plus the root).
//!
//! ```
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::{Dispatch, Link};
//! use aimdb_core::record::{Latest, Record};
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
//!
//! let led: Record<CriticalSectionRawMutex, Latest<bool>, 1> = Record::new("led");
//! let link = Link::new(&led, Postcard);
//! let mut b = Dispatch::<4, 8>::builder();
//! b.link("cmd/led", &link);
//! let mut d = b.build().unwrap();
//!
//! let mut r = led.subscribe().unwrap();
//! assert_eq!(d.dispatch(b"cmd/led", &[1]), Ok(1));
//! assert_eq!(r.try_recv(), Ok(true));
//! assert!(d.dispatch(b"cmd/nope", &[1]).is_err());
//! assert_eq!(d.stats().unknown_topic, 1);
//! ```
#![forbid(unsafe_code)]

mod build;
mod error;
mod link;
mod stats;
#[cfg(test)]
mod tests;

use core::fmt;

pub use build::{nodes_for, Builder};
pub use error::{ConfigError, ConfigErrors};
pub use link::{KeyedLink, Link, Route, DEFAULT_MAX_PAYLOAD};
pub use stats::Counters;

use crate::connector::{DispatchError, FrameSink, InboundStats};
use crate::topic::{fnv1a, Topic, TopicError, MAX_LEVELS};

const NIL: u16 = u16::MAX;
/// Exact-topic buckets per route slot (see [`Dispatch`]'s `exact`).
const BUCKETS: usize = 4;
const NO_KEY: u8 = u8::MAX;

struct Entry<'a, D: ?Sized> {
    filter: &'a str,
    target: &'a D,
    hash: u32,
    /// Next route in the same exact bucket or on the same trie node.
    next: u16,
    key_level: u8,
    /// First route declared with this filter (what `filters()` yields).
    first: bool,
}

struct Node<'a> {
    level: &'a str,
    level_hash: u32,
    parent: u16,
    /// Next node in the same edge bucket.
    next: u16,
    /// Routes whose filter ends at this node.
    routes: u16,
    plus: u16,
    hash: u16,
}

/// Inbound routing table for up to `N` routes and `NODES` trie nodes.
///
/// `D` is the type-erased link the table holds (see
/// [Threading](crate#threading-model)): `dyn Route + Sync` by default, so the
/// table, and a connector future that borrows it, is `Send` when its
/// records are `Sync`; [`LocalDispatch`] (`dyn Route`) for links into
/// `NoopRawMutex` records.
pub struct Dispatch<'a, const N: usize, const NODES: usize, D = dyn Route + Sync + 'a>
where
    D: Route + ?Sized + 'a,
{
    routes: heapless::Vec<Entry<'a, D>, N>,
    /// Exact-topic buckets, [`BUCKETS`] per route slot (8 bytes a slot).
    /// With one bucket a slot a full table has about one colliding route
    /// per two lookups, and passing over it reads an `Entry` that is rarely
    /// in cache; four keep exact dispatch at 4096 routes within 10 % of 8
    /// routes (`b1_inbound_dispatch`), for 6 bytes more per route slot.
    exact: [[u16; BUCKETS]; N],
    nodes: heapless::Vec<Node<'a>, NODES>,
    edges: [u16; NODES],
    stats: InboundStats,
    /// Mirror of `stats` others can read ([`Builder::counters`]).
    shared: Option<&'a Counters>,
}

/// [`Dispatch`] over links that need not be `Sync` (records over
/// `NoopRawMutex`): for firmware on one executor, or a tokio `LocalSet`.
pub type LocalDispatch<'a, const N: usize, const NODES: usize> =
    Dispatch<'a, N, NODES, dyn Route + 'a>;

/// A list of routes: an exact bucket, or the routes ending at a trie node.
#[derive(Clone, Copy)]
enum List {
    Exact(usize),
    Node(u16),
}

/// Maps a 32-bit hash onto `0..n` without a division.
fn reduce(h: u32, n: usize) -> usize {
    ((h as u64 * n as u64) >> 32) as usize
}

fn edge_hash(parent: u16, level_hash: u32) -> u32 {
    level_hash ^ (parent as u32).wrapping_mul(0x9E37_79B9)
}

fn same_target<D: ?Sized>(a: &D, b: &D) -> bool {
    core::ptr::addr_eq(a as *const D, b as *const D)
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> Dispatch<'a, N, NODES, D> {
    const CHECK: () = assert!(
        N >= 1 && N < NIL as usize && NODES >= 1 && NODES < NIL as usize,
        "Dispatch<N, NODES>: both must be in 1..65535"
    );

    fn head(&self, l: List) -> u16 {
        match l {
            List::Exact(b) => self.exact[b / BUCKETS][b % BUCKETS],
            List::Node(n) => self.nodes[n as usize].routes,
        }
    }

    /// Routes one frame: decodes `payload` into every record whose link
    /// matches `topic`. Returns how many records were written.
    ///
    /// On `Err`, the rejected link's record is unchanged; the error is
    /// counted. If several links match and only some reject the payload,
    /// the others are still written (each link is an independent
    /// subscription) and the first error is returned.
    pub fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.dispatch_with::<false>(topic, payload)
    }

    /// [`Self::dispatch`] for a message the transport marks as *retained*
    /// (kept by a broker and replayed to each new subscriber, not sent
    /// now): links that do not apply retained messages
    /// ([`Route::apply_retained`]: by default, those into `Mailbox`
    /// records, so an old command is not executed again at every start)
    /// skip it, counted in [`InboundStats::retained_ignored`]. Returns the number
    /// of records written, 0 if every matching link skipped it.
    pub fn dispatch_retained(
        &mut self,
        topic: &[u8],
        payload: &[u8],
    ) -> Result<usize, DispatchError> {
        self.dispatch_with::<true>(topic, payload)
    }

    /// Whether some link of `filter` (as declared) applies retained
    /// messages: a connector asks the broker not to send retained messages
    /// for a filter where none does.
    pub fn wants_retained(&self, filter: &str) -> bool {
        self.routes
            .iter()
            .any(|r| r.filter == filter && r.target.apply_retained())
    }

    /// `RETAINED` is a const parameter so plain `dispatch` compiles without
    /// the retained checks.
    fn dispatch_with<const RETAINED: bool>(
        &mut self,
        topic: &[u8],
        payload: &[u8],
    ) -> Result<usize, DispatchError> {
        let (written, result) = match self.route::<RETAINED>(topic, payload) {
            Ok(out) => {
                if RETAINED && out.ignored > 0 {
                    self.stats.retained_ignored =
                        self.stats.retained_ignored.wrapping_add(out.ignored as u32);
                }
                (out.written, out.finish())
            }
            Err(e) => (0, Err(e)),
        };
        // Writes made count even when another matching link rejected the
        // frame: `delivered` is record writes, not accepted frames.
        self.stats.delivered = self.stats.delivered.wrapping_add(written as u32);
        if let Err(e) = result {
            self.stats.count(e);
        }
        if let Some(shared) = self.shared {
            shared.update(&self.stats, result.err());
        }
        result
    }

    /// Counters of delivered frames and of each rejection reason.
    pub fn stats(&self) -> &InboundStats {
        &self.stats
    }

    /// Number of declared routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Whether no route is declared.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The declared filters, each once, in declaration order: what a
    /// connector subscribes to at a broker. Allocates nothing.
    pub fn filters(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.routes.iter().filter(|r| r.first).map(|r| r.filter)
    }

    /// Delivers to every matching link; `Err` only for a bad topic.
    fn route<const RETAINED: bool>(
        &mut self,
        topic: &[u8],
        payload: &[u8],
    ) -> Result<Outcome, DispatchError> {
        let (topic, h) = Topic::from_bytes_hashed(topic).map_err(|e| match e {
            TopicError::NotUtf8 => DispatchError::TopicNotUtf8,
            TopicError::TooLong | TopicError::TooManyLevels => DispatchError::TopicTooLong,
            TopicError::WildcardInName => DispatchError::WildcardInTopic,
            _ => DispatchError::InvalidTopic,
        })?;
        let text = topic.as_str();
        let mut out = Outcome::default();

        let mut i = self.head(List::Exact(reduce(h, BUCKETS * N)));
        while i != NIL {
            let r = &self.routes[i as usize];
            if r.hash == h && r.filter == text {
                out.deliver::<RETAINED, D>(r.target, None, payload);
            }
            i = r.next;
        }

        if self.nodes.len() > 1 {
            self.match_patterns::<RETAINED>(topic, payload, &mut out);
        }
        Ok(out)
    }

    fn match_patterns<const RETAINED: bool>(
        &self,
        topic: Topic<'_>,
        payload: &[u8],
        out: &mut Outcome,
    ) {
        let text = topic.as_str();
        // Level boundaries and hashes, computed once.
        let mut levels = [(0u16, 0u16, 0u32); MAX_LEVELS];
        let mut n = 0;
        let mut start = 0;
        for (k, level) in text.split('/').enumerate() {
            let end = start + level.len();
            levels[k] = (start as u16, end as u16, fnv1a(level.as_bytes()));
            start = end + 1;
            n = k + 1;
        }
        let level = |k: usize| &text[levels[k].0 as usize..levels[k].1 as usize];
        let system = topic.is_system();

        // Depth-first over (node, depth); each node is entered at most once
        // and pushes at most two children, so MAX_LEVELS + 2 entries suffice.
        let mut stack = [(0u16, 0u8); MAX_LEVELS + 2];
        let mut sp = 1;
        while sp > 0 {
            sp -= 1;
            let (id, depth) = stack[sp];
            let node = &self.nodes[id as usize];
            let depth = depth as usize;
            let wild_ok = !(system && depth == 0);
            if node.hash != NIL && wild_ok {
                self.deliver_node::<RETAINED>(node.hash, &level, payload, out);
            }
            if depth == n {
                self.deliver_node::<RETAINED>(id, &level, payload, out);
                continue;
            }
            if node.plus != NIL && wild_ok {
                stack[sp] = (node.plus, depth as u8 + 1);
                sp += 1;
            }
            let lh = levels[depth].2;
            let mut c = self.edges[reduce(edge_hash(id, lh), NODES)];
            while c != NIL {
                let child = &self.nodes[c as usize];
                if child.parent == id && child.level_hash == lh && child.level == level(depth) {
                    stack[sp] = (c, depth as u8 + 1);
                    sp += 1;
                    break;
                }
                c = child.next;
            }
        }
    }

    fn deliver_node<'t, const RETAINED: bool>(
        &self,
        node: u16,
        level: &impl Fn(usize) -> &'t str,
        payload: &[u8],
        out: &mut Outcome,
    ) {
        let mut i = self.nodes[node as usize].routes;
        while i != NIL {
            let r = &self.routes[i as usize];
            let key = (r.key_level != NO_KEY).then(|| level(r.key_level as usize));
            out.deliver::<RETAINED, D>(r.target, key, payload);
            i = r.next;
        }
    }
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> FrameSink
    for Dispatch<'a, N, NODES, D>
{
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        Dispatch::dispatch(self, topic, payload)
    }
    fn dispatch_retained(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        Dispatch::dispatch_retained(self, topic, payload)
    }
    fn wants_retained(&self, filter: &str) -> bool {
        Dispatch::wants_retained(self, filter)
    }
    fn next_filter(&self, from: usize) -> Option<(usize, &str)> {
        let (i, r) = self
            .routes
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, r)| r.first)?;
        Some((i + 1, r.filter))
    }
    fn stats(&self) -> &InboundStats {
        Dispatch::stats(self)
    }
}

fn deliver<D: Route + ?Sized>(
    t: &D,
    key: Option<&str>,
    payload: &[u8],
) -> Result<(), DispatchError> {
    if payload.len() > t.max_payload() {
        return Err(DispatchError::PayloadTooLarge);
    }
    t.deliver(key, payload)
}

#[derive(Default)]
struct Outcome {
    written: usize,
    matched: usize,
    first_err: Option<DispatchError>,
    /// Matching links that skipped a retained message.
    ignored: usize,
}

impl Outcome {
    fn deliver<const RETAINED: bool, D: Route + ?Sized>(
        &mut self,
        t: &D,
        key: Option<&str>,
        payload: &[u8],
    ) {
        if RETAINED && !t.apply_retained() {
            self.matched += 1;
            self.ignored += 1;
            return;
        }
        self.add(deliver(t, key, payload));
    }

    fn add(&mut self, r: Result<(), DispatchError>) {
        self.matched += 1;
        match r {
            Ok(()) => self.written += 1,
            Err(e) => {
                self.first_err.get_or_insert(e);
            }
        }
    }
    fn finish(self) -> Result<usize, DispatchError> {
        match (self.matched, self.first_err) {
            (0, _) => Err(DispatchError::UnknownTopic),
            (_, Some(e)) => Err(e),
            (_, None) => Ok(self.written),
        }
    }
}

impl<'a, const N: usize, const NODES: usize, D: Route + ?Sized + 'a> fmt::Debug
    for Dispatch<'a, N, NODES, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatch")
            .field("routes", &self.routes.len())
            .field("nodes", &self.nodes.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
