//! The remote-access wire format: postcard [`Request`]s in, postcard
//! [`Response`]s out, each with the client's correlation id, on the
//! topics this module names.
//!
//! Every type here is the one both ends use. Strings and values are
//! borrowed (`&str`, `&[u8]`): a node encodes them from its `static`
//! table, a host decodes them from the answer's bytes without copies and
//! keeps what it needs while the bytes live. Where the two ends hold a
//! field differently (the node's sequences come straight from its table,
//! a host decodes them into vectors), a [`Side`] says how: [`Node`] or
//! [`Host`] (feature `alloc`).
//!
//! # Topics
//!
//! On a framed link (UART, TCP) requests go on [`REQUEST`] and answers
//! come on [`RESPONSE`]; on MQTT both sit under the node's prefix
//! (`<prefix>/aimdb/req`: [`topic`] builds it at run time,
//! [`remote_topic!`](crate::remote_topic) as a `const`), beside the
//! retained [`MANIFEST`].
//!
//! Applications can run their own typed requests the same way: a
//! request record (`Mailbox<MyRequest>`) linked inbound on a topic of
//! theirs and a response record (`Ring<MyResponse, N>`) linked outbound,
//! each value carrying a correlation id as [`Request::id`] does; the
//! tables give them the same bounds (one payload buffer, no allocation)
//! and the same priority rules.

use postcard_schema::schema::NamedType;
use serde::{Deserialize, Serialize, Serializer};

use super::{BacklogCounters, Description, LinkCounters};
use crate::presence::LinkState;
use crate::record::Kind;

/// The request topic on a framed link; on MQTT under the node's prefix.
pub const REQUEST: &str = "aimdb/req";
/// The response topic on a framed link; on MQTT under the node's prefix.
pub const RESPONSE: &str = "aimdb/rsp";
/// The retained manifest's topic under an MQTT node's prefix.
pub const MANIFEST: &str = "aimdb/manifest";

/// `<prefix>/<name>`: the topic `name` ([`REQUEST`], [`RESPONSE`],
/// [`MANIFEST`]) of the MQTT node at `prefix` (feature `alloc`).
#[cfg(feature = "alloc")]
pub fn topic(prefix: &str, name: &str) -> alloc::string::String {
    alloc::format!("{}/{name}", prefix.trim_end_matches('/'))
}

/// The node prefix of `topic` if it is `name` under one (the inverse of
/// [`topic`]).
pub fn prefix_of<'t>(topic: &'t str, name: &str) -> Option<&'t str> {
    topic.strip_suffix(name)?.strip_suffix('/')
}

/// A remote-access topic under a literal node prefix, as a `&'static str`
/// (for `const`s and `no_std`): `remote_topic!("dev", request)` is
/// `"dev/aimdb/req"`; also `response` and `manifest` (see
/// [`remote::proto`](crate::remote::proto)'s [`REQUEST`], [`RESPONSE`],
/// [`MANIFEST`]).
#[macro_export]
macro_rules! remote_topic {
    ($prefix:literal, request) => {
        concat!($prefix, "/aimdb/req")
    };
    ($prefix:literal, response) => {
        concat!($prefix, "/aimdb/rsp")
    };
    ($prefix:literal, manifest) => {
        concat!($prefix, "/aimdb/manifest")
    };
}

