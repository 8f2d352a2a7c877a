//! Remote access (feature `remote`): records that describe themselves, and
//! a responder that answers requests about them over the links a node
//! already runs. `no_std`, no heap, no allocation per request.
//!
//! # Descriptions
//!
//! A [`Description`] names a record, its kind and capacity, its value
//! type's schema (`postcard-schema`'s [`Schema`] derive: a `const` in
//! flash), the topics it is routed on, its codec, and whether it may be
//! written remotely. A node lists the records it wants seen in one
//! `static` table; records that are not described cost nothing.
//!
//! ```
//! # #[cfg(feature = "remote")] {
//! use aimdb_core::record::{Latest, Record, Ring};
//! use aimdb_core::remote::Description;
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//!
//! #[derive(serde::Serialize, serde::Deserialize, postcard_schema::Schema, Clone)]
//! struct Reading { seq: u32, millideg: i32 }
//!
//! static READINGS: Record<Cs, Ring<Reading, 32>, 1> = Record::new("readings");
//! static LED: Record<Cs, Latest<bool>, 1> = Record::new("led");
//! static TABLE: [Description; 2] = [
//!     Description::of(&READINGS).topics(&["dev/readings"]),
//!     Description::of(&LED).topics(&["dev/led"]).writable(),
//! ];
//! # }
//! ```
//!
//! # The responder
//!
//! A [`Responder`] is linked into a connector's tables like a record: its
//! request side is an inbound route ([`inbound::Route`](crate::inbound::Route))
//! on a request topic, its answer side an outbound route
//! ([`Responder::requests`] with the [`Responder::answers`] codec) on a
//! response topic. So the same code serves a framed link (UART, TCP) and
//! MQTT, and answers go out through the connector's ordinary outbound
//! path: after the urgent routes, in turn with the other normal routes,
//! never delaying them by more than one answer per pull.
//!
//! - It holds **one** request at a time (`N` bytes). Requests that
//!   arrive while one is pending are counted (`busy`), and the latest of
//!   them is answered [`RequestError::Busy`] (its id is kept for that); a
//!   request over `N` bytes is refused by the inbound table
//!   (`PayloadTooLarge`) and counted there. A flood therefore costs one
//!   answer per pull, never a queue.
//! - A request runs when the answer side takes it (the connector's
//!   outbound task pulls [`Requests`]): its write is done and its watch
//!   changed then; [`Answers`] only encodes the answer. Each is bounded
//!   work: one record encoded or decoded, or one page of the table.
//! - A request is one postcard [`Request`], whole: one that does not
//!   decode, or has bytes left over behind it, is not run; it is
//!   answered [`RequestError::Malformed`] and counted (`malformed`).
//! - A `get` (or a watch's value) needs an answer buffer of the value's
//!   size plus at most 23 bytes of header (fewer for small ids and write
//!   counts); a value that does not fit is answered
//!   [`RequestError::TooLarge`].
//! - Writes go only to records described [`writable`](Description::writable);
//!   any other is refused with [`RequestError::NotWritable`] and nothing changes.
//!
//! - A **watch** ([`Op::Watch`]) streams a record's values as they are
//!   written: the current value at once, then the newest value after
//!   writes (each answer's `writes` says how many writes it covers), at
//!   most `credit` answers, then [`proto::Body::Ended`]. A watch request
//!   for a record watched already renews it (new id and credit, answered
//!   [`proto::Body::Renewed`]; what it sent is not sent again). It holds one
//!   reader slot of the record (give a watchable record one more reader,
//!   `R`; a record without a free slot answers
//!   [`RequestError::NotWatchable`]); the slot never takes a value, so a
//!   `Mailbox` command stays for its consumer. At most [`WATCHES`]
//!   records are watched at once. A watch ends with its credit, with
//!   [`Op::Unwatch`], and with the link: when the connector reconnects
//!   (the answer route is replayed) or a new answer route is made. The
//!   credit is the lease a client renews: one that vanished (a tool
//!   killed on the far side of a broker) costs at most its credit.
//! - `stats` reports each record's writes and replaced writes, and the
//!   connectors handed to [`Responder::with_connectors`]: their counters
//!   ([`LinkCounters`]), link state and, for one with a durable backlog,
//!   its counters ([`BacklogCounters`]: depth, how far behind, drops,
//!   erases).
//! - On MQTT, [`Responder::manifest`] publishes a retained JSON manifest
//!   ([`ManifestJson`]) of the records and of the connectors with a
//!   durable backlog, so a plain MQTT client sees what the node has
//!   without speaking this protocol.
//!
//! The wire format is postcard: [`Request`] in, [`Response`] out, each
//! with the client's correlation id, on the topics [`proto`] names
//! ([`proto::REQUEST`], [`proto::RESPONSE`]). Hosts decode responses as
//! `Response<Body<'_, Host>>` ([`proto::Host`], feature `alloc`),
//! borrowing from the answer's bytes.
//!
//! # The schema check
//!
//! postcard carries no field names, so a host whose copy of a device's
//! type has drifted (a field added, a field's type changed) may decode
//! the device's values wrongly without an error. A host that links a
//! device's record as `T` can refuse that:
//!
//! - A [`Checked`] link wraps the inbound link into the host's record
//!   with the device's record name and `T`'s [`schema_hash`]. It hands a
//!   payload on only once the check has found the device's schema equal
//!   to `T`'s ([`Verdict::Match`]); before that the payload is refused
//!   unread as [`DispatchError::SchemaUnverified`], and after a
//!   mismatch, or when the device does not describe the record, as
//!   [`DispatchError::SchemaMismatch`], each counted by the dispatch.
//!   `no_std`, no allocation.
//! - A [`Verifier`] (feature `alloc`) runs the check. It follows the
//!   connector's link-state record: when the link comes up it sends a
//!   [`Op::List`] request, reads every page of the answer and sets each
//!   check; when the link goes down every check is unverified again
//!   (another device may come back). Link [`Verifier::asks`] with the
//!   `Postcard` codec as an outbound route on the request topic, and the
//!   verifier as an inbound route on the response topic.
//!
//! ```
//! # #[cfg(feature = "alloc")] {
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::{Dispatch, Link};
//! use aimdb_core::presence::LinkState;
//! use aimdb_core::outbound;
//! use aimdb_core::record::{Latest, Record, Ring};
//! use aimdb_core::remote::{Check, Checked, Verdict, Verifier};
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//!
//! #[derive(serde::Serialize, serde::Deserialize, postcard_schema::Schema, Clone)]
//! struct Reading { seq: u32, millideg: i32 }
//!
//! static READINGS: Record<Cs, Ring<Reading, 8>, 1> = Record::new("dev_readings");
//! static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("link"); // Framed::with_link
//! static CHECKED: Checked<Link<'static, Record<Cs, Ring<Reading, 8>, 1>, Postcard, Reading>> =
//!     Checked::new("readings", Link::new(&READINGS, Postcard));
//! static CHECKS: [&(dyn Check + Sync); 1] = [&CHECKED];
//! static VERIFIER: Verifier<'static, Cs> = Verifier::new(&CHECKS, 0x5c00_0000);
//!
//! let mut b = Dispatch::<4, 4>::builder();
//! b.link("dev/readings", &CHECKED).link("aimdb/rsp", &VERIFIER);
//! let dispatch = b.build().unwrap();
//! let asks = outbound::Link::new(VERIFIER.asks(LINK.subscribe().unwrap()), "aimdb/req", Postcard);
//! assert_eq!(CHECKED.verdict(), Verdict::Unverified);
//! # let _ = (dispatch, asks);
//! # }
//! ```
#![forbid(unsafe_code)]

