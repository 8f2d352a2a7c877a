//! The remote-access wire format: postcard [`Request`]s in, postcard
//! [`Response`]s out, each with the client's correlation id.
//!
//! A node encodes responses from borrowed data (the `*Ref` types); a host
//! decodes them into the owned types of this module (feature `alloc`),
//! which have the same serde shape.
//!
//! Applications can run their own typed requests the same way: a
//! request record (`Mailbox<MyRequest>`) linked inbound on a topic of
//! theirs and a response record (`Ring<MyResponse, N>`) linked outbound,
//! each value carrying a correlation id as [`Request::id`] does; the
//! tables give them the same bounds (one payload buffer, no allocation)
//! and the same priority rules.

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Deserialize, Serialize, Serializer};

use super::Description;
#[cfg(feature = "alloc")]
use crate::record::Kind;

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
    /// Starts watching a record, or grants an existing watch more credit:
    /// answered at once with the current value (a [`BodyRef::Value`] with
    /// this request's id), then with a `Value` under the same id after
    /// writes, at most `credit` of them; then [`BodyRef::Ended`]. A watch
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
    /// Stops watching a record: answered [`BodyRef::Ended`] under the
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
    /// The request (or a `set` value) did not decode.
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

/// One response; `B` is [`BodyRef`] on the node, [`Body`] on a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response<B> {
    /// The request's id (0 if a malformed request had none).
    pub id: u32,
    /// The answer.
    pub result: Result<B, RequestError>,
}

/// A response body as the node encodes it. Variant order is the wire's:
/// keep it equal to [`Body`]'s.
#[derive(Serialize)]
pub enum BodyRef<'a> {
    /// A page of the table.
    List {
        /// Described records in all.
        total: u16,
        /// Index of the first entry.
        from: u16,
        /// The page.
        entries: EntriesRef<'a>,
    },
    /// A page of counters.
    Stats {
        /// Described records in all.
        total: u16,
        /// Index of the first entry.
        from: u16,
        /// The page.
        entries: StatsRef<'a>,
        /// The connectors (on the page from 0; empty on the others).
        connectors: ConnectorsRef<'a>,
        /// The responder's own counters.
        responder: super::ResponderStats,
    },
    /// One description.
    Describe(InfoRef<'a>),
    /// A value: `writes` so far and the newest value, if any.
    Value {
        /// The record's write count.
        writes: u64,
        /// The value, postcard.
        value: Option<&'a [u8]>,
    },
    /// A `set` was applied.
    Written,
    /// A watch ended (credit used up, or unwatched).
    Ended,
}

/// The start of a `Value` response with a value of `len` bytes: the bytes
/// `Response { id, result: Ok(BodyRef::Value { writes, value: Some(..) }) }`
/// begins with, so the value can be encoded in place behind it.
pub(crate) struct ValueHeader {
    pub(crate) id: u32,
    pub(crate) writes: u64,
    pub(crate) len: usize,
}

impl Serialize for ValueHeader {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // id, Ok (variant 0), Value (variant 3), writes, Some, length.
        (self.id, 0u32, 3u32, self.writes, 1u8, self.len).serialize(s)
    }
}

/// Table entries as listed.
pub struct EntriesRef<'a>(pub(crate) &'a [Description]);

impl Serialize for EntriesRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for d in self.0 {
            seq.serialize_element(&EntryRef(d))?;
        }
        seq.end()
    }
}

struct EntryRef<'a>(&'a Description);

impl Serialize for EntryRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut st = s.serialize_struct("Entry", 5)?;
        st.serialize_field("name", d.name)?;
        st.serialize_field("kind", &d.kind)?;
        st.serialize_field("capacity", &d.capacity)?;
        st.serialize_field("writable", &d.writable)?;
        st.serialize_field("schema_hash", &d.schema_hash)?;
        st.end()
    }
}

/// Counters as listed.
pub struct StatsRef<'a>(pub(crate) &'a [Description]);

impl Serialize for StatsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for d in self.0 {
            seq.serialize_element(&(d.name, d.access.writes(), d.access.replaced()))?;
        }
        seq.end()
    }
}

/// Connectors as listed: name, counters, link state.
pub struct ConnectorsRef<'a>(pub(crate) &'a [super::Connector]);

impl Serialize for ConnectorsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for c in self.0 {
            let link = c.link.and_then(|l| l.link_state());
            seq.serialize_element(&(c.name, c.counters.link_counters(), link))?;
        }
        seq.end()
    }
}

/// One whole description.
pub struct InfoRef<'a>(pub(crate) &'a Description);

impl Serialize for InfoRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut st = s.serialize_struct("Info", 8)?;
        st.serialize_field("name", d.name)?;
        st.serialize_field("kind", &d.kind)?;
        st.serialize_field("capacity", &d.capacity)?;
        st.serialize_field("writable", &d.writable)?;
        st.serialize_field("codec", &d.codec)?;
        st.serialize_field("topics", d.topics)?;
        st.serialize_field("schema_hash", &d.schema_hash)?;
        st.serialize_field("schema", d.schema)?;
        st.end()
    }
}

#[cfg(feature = "alloc")]
pub use owned::*;

#[cfg(feature = "alloc")]
mod owned {
    use alloc::string::String;
    use alloc::vec::Vec;

    use postcard_schema::schema::owned::OwnedNamedType;
    use serde::{Deserialize, Serialize};

    use super::{Codec, Kind};
    use crate::presence::LinkState;
    use crate::remote::LinkCounters;

    /// A response body as a host decodes it (same wire as
    /// [`BodyRef`](super::BodyRef)).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub enum Body {
        /// A page of the table.
        List {
            /// Described records in all.
            total: u16,
            /// Index of the first entry.
            from: u16,
            /// The page.
            entries: Vec<Entry>,
        },
        /// A page of counters.
        Stats {
            /// Described records in all.
            total: u16,
            /// Index of the first entry.
            from: u16,
            /// The page: name, writes, replaced writes.
            entries: Vec<(String, u64, u64)>,
            /// The connectors (on the page from 0).
            connectors: Vec<ConnectorStats>,
            /// The responder's own counters.
            responder: crate::remote::ResponderStats,
        },
        /// One description.
        Describe(Info),
        /// A value.
        Value {
            /// The record's write count.
            writes: u64,
            /// The newest value, postcard.
            value: Option<Vec<u8>>,
        },
        /// A `set` was applied.
        Written,
        /// A watch ended.
        Ended,
    }

    /// One connector's counters and link state, as `stats` reports them.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ConnectorStats {
        /// The name the node gave it.
        pub name: String,
        /// Its counters.
        pub counters: LinkCounters,
        /// Its link state, if the node reports one.
        pub link: Option<LinkState>,
    }

    /// A listed record.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Entry {
        /// Name.
        pub name: String,
        /// Buffer kind.
        pub kind: Kind,
        /// Values held.
        pub capacity: u16,
        /// Remote `set` allowed.
        pub writable: bool,
        /// Schema hash (see [`schema_hash`](crate::remote::schema_hash)).
        pub schema_hash: [u8; 8],
    }

    /// A whole description.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Info {
        /// Name.
        pub name: String,
        /// Buffer kind.
        pub kind: Kind,
        /// Values held.
        pub capacity: u16,
        /// Remote `set` allowed.
        pub writable: bool,
        /// Its routes' codec.
        pub codec: Codec,
        /// Topics it is routed on.
        pub topics: Vec<String>,
        /// Schema hash.
        pub schema_hash: [u8; 8],
        /// The value type's schema.
        pub schema: OwnedNamedType,
    }
}
