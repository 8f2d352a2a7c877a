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
//!   them is answered [`RequestError::Busy`] (its id is kept for that); a request over `N` bytes is refused by the
//!   inbound table (`PayloadTooLarge`) and counted there. A flood therefore
//!   costs one answer per pull, never a queue.
//! - Each answer is bounded work: one record encoded or decoded, or one
//!   page of the table.
//! - Writes go only to records described [`writable`](Description::writable);
//!   any other is refused with [`RequestError::NotWritable`] and nothing changes.
//!
//! - A **watch** ([`Op::Watch`]) streams a record's values as they are
//!   written: the current value at once, then the newest value after
//!   writes (each answer's `writes` says how many writes it covers), at
//!   most `credit` answers, then [`proto::BodyRef::Ended`]. It holds one
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
//!   ([`LinkCounters`]) and link state.
//! - On MQTT, [`Responder::manifest`] publishes a retained JSON manifest
//!   ([`ManifestJson`]) of the records, so a plain MQTT client sees what
//!   the node has without speaking this protocol.
//!
//! The wire format is postcard: [`Request`] in, [`Response`] out, each
//! with the client's correlation id. Hosts decode responses with
//! [`proto`]'s owned types (feature `alloc`).
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
use proto::{BodyRef, Response};
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(into = "[u32; 6]", from = "[u32; 6]")]
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

/// A connector's counters, readable from another task: implemented by
/// the connectors' shared counters (`aimdb-connectors`, feature `remote`).
pub trait Counted {
    /// The counters now.
    fn link_counters(&self) -> LinkCounters;
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
}