/// Most entries a `list` or `stats` page carries (fewer when the answer
/// buffer is smaller).
pub const PAGE: usize = 8;

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request<'a> {
    /// Correlation id, echoed in the response.
    pub id: u32,
    /// What is asked.
    #[serde(borrow)]
    pub op: Op<'a>,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op<'a> {
    /// The described records, a page from index `from`.
    List {
        /// First index.
        from: u16,
    },
    /// One record's whole description, its schema included.
    Describe {
        /// Record name.
        record: &'a str,
    },
    /// A record's newest value (postcard) and write count.
    Get {
        /// Record name.
        record: &'a str,
    },
    /// Writes a value (postcard) to a writable record.
    Set {
        /// Record name.
        record: &'a str,
        /// The value, postcard-encoded.
        value: &'a [u8],
    },
    /// Writes and replaced-writes counters, a page from index `from`
    /// (the first page also carries the connectors' counters).
    Stats {
        /// First index.
        from: u16,
    },
    /// Starts watching a record: answered at once with the current value
    /// (a [`Body::Value`] with this request's id), then with a `Value`
    /// under the same id after writes, at most `credit` of them; then
    /// [`Body::Ended`]. A watch that runs already is renewed: it takes
    /// this request's id and `credit` and is answered [`Body::Renewed`]
    /// (no value it sent is sent again). A watch
    /// samples: each update is the newest value, and its `writes` says how
    /// many writes it covers. Watches end with the link (the answer route
    /// is replayed or made anew), and a client renews credit before it
    /// runs out, so a client that vanished costs at most `credit` answers.
    Watch {
        /// Record name.
        record: &'a str,
        /// Updates allowed from now (0: stop, as [`Op::Unwatch`]).
        credit: u32,
    },
    /// Stops watching a record: answered [`Body::Ended`] under the
    /// watch's id (and this request's id if no watch was running).
    Unwatch {
        /// Record name.
        record: &'a str,
    },
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RequestError {
    /// No described record has that name.
    UnknownRecord,
    /// The record is not described as writable.
    NotWritable,
    /// The request (or a `set` value) did not decode, or bytes were left
    /// over behind it.
    Malformed,
    /// The answer does not fit the answer buffer.
    TooLarge,
    /// A request was pending already, or every watch is taken; ask again.
    Busy,
    /// The record has no free reader slot for a watch (give it one more
    /// reader, `R`, to make it watchable).
    NotWatchable,
}

impl core::fmt::Display for RequestError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::UnknownRecord => "no such record",
            Self::NotWritable => "record is read-only",
            Self::Malformed => "malformed request or value",
            Self::TooLarge => "answer too large for the node's buffer",
            Self::Busy => "node busy with another request or watch",
            Self::NotWatchable => "record has no free reader slot for a watch",
        })
    }
}
impl core::error::Error for RequestError {}

/// A route's payload codec, as a description reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Codec {
    /// postcard.
    Postcard,
    /// JSON.
    Json,
    /// Something else.
    Other,
}

/// One response: the request's id and its answer. A node encodes
/// `Response<Body<'_, Node>>`, a host decodes `Response<Body<'_, Host>>`
/// (feature `alloc`), borrowing strings and values from the answer bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response<B> {
    /// The request's id (0 if a malformed request had none).
    pub id: u32,
    /// The answer.
    pub result: Result<B, RequestError>,
}

/// Which end of the wire a [`Body`] is on: how its sequences and the
/// schema are held. [`Node`] encodes them straight from its `static`
/// table; [`Host`] decodes them into vectors. Every other field is the
/// same type on both ends, so the two cannot drift apart.
pub trait Side<'a> {
    /// A `list` page's entries (a sequence of [`Entry`]).
    type Entries: core::fmt::Debug;
    /// A `stats` page's records (a sequence of [`RecordStats`]).
    type Stats: core::fmt::Debug;
    /// A `stats` page's connectors (a sequence of [`ConnectorStats`]).
    type Connectors: core::fmt::Debug;
    /// A description's topics (a sequence of `&str`).
    type Topics: core::fmt::Debug;
    /// A description's schema (a `postcard-schema` named type).
    type Schema: core::fmt::Debug;
}

/// The node's end: sequences encoded from the table, without copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {}

impl<'a> Side<'a> for Node {
    type Entries = EntriesRef<'a>;
    type Stats = StatsRef<'a>;
    type Connectors = ConnectorsRef<'a>;
    type Topics = &'a [&'a str];
    type Schema = &'a NamedType;
}

