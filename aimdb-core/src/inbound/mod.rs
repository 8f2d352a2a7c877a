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

mod link;
mod stats;
#[cfg(test)]
mod tests;

use core::fmt;

pub use link::{KeyedLink, Link, Target, DEFAULT_MAX_PAYLOAD};
pub use stats::{SharedStats, Stats};

use crate::codec::DecodeError;
use crate::connector::FrameSink;
use crate::topic::{fnv1a, topic_hash, Filter, Topic, TopicError, MAX_LEVELS};

/// Why a frame was rejected. Each variant has its own counter in [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DispatchError {
    /// No route matches the topic.
    UnknownTopic,
    /// The topic bytes are not UTF-8.
    TopicNotUtf8,
    /// The topic is empty or contains NUL.
    InvalidTopic,
    /// The published topic contains `+` or `#`.
    WildcardInTopic,
    /// The topic is longer than `MAX_TOPIC_LEN` or deeper than `MAX_LEVELS`.
    TopicTooLong,
    /// The payload did not decode as the record's type.
    MalformedPayload(DecodeError),
    /// The payload is over the link's limit.
    PayloadTooLarge,
    /// A new key found its keyed table full.
    KeyTableFull,
    /// The key level is empty or longer than `KEY_MAX_LEN`.
    KeyInvalid,
}

impl DispatchError {
    /// The reason in a few words, without the decoder's detail (for logs
    /// that take only static strings, such as `defmt`'s).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::UnknownTopic => "no inbound route for topic",
            Self::TopicNotUtf8 => "topic is not UTF-8",
            Self::InvalidTopic => "invalid topic",
            Self::WildcardInTopic => "wildcard in published topic",
            Self::TopicTooLong => "topic too long",
            Self::MalformedPayload(_) => "malformed payload",
            Self::PayloadTooLarge => "payload over the route's limit",
            Self::KeyTableFull => "key table full",
            Self::KeyInvalid => "invalid key",
        }
    }
}

impl fmt::Display for DispatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MalformedPayload(e) => write!(f, "malformed payload: {e}"),
            e => f.write_str(e.as_str()),
        }
    }
}
impl core::error::Error for DispatchError {}

/// A configuration mistake found while building.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The filter is not a valid MQTT filter.
    InvalidFilter(TopicError),
    /// The same filter is already linked to the same target.
    Duplicate,
    /// A keyed route's key level is past the filter's last level.
    KeyLevelOutOfRange,
    /// A keyed route's key level is not a `+` level.
    KeyLevelNotWildcard,
    /// More than `N` routes.
    TooManyRoutes,
    /// The pattern filters need more than `NODES` trie nodes.
    TooManyNodes,
}

/// One configuration mistake: which link (in declaration order) and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigIssue<'a> {
    /// Index of the `link` call, counting from 0.
    pub index: usize,
    /// The filter given.
    pub filter: &'a str,
    /// What is wrong.
    pub error: ConfigError,
}

/// Every configuration mistake of a build (the first [`Self::KEPT`] in
/// full, and the total count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors<'a> {
    /// The first issues, in declaration order.
    pub issues: heapless::Vec<ConfigIssue<'a>, 16>,
    /// How many issues there were in all.
    pub total: usize,
}

impl ConfigErrors<'_> {
    /// Issues kept in full.
    pub const KEPT: usize = 16;
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidFilter(e) => write!(f, "invalid filter: {e}"),
            Self::Duplicate => f.write_str("the same filter is already linked to the same target"),
            Self::KeyLevelOutOfRange => f.write_str("key level past the filter's last level"),
            Self::KeyLevelNotWildcard => f.write_str("key level is not a `+` level"),
            Self::TooManyRoutes => f.write_str("more routes than the table's N"),
            Self::TooManyNodes => {
                f.write_str("the pattern filters need more trie nodes than the table's NODES")
            }
        }
    }
}
impl core::error::Error for ConfigError {}