impl Connector {
    /// A connector named `name` with `counters`.
    pub const fn new(name: &'static str, counters: &'static (dyn Counted + Sync)) -> Self {
        Self {
            name,
            counters,
            link: None,
        }
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
    /// Watches whose end is to be told (their ids).
    ended: [Option<u32>; WATCHES],
    /// Where the next look for a changed watch starts (fairness).
    next: u8,
}

/// One request's work, handed from [`Requests`] to [`Answers`].
#[derive(Debug, Clone)]
pub enum Job<const N: usize> {
    /// A request's bytes.
    Request(heapless::Vec<u8, N>),
    /// Answer "busy" to this id.
    Busy(u32),
    /// Send watch `k`'s newest value.
    Update(u8),
    /// Tell this id its watch ended.
    Ended(u32),
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
                ended: [None; WATCHES],
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
    /// node's records with kinds, types, topics and schema hashes.
    pub fn manifest(&self) -> Manifests {
        Manifests::new(self.table)
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
            s.ended = [None; WATCHES];
        });
        for w in gone.into_iter().flatten() {
            self.table[usize::from(w.index)].access.unwatch(w.slot);
        }
    }

    /// A watch request on table entry `index` (`credit` 0 stops it).
    fn watch(
        &self,
        buf: &mut [u8],
        id: u32,
        index: usize,
        credit: u32,
    ) -> Result<usize, EncodeError> {
        let d = &self.table[index];
        if credit == 0 {
            return self.unwatch(buf, id, index);
        }
        enum Step {
            Renewed,
            New(usize),
            Full,
        }
        let step = self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            if let Some(w) = s
                .watches
                .iter_mut()
                .flatten()
                .find(|w| usize::from(w.index) == index)
            {
                w.id = id;
                w.credit = credit;
                return Step::Renewed;
            }
            s.watches
                .iter()
                .position(Option::is_none)
                .map_or(Step::Full, Step::New)
        });
        match step {
            Step::Renewed => {}
            Step::Full => return respond(buf, id, Err(RequestError::Busy)),
            Step::New(k) => {
                let Some(slot) = d.access.watch() else {
                    return respond(buf, id, Err(RequestError::NotWatchable));
                };
                let seen = d.access.writes();
                self.slot.lock(|s| {
                    s.borrow_mut().watches[k] = Some(Watch {
                        index: index as u16,
                        slot,
                        id,
                        credit,
                        seen,
                    });
                });
            }
        }
        // The current value, under the watch's id.
        get(buf, id, d)
    }

    fn unwatch(&self, buf: &mut [u8], id: u32, index: usize) -> Result<usize, EncodeError> {
        let w = self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            let k = s
                .watches
                .iter()
                .position(|w| w.is_some_and(|w| usize::from(w.index) == index))?;
            s.watches[k].take()
        });
        if let Some(w) = w {
            self.table[index].access.unwatch(w.slot);
            if w.id != id {
                // The watch's own stream ends too.
                self.slot.lock(|s| {
                    let mut s = s.borrow_mut();
                    if let Some(e) = s.ended.iter_mut().find(|e| e.is_none()) {
                        *e = Some(w.id);
                    }
                });
            }
        }
        respond(buf, id, Ok(BodyRef::Ended))
    }

    /// Watch `k`'s newest value; its last one ends it.
    fn update(&self, buf: &mut [u8], k: usize) -> Result<usize, EncodeError> {
        let Some(w) = self.slot.lock(|s| s.borrow().watches[k]) else {
            // Ended since it was found changed (cannot happen: only this
            // task ends watches); an answer no client waits for.
            return respond(buf, 0, Ok(BodyRef::Ended));
        };
        bump(&self.counters.updates, 1);
        let d = &self.table[usize::from(w.index)];
        let writes = d.access.writes();
        let last = w.credit <= 1;
        self.slot.lock(|s| {
            let mut s = s.borrow_mut();
            if last {
                s.watches[k] = None;
                if let Some(e) = s.ended.iter_mut().find(|e| e.is_none()) {
                    *e = Some(w.id);
                }
            } else if let Some(x) = s.watches[k].as_mut() {
                x.credit -= 1;
                x.seen = writes;
            }
        });
        if last {
            d.access.unwatch(w.slot);
        }
        get(buf, w.id, d)
    }

    /// The answer side's codec (see [`Self::requests`]).
    pub fn answers(&self) -> Answers<'_, M, N> {
        Answers(self)
    }

    fn answer(&self, job: &Job<N>, buf: &mut [u8]) -> Result<usize, EncodeError> {
        bump(&self.counters.answered, 1);
        let bytes = match job {
            Job::Busy(id) => return respond(buf, *id, Err(RequestError::Busy)),
            Job::Update(k) => return self.update(buf, usize::from(*k)),
            Job::Ended(id) => return respond(buf, *id, Ok(BodyRef::Ended)),
            Job::Request(bytes) => bytes,
        };
        let request = match postcard::from_bytes::<Request<'_>>(bytes) {
            Ok(r) => r,
            Err(_) => {
                bump(&self.counters.malformed, 1);
                // The id is the first field: answer it if it reads.
                let id = postcard::take_from_bytes::<u32>(bytes).map_or(0, |(id, _)| id);
                return respond(buf, id, Err(RequestError::Malformed));
            }
        };
        let id = request.id;
        let find = |name: &str| self.table.iter().find(|d| d.name == name);
        let position = |name: &str| self.table.iter().position(|d| d.name == name);
        match request.op {
            Op::List { from } => self.list(buf, id, from),
            Op::Stats { from } => {
                let from = usize::from(from).min(self.table.len());
                page(buf, |n| {
                    let end = (from + n).min(self.table.len());
                    Response {
                        id,
                        result: Ok(BodyRef::Stats {
                            total: self.table.len() as u16,
                            from: from as u16,
                            entries: proto::StatsRef(&self.table[from..end]),
                            connectors: proto::ConnectorsRef(if from == 0 {
                                self.connectors
                            } else {
                                &[]
                            }),
                            responder: self.stats(),
                        }),
                    }
                })
            }
            Op::Describe { record } => match find(record) {
                Some(d) => respond(buf, id, Ok(BodyRef::Describe(proto::InfoRef(d)))),
                None => respond(buf, id, Err(RequestError::UnknownRecord)),
            },
            Op::Get { record } => match find(record) {
                Some(d) => get(buf, id, d),
                None => respond(buf, id, Err(RequestError::UnknownRecord)),
            },
            Op::Set { record, value } => {
                let r = match find(record) {
                    None => Err(RequestError::UnknownRecord),
                    Some(d) if !d.writable => {
                        bump(&self.counters.denied, 1);
                        Err(RequestError::NotWritable)
                    }
                    Some(d) => d.access.set(value).map(|()| BodyRef::Written),
                };
                respond(buf, id, r)
            }
            Op::Watch { record, credit } => match position(record) {
                Some(i) => self.watch(buf, id, i, credit),
                None => respond(buf, id, Err(RequestError::UnknownRecord)),
            },
            Op::Unwatch { record } => match position(record) {
                Some(i) => self.unwatch(buf, id, i),
                None => respond(buf, id, Err(RequestError::UnknownRecord)),
            },
        }
    }

    fn list(&self, buf: &mut [u8], id: u32, from: u16) -> Result<usize, EncodeError> {
        let from = usize::from(from).min(self.table.len());
        page(buf, |n| {
            let end = (from + n).min(self.table.len());
            Response {
                id,
                result: Ok(BodyRef::List {
                    total: self.table.len() as u16,
                    from: from as u16,
                    entries: proto::EntriesRef(&self.table[from..end]),
                }),
            }
        })
    }
}