mod check;
mod manifest;
pub mod proto;

pub use manifest::{Manifest, ManifestJson, Manifests};

#[cfg(feature = "alloc")]
pub use check::{Asks, Verifier, VerifierStats};
pub use check::{Check, Checked, Typed, Verdict};

use core::cell::RefCell;
use core::task::{Context, Poll, Waker};

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
pub use postcard_schema::schema::NamedType;
pub use postcard_schema::Schema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{Decode, Encode, EncodeError};
use crate::connector::DispatchError;
use crate::counters::bump;
use crate::presence::LinkState;
use crate::record::{Buffer, Kind, Latest, Record, RecvError, Source};
use proto::{Body, Node, Response};
pub use proto::{Codec, Op, Request, RequestError};

/// Type-erased access to one record: what a [`Description`] reaches it
/// through. Implemented by every [`Record`] whose value type is postcard
/// (de)serializable.
pub trait Access {
    /// Encodes the newest value (postcard) into `out`: its length, or
    /// `None` if the record holds none.
    fn get(&self, out: &mut [u8]) -> Result<Option<usize>, EncodeError>;
    /// Decodes `bytes` (postcard, the whole of them) and writes the value;
    /// bytes that do not decode, or are left over, write nothing.
    fn set(&self, bytes: &[u8]) -> Result<(), RequestError>;
    /// Writes so far.
    fn writes(&self) -> u64;
    /// Writes that replaced a value no reader took.
    fn replaced(&self) -> u64;
    /// Claims a reader slot for a watch (`None`: none free). The slot
    /// never takes a value; it is only woken by writes.
    fn watch(&self) -> Option<u8>;
    /// For watch slot `slot`: the write count if it is not `seen`, else
    /// `None` with `waker` registered for the next write.
    fn poll_changed(&self, slot: u8, seen: u64, waker: &Waker) -> Option<u64>;
    /// Releases a watch slot.
    fn unwatch(&self, slot: u8);
}

