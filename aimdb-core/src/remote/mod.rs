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
//! use aimdb_core::link::LinkState;
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
pub mod proto;

#[cfg(feature = "alloc")]
pub use check::{Asks, Verifier, VerifierStats};
pub use check::{Check, Checked, Typed, Verdict};

use core::cell::RefCell;
use core::task::{Context, Poll, Waker};

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;
use portable_atomic::{AtomicU32, Ordering};
pub use postcard_schema::schema::NamedType;
pub use postcard_schema::Schema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{Encode, EncodeError};
use crate::connector::DispatchError;
use crate::record::{Buffer, Kind, Record, RecvError, Source};
use proto::{BodyRef, Response};
pub use proto::{Codec, Op, Request, RequestError};

/// Type-erased access to one record: what a [`Description`] reaches it
/// through. Implemented by every [`Record`] whose value type is postcard
/// (de)serializable.
pub trait Access {
    /// Encodes the newest value (postcard) into `out`: its length, or
    /// `None` if the record holds none.
    fn get(&self, out: &mut [u8]) -> Result<Option<usize>, EncodeError>;
    /// Decodes `bytes` (postcard) and writes the value.
    fn set(&self, bytes: &[u8]) -> Result<(), RequestError>;
    /// Writes so far.
    fn writes(&self) -> u64;
    /// Writes that replaced a value no reader took.
    fn replaced(&self) -> u64;
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
        let v = postcard::from_bytes::<B::Item>(bytes).map_err(|_| RequestError::Malformed)?;
        self.write(v);
        Ok(())
    }

    fn writes(&self) -> u64 {
        Record::writes(self)
    }

    fn replaced(&self) -> u64 {
        Record::replaced(self)
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

/// Live counters of one [`Responder`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponderStats {
    /// Requests taken into the slot.
    pub requests: u32,
    /// Answers encoded (errors included).
    pub answered: u32,
    /// Requests that did not decode (answered [`RequestError::Malformed`] when
    /// their id could be read).
    pub malformed: u32,
    /// Requests that found the slot full (answered [`RequestError::Busy`]).
    pub busy: u32,
    /// `set` refused: the record is not writable.
    pub denied: u32,
}

struct Counters {
    requests: AtomicU32,
    answered: AtomicU32,
    malformed: AtomicU32,
    busy: AtomicU32,
    denied: AtomicU32,
}

/// One writer (the connector task that owns the tables): load and store,
/// no read-modify-write, so this works on `thumbv6m`.
fn bump(c: &AtomicU32) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// What the request slot holds.
struct Slot<const N: usize> {
    request: heapless::Vec<u8, N>,
    pending: bool,
    /// The id of a request refused because the slot was full.
    busy: Option<u32>,
    waker: Option<Waker>,
}

/// One request's work, handed from [`Requests`] to [`Answers`].
#[derive(Debug, Clone)]
pub enum Job<const N: usize> {
    /// A request's bytes.
    Request(heapless::Vec<u8, N>),
    /// Answer "busy" to this id.
    Busy(u32),
}

/// Answers remote requests about the records of `table`, one at a time,
/// with requests of at most `N` bytes. See the [module docs](self).
pub struct Responder<M: RawMutex, const N: usize> {
    table: &'static [Description],
    slot: Mutex<M, RefCell<Slot<N>>>,
    counters: Counters,
}

impl<M: RawMutex, const N: usize> Responder<M, N> {
    /// A responder for `table`.
    pub const fn new(table: &'static [Description]) -> Self {
        Self {
            table,
            slot: Mutex::new(RefCell::new(Slot {
                request: heapless::Vec::new(),
                pending: false,
                busy: None,
                waker: None,
            })),
            counters: Counters {
                requests: AtomicU32::new(0),
                answered: AtomicU32::new(0),
                malformed: AtomicU32::new(0),
                busy: AtomicU32::new(0),
                denied: AtomicU32::new(0),
            },
        }
    }

    /// The described records.
    pub fn table(&self) -> &'static [Description] {
        self.table
    }

    /// The counters.
    pub fn stats(&self) -> ResponderStats {
        let c = &self.counters;
        let l = |a: &AtomicU32| a.load(Ordering::Relaxed);
        ResponderStats {
            requests: l(&c.requests),
            answered: l(&c.answered),
            malformed: l(&c.malformed),
            busy: l(&c.busy),
            denied: l(&c.denied),
        }
    }

    /// The answer side's source: link it with [`Self::answers`] as an
    /// outbound route on the response topic.
    pub fn requests(&self) -> Requests<'_, M, N> {
        Requests(self)
    }

    /// The answer side's codec (see [`Self::requests`]).
    pub fn answers(&self) -> Answers<'_, M, N> {
        Answers(self)
    }

    fn answer(&self, job: &Job<N>, buf: &mut [u8]) -> Result<usize, EncodeError> {
        bump(&self.counters.answered);
        let bytes = match job {
            Job::Busy(id) => return respond(buf, *id, Err(RequestError::Busy)),
            Job::Request(bytes) => bytes,
        };
        let request = match postcard::from_bytes::<Request<'_>>(bytes) {
            Ok(r) => r,
            Err(_) => {
                bump(&self.counters.malformed);
                // The id is the first field: answer it if it reads.
                let id = postcard::take_from_bytes::<u32>(bytes).map_or(0, |(id, _)| id);
                return respond(buf, id, Err(RequestError::Malformed));
            }
        };
        let id = request.id;
        let find = |name: &str| self.table.iter().find(|d| d.name == name);
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
                        bump(&self.counters.denied);
                        Err(RequestError::NotWritable)
                    }
                    Some(d) => d.access.set(value).map(|()| BodyRef::Written),
                };
                respond(buf, id, r)
            }
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
                bump(&self.counters.busy);
                let id = postcard::take_from_bytes::<u32>(payload).map_or(0, |(id, _)| id);
                s.busy = Some(id);
            } else {
                bump(&self.counters.requests);
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
        let job = self.0.slot.lock(|s| {
            let mut s = s.borrow_mut();
            if let Some(id) = s.busy.take() {
                return Some(Job::Busy(id));
            }
            if s.pending {
                s.pending = false;
                return Some(Job::Request(core::mem::take(&mut s.request)));
            }
            match &s.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => old = s.waker.replace(cx.waker().clone()),
            }
            None
        });
        drop(old);
        match job {
            Some(j) => Poll::Ready(Ok(j)),
            None => Poll::Pending,
        }
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

#[cfg(test)]
mod tests;