/// Encodes `response(n)` with the largest `n` (at most [`proto::PAGE`])
/// whose encoding fits `buf`; at least one entry, else `TooLarge`.
fn page<'a>(
    buf: &mut [u8],
    response: impl Fn(usize) -> Response<BodyRef<'a>>,
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
    result: Result<BodyRef<'_>, RequestError>,
) -> Result<usize, EncodeError> {
    match crate::codec::Postcard.encode(&Response { id, result }, buf) {
        Err(EncodeError::BufferTooSmall) => crate::codec::Postcard.encode(
            &Response::<BodyRef<'_>> {
                id,
                result: Err(RequestError::TooLarge),
            },
            buf,
        ),
        r => r,
    }
}

/// Room for a `Value` response's header: id, result and body tags,
/// writes, option tag and length (varints).
const VALUE_HEADER: usize = 5 + 1 + 1 + 10 + 1 + 5;

/// A `get`: the value is encoded straight into `buf` behind room for the
/// header, then the header is written in front of it (no second buffer).
fn get(buf: &mut [u8], id: u32, d: &Description) -> Result<usize, EncodeError> {
    let writes = d.access.writes();
    let Some(tail) = buf.get_mut(VALUE_HEADER..) else {
        return respond(buf, id, Err(RequestError::TooLarge));
    };
    let n = match d.access.get(tail) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return respond(
                buf,
                id,
                Ok(BodyRef::Value {
                    writes,
                    value: None,
                }),
            )
        }
        Err(_) => return respond(buf, id, Err(RequestError::TooLarge)),
    };
    let mut header = [0u8; VALUE_HEADER];
    let h =
        crate::codec::Postcard.encode(&proto::ValueHeader { id, writes, len: n }, &mut header)?;
    buf.copy_within(VALUE_HEADER..VALUE_HEADER + n, h);
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

/// The responder's pending work, as an outbound [`Source`].
pub struct Requests<'r, M: RawMutex, const N: usize>(&'r Responder<M, N>);

impl<M: RawMutex, const N: usize> Source for Requests<'_, M, N> {
    type Item = Job<N>;

    fn name(&self) -> &'static str {
        "aimdb/remote"
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Job<N>, RecvError>> {
        let mut old = None;
        let r = self.0;
        let (job, watches, next) = r.slot.lock(|s| {
            let mut s = s.borrow_mut();
            if let Some(id) = s.busy.take() {
                return (Some(Job::Busy(id)), [None; WATCHES], 0);
            }
            if s.pending {
                s.pending = false;
                return (
                    Some(Job::Request(core::mem::take(&mut s.request))),
                    [None; WATCHES],
                    0,
                );
            }
            if let Some(id) = s.ended.iter_mut().find_map(Option::take) {
                return (Some(Job::Ended(id)), [None; WATCHES], 0);
            }
            match &s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => old = s.waker.replace(cx.waker().clone()),
            }
            (None, s.watches, s.next)
        });
        drop(old);
        if let Some(j) = job {
            return Poll::Ready(Ok(j));
        }
        // Requests first; then the first changed watch from `next` round.
        // Each look registers the waker with the record, so a write after
        // it wakes this route.
        for n in 0..WATCHES {
            let k = (usize::from(next) + n) % WATCHES;
            let Some(w) = watches[k] else { continue };
            let d = &r.table[usize::from(w.index)];
            if d.access.poll_changed(w.slot, w.seen, cx.waker()).is_some() {
                r.slot
                    .lock(|s| s.borrow_mut().next = ((k + 1) % WATCHES) as u8);
                return Poll::Ready(Ok(Job::Update(k as u8)));
            }
        }
        Poll::Pending
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

/// The codec that turns a [`Job`] into its answer.
pub struct Answers<'r, M: RawMutex, const N: usize>(&'r Responder<M, N>);

impl<M: RawMutex, const N: usize> Encode<Job<N>> for Answers<'_, M, N> {
    fn encode(&self, job: &Job<N>, buf: &mut [u8]) -> Result<usize, EncodeError> {
        self.0.answer(job, buf)
    }
}

// Host-side decoding (the owned `Body`) needs `alloc`.
#[cfg(all(test, feature = "alloc"))]
mod tests;