impl<M, B, const R: usize> Access for Record<M, B, R>
where
    M: RawMutex,
    B: Buffer,
    B::Item: Serialize + DeserializeOwned,
{
    fn get(&self, out: &mut [u8]) -> Result<Option<usize>, EncodeError> {
        self.with_newest(|v| v.map(|v| crate::codec::Postcard.encode(v, out)).transpose())
    }

    fn set(&self, bytes: &[u8]) -> Result<(), RequestError> {
        // As every inbound link decodes: left-over bytes are a value of
        // another type (a host whose type drifted), not one to write.
        let v: B::Item = crate::codec::Postcard
            .decode(bytes)
            .map_err(|_| RequestError::Malformed)?;
        self.write(v);
        Ok(())
    }

    fn writes(&self) -> u64 {
        Record::writes(self)
    }

    fn replaced(&self) -> u64 {
        Record::replaced(self)
    }

    fn watch(&self) -> Option<u8> {
        self.subscribe_slot().ok()
    }

    fn poll_changed(&self, slot: u8, seen: u64, waker: &Waker) -> Option<u64> {
        Record::poll_changed(self, usize::from(slot), seen, waker)
    }

    fn unwatch(&self, slot: u8) {
        self.unsubscribe(usize::from(slot));
    }
}

/// A connector's counters as `stats` reports them (the common subset of
/// the connectors' own, richer counters).
///
/// On the wire an array of six varints, in field order (one loop on a
/// Cortex-M rather than six inlined encodings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "[u32; 6]")]
pub struct LinkCounters {
    /// Messages sent.
    pub sent: u32,
    /// Messages received and handed to the dispatch.
    pub received: u32,
    /// Of those, the ones the dispatch rejected.
    pub rejected: u32,
    /// Outbound messages dropped (too large for the buffers).
    pub dropped: u32,
    /// Values outbound `Ring` routes lost before they could be sent.
    pub lagged: u32,
    /// Successful connections after the first.
    pub reconnects: u32,
}

impl From<LinkCounters> for [u32; 6] {
    fn from(c: LinkCounters) -> Self {
        [
            c.sent,
            c.received,
            c.rejected,
            c.dropped,
            c.lagged,
            c.reconnects,
        ]
    }
}

impl From<[u32; 6]> for LinkCounters {
    fn from([sent, received, rejected, dropped, lagged, reconnects]: [u32; 6]) -> Self {
        Self {
            sent,
            received,
            rejected,
            dropped,
            lagged,
            reconnects,
        }
    }
}

impl Serialize for LinkCounters {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        six(<[u32; 6]>::from(*self), s)
    }
}

/// A connector's counters, readable from another task: implemented by
/// the connectors' shared counters (`aimdb-connectors`, feature `remote`).
pub trait Counted {
    /// The counters now.
    fn link_counters(&self) -> LinkCounters;
}

/// A durable backlog's counters, as `stats` reports them beside its
/// connector's (feature `backlog` of `aimdb-connectors` implements
/// [`BacklogView`] for its counters).
///
/// On the wire an array of six varints, in field order: the same
/// encoding as [`LinkCounters`] (one copy of it on a device).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "[u32; 6]")]
pub struct BacklogCounters {
    /// Values stored now, not yet acknowledged.
    pub depth: u32,
    /// Bytes they take.
    pub bytes: u32,
    /// How far behind the oldest stored value is, in milliseconds.
    pub behind_ms: u32,
    /// Values lost for want of room: the oldest dropped, or the newest
    /// refused.
    pub dropped: u32,
    /// Flash pages erased.
    pub erases: u32,
    /// Flash operations that failed.
    pub flash_errors: u32,
}

impl From<BacklogCounters> for [u32; 6] {
    fn from(c: BacklogCounters) -> Self {
        [
            c.depth,
            c.bytes,
            c.behind_ms,
            c.dropped,
            c.erases,
            c.flash_errors,
        ]
    }
}

impl From<[u32; 6]> for BacklogCounters {
    fn from([depth, bytes, behind_ms, dropped, erases, flash_errors]: [u32; 6]) -> Self {
        Self {
            depth,
            bytes,
            behind_ms,
            dropped,
            erases,
            flash_errors,
        }
    }
}

impl Serialize for BacklogCounters {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        six(<[u32; 6]>::from(*self), s)
    }
}