impl fmt::Display for ConfigErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} inbound configuration error(s)", self.total)?;
        for i in &self.issues {
            write!(f, "; link {} `{}`: {}", i.index, i.filter, i.error)?;
        }
        Ok(())
    }
}
impl core::error::Error for ConfigErrors<'_> {}

const NIL: u16 = u16::MAX;
/// Exact-topic buckets per route slot (see [`Dispatch`]'s `exact`).
const BUCKETS: usize = 4;
const NO_KEY: u8 = u8::MAX;

struct Route<'a, D: ?Sized> {
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
/// [Threading](crate#threading-model)): `dyn Target + Sync` by default, so the
/// table, and a connector future that borrows it, is `Send` when its
/// records are `Sync`; [`LocalDispatch`] (`dyn Target`) for links into
/// `NoopRawMutex` records.
pub struct Dispatch<'a, const N: usize, const NODES: usize, D = dyn Target + Sync + 'a>
where
    D: Target + ?Sized + 'a,
{
    routes: heapless::Vec<Route<'a, D>, N>,
    /// Exact-topic buckets, [`BUCKETS`] per route slot (8 bytes a slot).
    /// With one bucket a slot a full table has about one colliding route
    /// per two lookups, and passing over it reads a `Route` that is rarely
    /// in cache: b1_inbound_dispatch exact at 4096 routes measured 1.14 ×
    /// its 8-route cell with one bucket, 1.10 with two, 1.06–1.09 with four
    /// (AMD EPYC, 2 cores), for 6 bytes more per route slot.
    exact: [[u16; BUCKETS]; N],
    nodes: heapless::Vec<Node<'a>, NODES>,
    edges: [u16; NODES],
    stats: Stats,
    /// Mirror of `stats` others can read ([`Builder::shared_stats`]).
    shared: Option<&'a SharedStats>,
}

/// [`Dispatch`] over links that need not be `Sync` (records over
/// `NoopRawMutex`): for firmware on one executor, or a tokio `LocalSet`.
pub type LocalDispatch<'a, const N: usize, const NODES: usize> =
    Dispatch<'a, N, NODES, dyn Target + 'a>;

/// Declares the links of a [`Dispatch`]; see [`Dispatch::builder`].
pub struct Builder<'a, const N: usize, const NODES: usize, D = dyn Target + Sync + 'a>
where
    D: Target + ?Sized + 'a,
{
    table: Dispatch<'a, N, NODES, D>,
    calls: usize,
    errors: ConfigErrors<'a>,
}