/// A response body. Variant and field order are the wire's.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(
    serialize = "S::Entries: Serialize, S::Stats: Serialize, S::Connectors: Serialize, \
                 S::Topics: Serialize, S::Schema: Serialize",
    deserialize = "S::Entries: Deserialize<'de>, S::Stats: Deserialize<'de>, \
                   S::Connectors: Deserialize<'de>, S::Topics: Deserialize<'de>, \
                   S::Schema: Deserialize<'de>"
))]
pub enum Body<'a, S: Side<'a>> {
    /// A page of the table.
    List {
        /// Described records in all.
        total: u16,
        /// Index of the first entry.
        from: u16,
        /// The page.
        entries: S::Entries,
    },
    /// A page of counters.
    Stats {
        /// Described records in all.
        total: u16,
        /// Index of the first entry.
        from: u16,
        /// The page.
        entries: S::Stats,
        /// The connectors (on the page from 0; empty on the others).
        connectors: S::Connectors,
        /// The responder's own counters.
        responder: super::ResponderStats,
    },
    /// One description.
    Describe(#[serde(borrow)] Info<'a, S>),
    /// A value: `writes` so far and the newest value, if any.
    Value {
        /// The record's write count.
        writes: u64,
        /// The value, postcard.
        #[serde(borrow)]
        value: Option<&'a [u8]>,
    },
    /// A `set` was applied.
    Written,
    /// A watch ended (credit used up, or unwatched).
    Ended,
    /// A running watch took the new credit and id; the values it sent
    /// are not sent again.
    Renewed,
}

impl<'a, S: Side<'a>> PartialEq for Body<'a, S>
where
    S::Entries: PartialEq,
    S::Stats: PartialEq,
    S::Connectors: PartialEq,
    S::Topics: PartialEq,
    S::Schema: PartialEq,
{
    fn eq(&self, other: &Self) -> bool {
        use Body::*;
        match (self, other) {
            (
                List {
                    total: a,
                    from: b,
                    entries: c,
                },
                List {
                    total: x,
                    from: y,
                    entries: z,
                },
            ) => (a, b, c) == (x, y, z),
            (
                Stats {
                    total: a,
                    from: b,
                    entries: c,
                    connectors: d,
                    responder: e,
                },
                Stats {
                    total: v,
                    from: w,
                    entries: x,
                    connectors: y,
                    responder: z,
                },
            ) => (a, b, c, d, e) == (v, w, x, y, z),
            (Describe(a), Describe(b)) => a == b,
            (
                Value {
                    writes: a,
                    value: b,
                },
                Value {
                    writes: x,
                    value: y,
                },
            ) => (a, b) == (x, y),
            (Written, Written) | (Ended, Ended) | (Renewed, Renewed) => true,
            _ => false,
        }
    }
}

/// A listed record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry<'a> {
    /// Name.
    pub name: &'a str,
    /// Buffer kind.
    pub kind: Kind,
    /// Values held.
    pub capacity: u16,
    /// Remote `set` allowed.
    pub writable: bool,
    /// Schema hash (see [`schema_hash`](super::schema_hash)).
    pub schema_hash: [u8; 8],
}

/// One record's counters, as `stats` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordStats<'a> {
    /// Name.
    pub name: &'a str,
    /// Writes so far.
    pub writes: u64,
    /// Writes that replaced a value no reader took.
    pub replaced: u64,
}

/// One connector's counters and link state, as `stats` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorStats<'a> {
    /// The name the node gave it.
    pub name: &'a str,
    /// Its counters.
    pub counters: LinkCounters,
    /// Its link state, if the node reports one.
    pub link: Option<LinkState>,
    /// Its durable backlog's counters, if it has one.
    pub backlog: Option<BacklogCounters>,
}

/// A whole description.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(
    serialize = "S::Topics: Serialize, S::Schema: Serialize",
    deserialize = "S::Topics: Deserialize<'de>, S::Schema: Deserialize<'de>"
))]
pub struct Info<'a, S: Side<'a>> {
    /// Name.
    pub name: &'a str,
    /// Buffer kind.
    pub kind: Kind,
    /// Values held.
    pub capacity: u16,
    /// Remote `set` allowed.
    pub writable: bool,
    /// Its routes' codec.
    pub codec: Codec,
    /// Topics it is routed on.
    pub topics: S::Topics,
    /// Schema hash.
    pub schema_hash: [u8; 8],
    /// The value type's schema.
    pub schema: S::Schema,
}

impl<'a, S: Side<'a>> PartialEq for Info<'a, S>
where
    S::Topics: PartialEq,
    S::Schema: PartialEq,
{
    fn eq(&self, o: &Self) -> bool {
        (
            self.name,
            self.kind,
            self.capacity,
            self.writable,
            self.codec,
        ) == (o.name, o.kind, o.capacity, o.writable, o.codec)
            && self.topics == o.topics
            && self.schema_hash == o.schema_hash
            && self.schema == o.schema
    }
}