/// Six counters as six varints: one copy for [`LinkCounters`] and
/// [`BacklogCounters`] on a device, not one inlined in each.
#[inline(never)]
fn six<S: serde::Serializer>(v: [u32; 6], s: S) -> Result<S::Ok, S::Error> {
    v.serialize(s)
}

/// A durable backlog's counters, read by `stats`.
pub trait BacklogView {
    /// The counters now.
    fn backlog_counters(&self) -> BacklogCounters;
}

/// A link-state record, read without a reader slot.
pub trait LinkView {
    /// The state now (`None` before the connector first wrote it).
    fn link_state(&self) -> Option<LinkState>;
}

impl<M: RawMutex, const R: usize> LinkView for Record<M, Latest<LinkState>, R> {
    fn link_state(&self) -> Option<LinkState> {
        self.latest()
    }
}

/// A connector as `stats` lists it: a name, its shared counters and,
/// optionally, its link-state record. Build with [`Connector::new`] in a
/// `static` table and hand it to [`Responder::with_connectors`].
#[derive(Clone, Copy)]
pub struct Connector {
    pub(crate) name: &'static str,
    pub(crate) counters: &'static (dyn Counted + Sync),
    pub(crate) link: Option<&'static (dyn LinkView + Sync)>,
    pub(crate) backlog: Option<&'static (dyn BacklogView + Sync)>,
}

impl Connector {
    /// A connector named `name` with `counters`.
    pub const fn new(name: &'static str, counters: &'static (dyn Counted + Sync)) -> Self {
        Self {
            name,
            counters,
            link: None,
            backlog: None,
        }
    }

    /// Its durable backlog's counters, reported beside its own.
    #[must_use]
    pub const fn backlog(mut self, backlog: &'static (dyn BacklogView + Sync)) -> Self {
        self.backlog = Some(backlog);
        self
    }

    /// Its link-state record (the one the connector's `with_link` writes).
    #[must_use]
    pub const fn link(mut self, link: &'static (dyn LinkView + Sync)) -> Self {
        self.link = Some(link);
        self
    }
}

impl core::fmt::Debug for Connector {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connector")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What a node says about one record. Build with [`Description::of`] in a
/// `static` table.
#[derive(Clone, Copy)]
pub struct Description {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) capacity: u16,
    pub(crate) schema: &'static NamedType,
    pub(crate) schema_hash: [u8; 8],
    pub(crate) topics: &'static [&'static str],
    pub(crate) codec: Codec,
    pub(crate) writable: bool,
    pub(crate) access: &'static (dyn Access + Sync),
}

impl Description {
    /// Describes `record`: its name, kind, capacity and value schema;
    /// routed on no topic, postcard, read-only.
    pub const fn of<M, B, const R: usize>(record: &'static Record<M, B, R>) -> Self
    where
        M: RawMutex + Sync,
        B: Buffer + Send,
        B::Item: Serialize + DeserializeOwned + Schema + Send,
    {
        let capacity = if B::CAPACITY > u16::MAX as usize {
            u16::MAX
        } else {
            B::CAPACITY as u16
        };
        Self {
            name: record.name(),
            kind: B::KIND,
            capacity,
            schema: B::Item::SCHEMA,
            schema_hash: schema_hash::<B::Item>(),
            topics: &[],
            codec: Codec::Postcard,
            writable: false,
            access: record,
        }
    }

    /// The topics the record is routed on (for the listing; routing is
    /// the tables' business).
    #[must_use]
    pub const fn topics(mut self, topics: &'static [&'static str]) -> Self {
        self.topics = topics;
        self
    }

    /// The payload codec of its routes.
    #[must_use]
    pub const fn codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// Remote `set` allowed (read-only otherwise).
    #[must_use]
    pub const fn writable(mut self) -> Self {
        self.writable = true;
        self
    }

    /// The record's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The 8-byte hash of the value type's schema: equal hashes, equal
    /// wire format.
    pub const fn schema_hash(&self) -> [u8; 8] {
        self.schema_hash
    }
}