/// An upper bound on the trie nodes a [`Dispatch`] needs for `filters`: its
/// `NODES` parameter. One for the root, plus one per level of each filter
/// with a wildcard (exact filters need none); filters sharing a prefix
/// need fewer. `const`, so the table can be sized from its own filters:
///
/// ```
/// use aimdb_core::inbound::{nodes_for, Dispatch};
/// const FILTERS: [&str; 3] = ["sensors/+/temp", "cmd/#", "dev/7/led"];
/// let b = Dispatch::<3, { nodes_for(&FILTERS) }>::builder();
/// # let _ = b;
/// ```
pub const fn nodes_for(filters: &[&str]) -> usize {
    let mut nodes = 1;
    let mut k = 0;
    while k < filters.len() {
        let b = filters[k].as_bytes();
        let (mut levels, mut wild, mut i) = (1, false, 0);
        while i < b.len() {
            match b[i] {
                b'/' => levels += 1,
                b'+' | b'#' => wild = true,
                _ => {}
            }
            i += 1;
        }
        if wild {
            nodes += levels;
        }
        k += 1;
    }
    nodes
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

impl<'a, const N: usize, const NODES: usize, D: Target + ?Sized + 'a> Dispatch<'a, N, NODES, D> {
    const CHECK: () = assert!(
        N >= 1 && N < NIL as usize && NODES >= 1 && NODES < NIL as usize,
        "Dispatch<N, NODES>: both must be in 1..65535"
    );

    /// Starts declaring links.
    #[allow(clippy::let_unit_value)]
    pub fn builder() -> Builder<'a, N, NODES, D> {
        let () = Self::CHECK;
        let mut nodes = heapless::Vec::new();
        // The root: the level before the first one.
        let _ = nodes.push(Node {
            level: "",
            level_hash: 0,
            parent: NIL,
            next: NIL,
            routes: NIL,
            plus: NIL,
            hash: NIL,
        });
        Builder {
            table: Dispatch {
                routes: heapless::Vec::new(),
                exact: [[NIL; BUCKETS]; N],
                nodes,
                edges: [NIL; NODES],
                stats: Stats::default(),
                shared: None,
            },
            calls: 0,
            errors: ConfigErrors {
                issues: heapless::Vec::new(),
                total: 0,
            },
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
    /// ([`Target::apply_retained`]: by default, those into `Mailbox`
    /// records, so an old command is not executed again at every start)
    /// skip it, counted in [`Stats::retained_ignored`]. Returns the number
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
    pub fn stats(&self) -> &Stats {
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

impl<'a, const N: usize, const NODES: usize, D: Target + ?Sized + 'a> FrameSink
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
    fn stats(&self) -> &Stats {
        Dispatch::stats(self)
    }
}

fn deliver<D: Target + ?Sized>(
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
    fn deliver<const RETAINED: bool, D: Target + ?Sized>(
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

impl<'a, const N: usize, const NODES: usize, D: Target + ?Sized + 'a> Builder<'a, N, NODES, D> {
    /// Links `filter` to `target`. A filter without wildcards is an exact
    /// route; one with `+` or `#` is a pattern route.
    pub fn link(&mut self, filter: &'a str, target: &'a D) -> &mut Self {
        self.add(filter, target, None)
    }

    /// Links a keyed filter: level `key_level` (counting from 0) must be
    /// `+`; its text in each topic is the key passed to `target`.
    pub fn link_keyed(&mut self, filter: &'a str, key_level: usize, target: &'a D) -> &mut Self {
        self.add(filter, target, Some(key_level))
    }

    /// Mirrors the table's [`Stats`] into `shared` on every dispatch, so
    /// other tasks or threads can read them while a connector owns the
    /// table.
    pub fn shared_stats(&mut self, shared: &'a SharedStats) -> &mut Self {
        self.table.shared = Some(shared);
        self
    }

    /// Finishes: the table, or every configuration error at once.
    // Built once at start-up and `no_std` has no `Box`: the large error
    // (every issue, by value) is the point.
    #[allow(clippy::result_large_err)]
    pub fn build(self) -> Result<Dispatch<'a, N, NODES, D>, ConfigErrors<'a>> {
        if self.errors.total == 0 {
            Ok(self.table)
        } else {
            Err(self.errors)
        }
    }

    fn add(&mut self, filter: &'a str, target: &'a D, key: Option<usize>) -> &mut Self {
        let index = self.calls;
        self.calls += 1;
        if let Err(error) = self.try_add(filter, target, key) {
            self.errors.total += 1;
            let _ = self.errors.issues.push(ConfigIssue {
                index,
                filter,
                error,
            });
        }
        self
    }

    fn try_add(
        &mut self,
        filter: &'a str,
        target: &'a D,
        key: Option<usize>,
    ) -> Result<(), ConfigError> {
        let f = Filter::new(filter).map_err(ConfigError::InvalidFilter)?;
        if let Some(k) = key {
            match f.levels().nth(k) {
                None => return Err(ConfigError::KeyLevelOutOfRange),
                Some("+") => {}
                Some(_) => return Err(ConfigError::KeyLevelNotWildcard),
            }
        }
        if self.table.routes.is_full() {
            return Err(ConfigError::TooManyRoutes);
        }
        let hash = topic_hash(filter.as_bytes());
        let list = if f.has_wildcards() {
            List::Node(self.node_for(f)?)
        } else {
            List::Exact(reduce(hash, BUCKETS * N))
        };
        let t = &mut self.table;
        // Duplicate check and `first` flag over the routes already in this
        // bucket or on this node; remember the tail to append after it, so
        // delivery follows declaration order.
        let mut first = true;
        let mut tail = NIL;
        let mut i = t.head(list);
        while i != NIL {
            let r = &t.routes[i as usize];
            if r.filter == filter {
                if same_target(r.target, target) {
                    return Err(ConfigError::Duplicate);
                }
                first = false;
            }
            tail = i;
            i = r.next;
        }
        let id = t.routes.len() as u16;
        let route = Route {
            filter,
            target,
            hash,
            next: NIL,
            key_level: key.map_or(NO_KEY, |k| k as u8),
            first,
        };
        t.routes
            .push(route)
            .map_err(|_| ConfigError::TooManyRoutes)?;
        if tail == NIL {
            t.set_head(list, id);
        } else {
            t.routes[tail as usize].next = id;
        }
        Ok(())
    }

    /// The trie node where `f` ends, creating the missing nodes.
    fn node_for(&mut self, f: Filter<'a>) -> Result<u16, ConfigError> {
        let t = &mut self.table;
        let mut id = 0u16;
        for level in f.levels() {
            let existing = match level {
                "+" => t.nodes[id as usize].plus,
                "#" => t.nodes[id as usize].hash,
                _ => t.child(id, level),
            };
            id = if existing != NIL {
                existing
            } else {
                t.new_node(id, level)?
            };
        }
        Ok(id)
    }
}

#[derive(Clone, Copy)]
enum List {
    Exact(usize),
    Node(u16),
}

impl<'a, const N: usize, const NODES: usize, D: Target + ?Sized + 'a> Dispatch<'a, N, NODES, D> {
    fn head(&self, l: List) -> u16 {
        match l {
            List::Exact(b) => self.exact[b / BUCKETS][b % BUCKETS],
            List::Node(n) => self.nodes[n as usize].routes,
        }
    }

    fn set_head(&mut self, l: List, id: u16) {
        match l {
            List::Exact(b) => self.exact[b / BUCKETS][b % BUCKETS] = id,
            List::Node(n) => self.nodes[n as usize].routes = id,
        }
    }

    fn child(&self, parent: u16, level: &str) -> u16 {
        let lh = fnv1a(level.as_bytes());
        let mut c = self.edges[reduce(edge_hash(parent, lh), NODES)];
        while c != NIL {
            let n = &self.nodes[c as usize];
            if n.parent == parent && n.level_hash == lh && n.level == level {
                return c;
            }
            c = n.next;
        }
        NIL
    }

    fn new_node(&mut self, parent: u16, level: &'a str) -> Result<u16, ConfigError> {
        let id = self.nodes.len() as u16;
        let level_hash = fnv1a(level.as_bytes());
        let bucket = reduce(edge_hash(parent, level_hash), NODES);
        let literal = level != "+" && level != "#";
        self.nodes
            .push(Node {
                level,
                level_hash,
                parent,
                next: if literal { self.edges[bucket] } else { NIL },
                routes: NIL,
                plus: NIL,
                hash: NIL,
            })
            .map_err(|_| ConfigError::TooManyNodes)?;
        let p = &mut self.nodes[parent as usize];
        match level {
            "+" => p.plus = id,
            "#" => p.hash = id,
            _ => self.edges[bucket] = id,
        }
        Ok(id)
    }
}

impl<'a, const N: usize, const NODES: usize, D: Target + ?Sized + 'a> fmt::Debug
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

impl<'a, const N: usize, const NODES: usize, D: Target + ?Sized + 'a> fmt::Debug
    for Builder<'a, N, NODES, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("table", &self.table)
            .field("errors", &self.errors.total)
            .finish()
    }
}