impl<'a> Info<'a, Node> {
    pub(crate) fn of(d: &'a Description) -> Self {
        Self {
            name: d.name,
            kind: d.kind,
            capacity: d.capacity,
            writable: d.writable,
            codec: d.codec,
            topics: d.topics,
            schema_hash: d.schema_hash,
            schema: d.schema,
        }
    }
}

/// The start of a `Value` response with a value of `len` bytes: the bytes
/// `Response { id, result: Ok(Body::Value { writes, value: Some(..) }) }`
/// begins with, so the value can be encoded in place behind it (a test
/// holds it to the derived encoding).
pub(crate) struct ValueHeader {
    pub(crate) id: u32,
    pub(crate) writes: u64,
    pub(crate) len: usize,
}

impl ValueHeader {
    /// The most bytes this header takes with a value of at most `max`
    /// bytes.
    pub(crate) fn room(id: u32, writes: u64, max: usize) -> usize {
        // Result and body tags and the option tag take a byte each.
        varint_len(u64::from(id)) + 3 + varint_len(writes) + varint_len(max as u64)
    }
}

/// Bytes of `v` as a postcard varint (a loop, not a count of leading
/// zeros: Cortex-M0 has no instruction for those).
#[inline(always)]
const fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

impl ValueHeader {
    /// Writes the header at the start of `out`: its length; `None` if
    /// `out` is too short. Postcard by hand (six varints and tags), so
    /// a `get` runs no serializer for it.
    #[inline(always)]
    pub(crate) fn encode(&self, out: &mut [u8]) -> Option<usize> {
        // id, Ok (variant 0), Value (variant 3), writes, Some, length.
        let at = varint(u64::from(self.id), out, 0)?;
        out.get_mut(at..at + 2)?.copy_from_slice(&[0, 3]);
        let at = varint(self.writes, out, at + 2)?;
        *out.get_mut(at)? = 1;
        varint(self.len as u64, out, at + 1)
    }
}

/// `v` as a postcard varint at `out[at..]`: the index behind it.
#[inline(always)]
fn varint(mut v: u64, out: &mut [u8], mut at: usize) -> Option<usize> {
    loop {
        let b = out.get_mut(at)?;
        at += 1;
        if v < 0x80 {
            *b = v as u8;
            return Some(at);
        }
        *b = v as u8 | 0x80;
        v >>= 7;
    }
}

/// Table entries as listed.
#[derive(Debug)]
pub struct EntriesRef<'a>(pub(crate) &'a [Description]);

impl Serialize for EntriesRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|d| Entry {
            name: d.name,
            kind: d.kind,
            capacity: d.capacity,
            writable: d.writable,
            schema_hash: d.schema_hash,
        }))
    }
}

/// Counters as listed.
#[derive(Debug)]
pub struct StatsRef<'a>(pub(crate) &'a [Description]);

impl Serialize for StatsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|d| RecordStats {
            name: d.name,
            writes: d.access.writes(),
            replaced: d.access.replaced(),
        }))
    }
}

/// Connectors as listed: name, counters, link state, backlog.
#[derive(Debug)]
pub struct ConnectorsRef<'a>(pub(crate) &'a [super::Connector]);

impl Serialize for ConnectorsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| ConnectorStats {
            name: c.name,
            counters: c.counters.link_counters(),
            link: c.link.and_then(|l| l.link_state()),
            backlog: c.backlog.map(|b| b.backlog_counters()),
        }))
    }
}

#[cfg(feature = "alloc")]
pub use host::Host;

#[cfg(feature = "alloc")]
mod host {
    use alloc::vec::Vec;

    use postcard_schema::schema::owned::OwnedNamedType;

    use super::{ConnectorStats, Entry, RecordStats, Side};

    /// A host's end (feature `alloc`): sequences decoded into vectors of
    /// the borrowed types, the schema into an owned one.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Host {}

    impl<'a> Side<'a> for Host {
        type Entries = Vec<Entry<'a>>;
        type Stats = Vec<RecordStats<'a>>;
        type Connectors = Vec<ConnectorStats<'a>>;
        type Topics = Vec<&'a str>;
        type Schema = OwnedNamedType;
    }
}