impl core::fmt::Debug for Description {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Description")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("capacity", &self.capacity)
            .field("topics", &self.topics)
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

/// The schema hash of `T`: FNV-1a over its postcard-schema, as
/// `postcard-schema`'s keys compute it (with an empty path), so a host
/// compares its own `T` with a node's description without the schema.
pub const fn schema_hash<T: Schema + ?Sized>() -> [u8; 8] {
    postcard_schema::key::hash::fnv1a64::hash_ty_path::<T>("")
}

crate::counter_set! {
    /// The atomics behind [`ResponderStats`] (one writer: the connector
    /// task that owns the tables).
    struct Counters;
    /// Live counters of one [`Responder`] (also in every `stats` answer).
    #[derive(Serialize, serde::Deserialize)]
    pub struct ResponderStats {
        /// Requests taken into the slot.
        requests,
        /// Answers encoded (errors included).
        answered,
        /// Requests that did not decode (answered [`RequestError::Malformed`] when
        /// their id could be read).
        malformed,
        /// Requests that found the slot full (answered [`RequestError::Busy`]).
        busy,
        /// `set` refused: the record is not writable.
        denied,
        /// Watch updates sent.
        updates,
    }
}

/// Most records watched at once, over all clients of one responder.
pub const WATCHES: usize = 4;

/// One running watch.
#[derive(Clone, Copy)]
struct Watch {
    /// Index in the table.
    index: u16,
    /// The record's reader slot.
    slot: u8,
    /// The id updates carry.
    id: u32,
    /// Updates left.
    credit: u32,
    /// Writes covered by the last value sent.
    seen: u64,
}

/// What the request slot holds.
struct Slot<const N: usize> {
    request: heapless::Vec<u8, N>,
    pending: bool,
    /// The id of a request refused because the slot was full.
    busy: Option<u32>,
    waker: Option<Waker>,
    /// Running watches. Only the answer side (the connector's outbound
    /// task) changes them.
    watches: [Option<Watch>; WATCHES],
    /// The id of a watch whose end is to be told (one at most: see
    /// `Responder::tell_end`).
    ended: Option<u32>,
    /// Where the next look for a changed watch starts (fairness).
    next: u8,
}

/// One answer due, handed from [`Requests`] to [`Answers`]. The request
/// behind it has run when it is handed out (its write done, its watch
/// started, renewed or stopped); encoding it only reads.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// The id the answer carries.
    id: u32,
    answer: Answer,
}

/// What a [`Job`] answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Error(RequestError),
    List {
        from: u16,
    },
    Stats {
        from: u16,
    },
    /// Table entry `i`'s description.
    Describe(u16),
    /// Table entry `i`'s newest value.
    Value(u16),
    Written,
    Renewed,
    Ended,
}

impl Job {
    const fn new(id: u32, answer: Answer) -> Self {
        Self { id, answer }
    }
}

/// Answers remote requests about the records of `table`, one at a time,
/// with requests of at most `N` bytes. See the [module docs](self).
pub struct Responder<M: RawMutex, const N: usize> {
    table: &'static [Description],
    connectors: &'static [Connector],
    slot: Mutex<M, RefCell<Slot<N>>>,
    counters: Counters,
}

impl<M: RawMutex, const N: usize> Responder<M, N> {
    /// A responder for `table`.
    pub const fn new(table: &'static [Description]) -> Self {
        Self {
            table,
            connectors: &[],
            slot: Mutex::new(RefCell::new(Slot {
                request: heapless::Vec::new(),
                pending: false,
                busy: None,
                waker: None,
                watches: [None; WATCHES],
                ended: None,
                next: 0,
            })),
            counters: Counters::new(),
        }
    }

    /// The connectors `stats` reports (none by default).
    #[must_use]
    pub const fn with_connectors(mut self, connectors: &'static [Connector]) -> Self {
        self.connectors = connectors;
        self
    }

    /// The described records.
    pub fn table(&self) -> &'static [Description] {
        self.table
    }

    /// The counters.
    pub fn stats(&self) -> ResponderStats {
        self.counters.snapshot()
    }

    /// The answer side's source: link it with [`Self::answers`] as an
    /// outbound route on the response topic. A new answer route is a new
    /// link: the watches of the previous one end.
    pub fn requests(&self) -> Requests<'_, M, N> {
        self.end_watches();
        Requests(self)
    }

    /// The node's manifest, for MQTT: link it as an outbound route with
    /// [`ManifestJson`] on a topic beside the request topic
    /// (`<prefix>/aimdb/manifest`); it is retained and re-published at
    /// each connection, so `mosquitto_sub -t '+/aimdb/manifest'` shows every
    /// node's records with kinds, types, topics and schema hashes, and
    /// which of its connectors ([`Self::with_connectors`]) keep a durable
    /// backlog.
    pub fn manifest(&self) -> Manifests {
        Manifests::new(self.table, self.connectors)
    }

    /// Records watched now.
    pub fn watching(&self) -> usize {
        self.slot
            .lock(|s| s.borrow().watches.iter().flatten().count())
    }

    /// Ends every watch silently (the link they were for is gone).
    fn end_watches(&self) {
        let mut gone = [None; WATCHES];
        self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            for (g, w) in gone.iter_mut().zip(s.watches.iter_mut()) {
                *g = w.take();
            }
            s.ended = None;
        });
        for w in gone.into_iter().flatten() {
            self.table[usize::from(w.index)].access.unwatch(w.slot);
        }
    }

    /// Queues the end notice of the watch with `id`. [`Requests`] sends
    /// a queued notice before it runs anything that queues one, and
    /// nothing queues two, so the one place is always free.
    fn tell_end(&self, id: u32) {
        self.slot.lock(|s| s.borrow_mut().ended = Some(id));
    }

    /// Runs one request's bytes as the answer side does when it takes
    /// them from the slot: the answer due (encode it with
    /// [`Self::answers`]). Not counted as a request or an answer. For
    /// measuring the node's work per request (the on-target bench);
    /// requests reach a node through [`Self::requests`].
    #[doc(hidden)]
    pub fn run_request(&self, bytes: &[u8]) -> Job {
        self.run(bytes)
    }

    /// Runs one request (its write, its watch change): the answer due.
    fn run(&self, bytes: &[u8]) -> Job {
        let request = match postcard::take_from_bytes::<Request<'_>>(bytes) {
            Ok((r, [])) => r,
            // Undecodable, or bytes left over behind it (a request of
            // another shape, from a client whose types drifted): not run.
            _ => {
                bump(&self.counters.malformed, 1);
                // The id is the first field: answer it if it reads.
                let id = postcard::take_from_bytes::<u32>(bytes).map_or(0, |(id, _)| id);
                return Job::new(id, Answer::Error(RequestError::Malformed));
            }
        };
        const UNKNOWN: Answer = Answer::Error(RequestError::UnknownRecord);
        let id = request.id;
        let find = |name: &str| {
            self.table
                .iter()
                .position(|d| d.name == name)
                .map(|i| i as u16)
        };
        let answer = match request.op {
            Op::List { from } => Answer::List { from },
            Op::Stats { from } => Answer::Stats { from },
            Op::Describe { record } => find(record).map_or(UNKNOWN, Answer::Describe),
            Op::Get { record } => find(record).map_or(UNKNOWN, Answer::Value),
            Op::Set { record, value } => find(record).map_or(UNKNOWN, |i| self.set(i, value)),
            Op::Watch { record, credit } => match find(record) {
                None => UNKNOWN,
                Some(i) if credit == 0 => self.unwatch(id, i),
                Some(i) => self.watch(id, i, credit),
            },
            Op::Unwatch { record } => find(record).map_or(UNKNOWN, |i| self.unwatch(id, i)),
        };
        Job::new(id, answer)
    }

    /// A `set` of table entry `index`.
    fn set(&self, index: u16, value: &[u8]) -> Answer {
        let d = &self.table[usize::from(index)];
        if !d.writable {
            bump(&self.counters.denied, 1);
            return Answer::Error(RequestError::NotWritable);
        }
        match d.access.set(value) {
            Ok(()) => Answer::Written,
            Err(e) => Answer::Error(e),
        }
    }

    /// A watch request on table entry `index` (`credit` above 0).
    fn watch(&self, id: u32, index: u16, credit: u32) -> Answer {
        enum Step {
            Renewed,
            New(usize),
            Full,
        }
        let step = self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            if let Some(w) = s.watches.iter_mut().flatten().find(|w| w.index == index) {
                w.id = id;
                w.credit = credit;
                return Step::Renewed;
            }
            s.watches
                .iter()
                .position(Option::is_none)
                .map_or(Step::Full, Step::New)
        });
        let k = match step {
            // Its values were sent; only newer ones will be.
            Step::Renewed => return Answer::Renewed,
            Step::Full => return Answer::Error(RequestError::Busy),
            Step::New(k) => k,
        };
        let d = &self.table[usize::from(index)];
        let Some(slot) = d.access.watch() else {
            return Answer::Error(RequestError::NotWatchable);
        };
        let seen = d.access.writes();
        self.slot.lock(|s| {
            s.borrow_mut().watches[k] = Some(Watch {
                index,
                slot,
                id,
                credit,
                seen,
            });
        });
        // The current value, under the watch's id.
        Answer::Value(index)
    }

    /// Stops the watch on table entry `index`, if one runs.
    fn unwatch(&self, id: u32, index: u16) -> Answer {
        let w = self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            let k = s
                .watches
                .iter()
                .position(|w| w.is_some_and(|w| w.index == index))?;
            s.watches[k].take()
        });
        if let Some(w) = w {
            self.table[usize::from(index)].access.unwatch(w.slot);
            if w.id != id {
                // The watch's own stream ends too.
                self.tell_end(w.id);
            }
        }
        Answer::Ended
    }

    /// Watch `w` (at `k`) saw writes: it takes one credit (its last ends
    /// it), its newest value is due, and the next look for a changed
    /// watch starts after it.
    fn update(&self, k: usize, w: Watch) -> Job {
        bump(&self.counters.updates, 1);
        let d = &self.table[usize::from(w.index)];
        let writes = d.access.writes();
        let last = w.credit <= 1;
        self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            s.next = ((k + 1) % WATCHES) as u8;
            if last {
                s.watches[k] = None;
            } else if let Some(x) = s.watches[k].as_mut() {
                x.credit -= 1;
                x.seen = writes;
            }
        });
        if last {
            d.access.unwatch(w.slot);
            self.tell_end(w.id);
        }
        Job::new(w.id, Answer::Value(w.index))
    }

    /// The answer side's codec (see [`Self::requests`]).
    pub fn answers(&self) -> Answers<'_, M, N> {
        Answers(self)
    }

    /// Encodes `job`'s answer into `buf` (reads records and counters,
    /// changes nothing).
    fn encode(&self, job: &Job, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let (id, table) = (job.id, self.table);
        let total = table.len() as u16;
        match job.answer {
            Answer::Error(e) => respond(buf, id, Err(e)),
            Answer::List { from } => {
                let from = usize::from(from).min(table.len());
                page(buf, |n| Response {
                    id,
                    result: Ok(Body::List {
                        total,
                        from: from as u16,
                        entries: proto::EntriesRef(&table[from..(from + n).min(table.len())]),
                    }),
                })
            }
            Answer::Stats { from } => {
                let from = usize::from(from).min(table.len());
                let connectors = if from == 0 { self.connectors } else { &[] };
                page(buf, |n| Response {
                    id,
                    result: Ok(Body::Stats {
                        total,
                        from: from as u16,
                        entries: proto::StatsRef(&table[from..(from + n).min(table.len())]),
                        connectors: proto::ConnectorsRef(connectors),
                        responder: self.stats(),
                    }),
                })
            }
            Answer::Describe(i) => respond(
                buf,
                id,
                Ok(Body::Describe(proto::Info::of(&table[usize::from(i)]))),
            ),
            Answer::Value(i) => get(buf, id, &table[usize::from(i)]),
            Answer::Written => respond(buf, id, Ok(Body::Written)),
            Answer::Renewed => respond(buf, id, Ok(Body::Renewed)),
            Answer::Ended => respond(buf, id, Ok(Body::Ended)),
        }
    }
}

/// Encodes `response(n)` with the largest `n` (at most [`proto::PAGE`])
/// whose encoding fits `buf`; at least one entry, else `TooLarge`.
fn page<'a>(
    buf: &mut [u8],
    response: impl Fn(usize) -> Response<Body<'a, Node>>,
) -> Result<usize, EncodeError> {
    let mut n = proto::PAGE;
    loop {
        let r = response(n);
        match crate::codec::Postcard.encode(&r, buf) {
            Ok(len) => return Ok(len),
            Err(EncodeError::BufferTooSmall) if n > 1 => n -= 1,
            Err(_) => return respond(buf, r.id, Err(RequestError::TooLarge)),
        }
    }
}

/// Encodes one response; one that does not fit becomes `TooLarge`.
fn respond(
    buf: &mut [u8],
    id: u32,
    result: Result<Body<'_, Node>, RequestError>,
) -> Result<usize, EncodeError> {
    match crate::codec::Postcard.encode(&Response { id, result }, buf) {
        Err(EncodeError::BufferTooSmall) => crate::codec::Postcard.encode(
            &Response::<Body<'_, Node>> {
                id,
                result: Err(RequestError::TooLarge),
            },
            buf,
        ),
        r => r,
    }
}

/// The most bytes a `Value` response's header takes: id (5), result,
/// body and option tags (3), writes (10) and length (5: answer buffers
/// under 32 GiB) as varints.
const VALUE_HEADER_MAX: usize = 5 + 3 + 10 + 5;

/// A `get`: the value is encoded straight into `buf` behind room for the
/// header, then the header is written in front of it (no second buffer).
/// The room is what the header of this id and write count takes at most
/// with a value as long as `buf`, so small buffers carry small values.
fn get(buf: &mut [u8], id: u32, d: &Description) -> Result<usize, EncodeError> {
    let writes = d.access.writes();
    let room = proto::ValueHeader::room(id, writes, buf.len());
    get_behind(buf, id, d, writes, room)
        .unwrap_or_else(|| respond(buf, id, Err(RequestError::TooLarge)))
}

/// The answer to a `get` with the value encoded behind `room` bytes;
/// `None` if the value does not fit there.
#[inline(always)]
fn get_behind(
    buf: &mut [u8],
    id: u32,
    d: &Description,
    writes: u64,
    room: usize,
) -> Option<Result<usize, EncodeError>> {
    match d.access.get(buf.get_mut(room..)?) {
        Ok(Some(n)) => Some(value_header(buf, id, writes, room, n)),
        Ok(None) => Some(respond(
            buf,
            id,
            Ok(Body::Value {
                writes,
                value: None,
            }),
        )),
        Err(_) => None,
    }
}

/// Writes the header of a `Value` answer whose `n`-byte value sits at
/// `room` in front of it: the answer's length.
#[inline(always)]
fn value_header(
    buf: &mut [u8],
    id: u32,
    writes: u64,
    room: usize,
    n: usize,
) -> Result<usize, EncodeError> {
    let mut header = [0u8; VALUE_HEADER_MAX];
    let h = proto::ValueHeader { id, writes, len: n }
        .encode(&mut header)
        .ok_or(EncodeError::BufferTooSmall)?;
    buf.copy_within(room..room + n, h);
    buf[..h].copy_from_slice(&header[..h]);
    Ok(h + n)
}

impl<M: RawMutex, const N: usize> crate::inbound::Route for Responder<M, N> {
    fn name(&self) -> &'static str {
        "aimdb/remote"
    }

    fn max_payload(&self) -> usize {
        N
    }

    fn deliver(&self, _key: Option<&str>, payload: &[u8]) -> Result<(), DispatchError> {
        if payload.len() > N {
            return Err(DispatchError::PayloadTooLarge);
        }
        let waker = self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            if s.pending {
                bump(&self.counters.busy, 1);
                let id = postcard::take_from_bytes::<u32>(payload).map_or(0, |(id, _)| id);
                s.busy = Some(id);
            } else {
                bump(&self.counters.requests, 1);
                s.request.clear();
                // Fits: checked against N above.
                let _ = s.request.extend_from_slice(payload);
                s.pending = true;
            }
            s.waker.take()
        });
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// A request kept by a broker is not answered again at every start.
    fn apply_retained(&self) -> bool {
        false
    }
}

/// The responder's pending work, as an outbound [`Source`]: receiving a
/// [`Job`] runs the request behind it.
pub struct Requests<'r, M: RawMutex, const N: usize>(&'r Responder<M, N>);

/// What [`Requests`] found in the slot.
enum Due<const N: usize> {
    Job(Job),
    Request(heapless::Vec<u8, N>),
    Nothing,
}

impl<M: RawMutex, const N: usize> Source for Requests<'_, M, N> {
    type Item = Job;

    fn name(&self) -> &'static str {
        "aimdb/remote"
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Job, RecvError>> {
        let mut old = None;
        let r = self.0;
        let (due, watches, next) = r.slot.lock(|s| {
            let mut s = s.borrow_mut();
            let none = [None; WATCHES];
            if let Some(id) = s.busy.take() {
                let busy = Answer::Error(RequestError::Busy);
                return (Due::Job(Job::new(id, busy)), none, 0);
            }
            // End notices before anything that queues one (see `tell_end`).
            if let Some(id) = s.ended.take() {
                return (Due::Job(Job::new(id, Answer::Ended)), none, 0);
            }
            if s.pending {
                s.pending = false;
                return (Due::Request(core::mem::take(&mut s.request)), none, 0);
            }
            match &s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => old = s.waker.replace(cx.waker().clone()),
            }
            (Due::Nothing, s.watches, s.next)
        });
        drop(old);
        let job = match due {
            Due::Job(j) => Some(j),
            Due::Request(bytes) => Some(r.run(&bytes)),
            // Requests first; then the first changed watch from `next`
            // round. Each look registers the waker with the record, so a
            // write after it wakes this route.
            Due::Nothing => (0..WATCHES).find_map(|n| {
                let k = (usize::from(next) + n) % WATCHES;
                let w = watches[k]?;
                let d = &r.table[usize::from(w.index)];
                d.access.poll_changed(w.slot, w.seen, cx.waker())?;
                Some(r.update(k, w))
            }),
        };
        match job {
            Some(j) => {
                bump(&r.counters.answered, 1);
                Poll::Ready(Ok(j))
            }
            None => Poll::Pending,
        }
    }

    /// The transport reconnected: the watches were the old link's.
    fn replay(&mut self) {
        self.0.end_watches();
    }

    /// Answers are a stream: not retained, not replayed.
    fn kind(&self) -> Kind {
        Kind::Ring
    }
}

/// The codec that encodes a [`Job`]'s answer (and does nothing else).
pub struct Answers<'r, M: RawMutex, const N: usize>(&'r Responder<M, N>);

impl<M: RawMutex, const N: usize> Encode<Job> for Answers<'_, M, N> {
    fn encode(&self, job: &Job, buf: &mut [u8]) -> Result<usize, EncodeError> {
        self.0.encode(job, buf)
    }
}

// Host-side decoding (the owned `Body`) needs `alloc`.
#[cfg(all(test, feature = "alloc"))]
mod tests;
