//! Outbound links: a source (a record reader), a topic and an encoder.

use core::fmt::{self, Write as _};
use core::marker::PhantomData;
use core::task::{Context, Poll};

use crate::codec::{Encode, EncodeError};
use crate::connector::QoS;
use crate::packed::Packed;
use crate::record::{Kind, RecvError, Source};
use crate::topic::Topic;

/// Where a route's topic comes from.
pub trait TopicSpec<T> {
    /// The fixed topic, for static topics.
    fn fixed(&self) -> Option<&str>;
    /// Writes the topic for `value` (written topics only).
    fn write(&self, value: &T, out: &mut TopicWriter<'_>) -> fmt::Result;
}

/// A static topic: `&str` is fixed at link time.
impl<T> TopicSpec<T> for &str {
    fn fixed(&self) -> Option<&str> {
        Some(self)
    }
    fn write(&self, _: &T, out: &mut TopicWriter<'_>) -> fmt::Result {
        out.write_str(self)
    }
}

/// A topic written per value, e.g. `sensors/{id}/temp`. Build it with
/// [`Written::new`], which lets a closure infer its writer argument:
///
/// ```
/// use core::fmt::Write as _;
/// use aimdb_core::codec::Postcard;
/// use aimdb_core::outbound::{Link, Routes, Written};
/// use aimdb_core::record::{Record, Ring};
/// use aimdb_core::sync::Readiness;
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
///
/// #[derive(Clone, serde::Serialize)]
/// struct Reading {
///     id: u8,
///     temp: i16,
/// }
/// static READINGS: Record<Cs, Ring<Reading, 4>, 1> = Record::new("readings");
/// static READY: Readiness<1> = Readiness::new();
///
/// let topic = Written::new(|v: &Reading, w| write!(w, "sensors/{}/temp", v.id));
/// let mut link = Link::new(READINGS.subscribe().unwrap(), topic, Postcard);
/// // The topic scratch holds the longest topic written.
/// let (mut payload, mut scratch) = ([0u8; 16], [0u8; 32]);
/// let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload).written_topics(&mut scratch);
/// b.link(&mut link);
/// let mut routes = b.build().unwrap();
///
/// READINGS.write(Reading { id: 7, temp: -3 });
/// let m = futures::executor::block_on(routes.next());
/// assert_eq!(m.topic, "sensors/7/temp");
/// ```
///
/// The result must be a valid topic name of at most the topic scratch's
/// length; a longer one is an error, never a truncation.
#[derive(Debug, Clone, Copy)]
pub struct Written<F>(pub F);

impl<F> Written<F> {
    /// Wraps `f`. The bound here is what lets `|v: &T, w| …` compile
    /// without naming `w: &mut TopicWriter<'_>`: a closure passed straight
    /// to `Written(…)` gets no expected signature and cannot infer it.
    pub const fn new<T>(f: F) -> Self
    where
        F: Fn(&T, &mut TopicWriter<'_>) -> fmt::Result,
    {
        Self(f)
    }
}

impl<T, F: Fn(&T, &mut TopicWriter<'_>) -> fmt::Result> TopicSpec<T> for Written<F> {
    fn fixed(&self) -> Option<&str> {
        None
    }
    fn write(&self, value: &T, out: &mut TopicWriter<'_>) -> fmt::Result {
        (self.0)(value, out)
    }
}

/// `core::fmt::Write` into the connector's topic scratch; fails instead of
/// truncating.
#[derive(Debug)]
pub struct TopicWriter<'s> {
    buf: &'s mut [u8],
    len: usize,
}

impl<'s> TopicWriter<'s> {
    pub(crate) fn new(buf: &'s mut [u8]) -> Self {
        Self { buf, len: 0 }
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl fmt::Write for TopicWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Encoder kind marker: encode into the connector's shared scratch (no
/// allocation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Borrowed;

/// Encoder kind marker: encode into a fresh `Vec<u8>` (one allocation per
/// message; feature `alloc`).
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Owned;

/// How an encoder kind produces a payload.
pub trait EncodeKind<T, E> {
    /// Encodes `value`.
    fn encode(enc: &E, value: &T, out: &mut Out<'_>) -> Result<Payload, EncodeError>;
}

impl<T, E: Encode<T>> EncodeKind<T, E> for Borrowed {
    fn encode(enc: &E, value: &T, out: &mut Out<'_>) -> Result<Payload, EncodeError> {
        enc.encode(value, out.payload).map(Payload::Scratch)
    }
}

#[cfg(feature = "alloc")]
impl<T, E: crate::codec::EncodeOwned<T>> EncodeKind<T, E> for Owned {
    fn encode(enc: &E, value: &T, out: &mut Out<'_>) -> Result<Payload, EncodeError> {
        out.owned = enc.encode_owned(value)?;
        Ok(Payload::Owned)
    }
}

/// The connector-wide buffers a route writes into, and where it describes
/// what it produced: the table keeps one and lends it to every route it
/// polls.
#[derive(Debug)]
pub struct Out<'s> {
    pub(crate) topic: &'s mut [u8],
    pub(crate) payload: &'s mut [u8],
    #[cfg(feature = "alloc")]
    pub(crate) owned: alloc::vec::Vec<u8>,
    pub(crate) produced: Produced,
}

/// Where a produced payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The first `n` bytes of the shared scratch.
    Scratch(usize),
    /// The owned buffer.
    Owned,
}

/// What one successful poll of a route produced, written by the route
/// field by field into the table's own copy (`Out::produced`), so the
/// type-erased call returns only a small `Poll<Result<bool, _>>` (in
/// registers) and nothing is copied between the route's result and the
/// table's message. A struct returned through memory costs instructions on
/// every pull (b2_cells counts them), and copied whole it compiles to wide
/// loads over narrow stores, which the CPU cannot forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// `n > 0`: the topic is the first `n` bytes of the topic scratch (a
    /// topic is never empty); `0`: the route's fixed topic.
    pub topic_len: usize,
    /// Length of the payload in the shared scratch, unless `owned`.
    pub payload_len: usize,
    /// Values lost to `Ring` lag just before this one.
    pub lagged: u64,
    /// The payload is the owned buffer.
    pub owned: bool,
    /// See [`Route::retain`].
    pub retain: bool,
    /// See [`Route::qos`].
    pub qos: QoS,
}

impl Produced {
    /// Nothing produced yet.
    pub const EMPTY: Self = Self {
        topic_len: 0,
        payload_len: 0,
        lagged: 0,
        owned: false,
        retain: false,
        qos: QoS::AtMostOnce,
    };
}

/// A route's value was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteError {
    /// The encoder failed (e.g. scratch too small).
    Encode(EncodeError),
    /// The written topic does not fit the topic scratch.
    TopicTooLong,
    /// The written topic is not a valid topic name.
    TopicInvalid,
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Encode(e) => write!(f, "encode failed: {e}"),
            Self::TopicTooLong => f.write_str("written topic exceeds the topic scratch"),
            Self::TopicInvalid => f.write_str("written topic is not a valid topic name"),
        }
    }
}
impl core::error::Error for RouteError {}

/// One outbound route, type-erased so one table holds routes of different
/// record types. Implemented by [`Link`] only: the trait is sealed (its
/// methods write into the table's private buffers), and is public so a
/// table's route type can be named (`dyn Route + Send`).
pub trait Route: sealed::Sealed {
    /// The record's name.
    fn name(&self) -> &'static str;
    /// The fixed topic, if the topic is static.
    fn fixed_topic(&self) -> Option<&str>;
    /// Takes the next value and encodes it, described in
    /// `out.produced`; `Ready(Ok(more))`: `more` says the source may hold
    /// more (poll the route again), `false` that it registered the waker
    /// and the route waits for it. `Pending` registers `cx`'s waker with
    /// the source. A `RouteError` means the value was skipped.
    fn poll_produce(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Out<'_>,
    ) -> Poll<Result<bool, RouteError>>;
    /// Values skipped by errors on this route (wraps at 2^28 for [`Link`]).
    fn errors(&self) -> u32;
    /// Fixes the route's defaults that depend on its record's kind (retain,
    /// QoS), once, when a table links it, so a pull copies them instead of
    /// deciding them.
    #[doc(hidden)]
    fn settle(&mut self) {}
    /// Re-arms the source's current value (see
    /// [`crate::record::Reader::replay`]).
    fn replay(&mut self) {}
    /// Whether transports that keep the last message per topic should keep
    /// this route's ([`Message::retain`](crate::connector::Message::retain)).
    fn retain(&self) -> bool {
        false
    }
    /// The quality of service this route asks for
    /// ([`Message::qos`](crate::connector::Message::qos)).
    fn qos(&self) -> QoS {
        QoS::AtLeastOnce
    }
}

/// A link's packed QoS choice: 1 to 3 (0: the kind's default).
const fn choice(qos: QoS) -> u32 {
    match qos {
        QoS::AtMostOnce => 1,
        QoS::AtLeastOnce => 2,
        QoS::ExactlyOnce => 3,
    }
}

/// The QoS of each choice (0 is never read once a link is settled).
const QOS_BY_CHOICE: [QoS; 4] = [
    QoS::AtLeastOnce,
    QoS::AtMostOnce,
    QoS::AtLeastOnce,
    QoS::ExactlyOnce,
];

/// The QoS of a route over a record of kind `kind` unless its link sets
/// one ([`Link::qos`]): at least once for every kind; the reasons are on
/// [`QoS`].
pub const fn default_qos(kind: Kind) -> QoS {
    match kind {
        Kind::Latest | Kind::Ring | Kind::Mailbox => QoS::AtLeastOnce,
    }
}

mod sealed {
    /// Implemented for [`super::Link`] only.
    pub trait Sealed {}
}

impl<S, Tp, E, K> sealed::Sealed for Link<S, Tp, E, K> {}

/// An outbound link: source `S` (a [`crate::record::Reader`]), topic `Tp`
/// (`&str` or [`Written`]), encoder `E` of kind `K` ([`Borrowed`] or
/// `Owned`).
pub struct Link<S, Tp, E, K = Borrowed> {
    source: S,
    topic: Tp,
    encoder: E,
    /// Values skipped by errors (30 bits, wrapping) and
    /// [`Link::retained`]'s override of the record kind's default.
    errors: Packed,
    _kind: PhantomData<K>,
}

impl<S, Tp, E> Link<S, Tp, E, Borrowed> {
    /// A link that encodes into the connector's shared scratch.
    pub const fn new(source: S, topic: Tp, encoder: E) -> Self {
        Self {
            source,
            topic,
            encoder,
            errors: Packed::new(0),
            _kind: PhantomData,
        }
    }
}

#[cfg(feature = "alloc")]
impl<S, Tp, E> Link<S, Tp, E, Owned> {
    /// A link whose encoder returns an owned `Vec<u8>` per message.
    pub const fn owned(source: S, topic: Tp, encoder: E) -> Self {
        Self {
            source,
            topic,
            encoder,
            errors: Packed::new(0),
            _kind: PhantomData,
        }
    }
}

impl<S, Tp, E, K> Link<S, Tp, E, K> {
    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Overrides whether this route's messages are retained
    /// ([`Message::retain`](crate::connector::Message::retain)); by default `Latest`
    /// records (state) are, `Ring` and `Mailbox` records are not.
    #[must_use]
    pub const fn retained(mut self, retain: bool) -> Self {
        self.errors = self.errors.with_flag(retain);
        self
    }

    /// Sets the quality of service of this route's messages
    /// ([`Message::qos`](crate::connector::Message::qos)); by default
    /// [`default_qos`] of the record's kind.
    #[must_use]
    pub const fn qos(mut self, qos: QoS) -> Self {
        self.errors = self.errors.with_choice(choice(qos));
        self
    }
}

impl<S, Tp, E, K> Route for Link<S, Tp, E, K>
where
    S: Source,
    Tp: TopicSpec<S::Item>,
    K: EncodeKind<S::Item, E>,
{
    fn name(&self) -> &'static str {
        self.source.name()
    }

    fn fixed_topic(&self) -> Option<&str> {
        self.topic.fixed()
    }

    fn poll_produce(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Out<'_>,
    ) -> Poll<Result<bool, RouteError>> {
        let mut lagged = 0u64;
        let (value, armed) = loop {
            match self.source.poll_recv_armed(cx) {
                // A `Ring` reader always has a value right after `Lagged`
                // (its cursor moved to the oldest value held), so no lag is
                // dropped here.
                Poll::Pending => return Poll::Pending,
                Poll::Ready((Err(RecvError::Lagged(n)), _)) => lagged += n,
                Poll::Ready((Ok(v), armed)) => break (v, armed),
            }
        };
        match self.produce(&value, out, lagged) {
            Ok(()) => Poll::Ready(Ok(!armed)),
            Err(e) => {
                self.errors = self.errors.wrapping_inc();
                Poll::Ready(Err(e))
            }
        }
    }

    fn errors(&self) -> u32 {
        self.errors.value()
    }

    fn replay(&mut self) {
        self.source.replay();
    }

    fn retain(&self) -> bool {
        self.errors
            .flag()
            .unwrap_or(self.source.kind() == Kind::Latest)
    }

    fn qos(&self) -> QoS {
        match self.errors.choice() {
            0 => default_qos(self.source.kind()),
            c => QOS_BY_CHOICE[c as usize],
        }
    }

    fn settle(&mut self) {
        let (retain, qos) = (Route::retain(self), Route::qos(self));
        self.errors = self.errors.with_flag(retain).with_choice(choice(qos));
    }
}

impl<S, Tp, E, K> Link<S, Tp, E, K>
where
    S: Source,
    Tp: TopicSpec<S::Item>,
    K: EncodeKind<S::Item, E>,
{
    fn produce(&self, value: &S::Item, out: &mut Out<'_>, lagged: u64) -> Result<(), RouteError> {
        let topic_len = match self.topic.fixed() {
            Some(_) => 0,
            None => {
                let mut w = TopicWriter::new(out.topic);
                self.topic
                    .write(value, &mut w)
                    .map_err(|_| RouteError::TopicTooLong)?;
                let n = w.len();
                let text =
                    core::str::from_utf8(&out.topic[..n]).map_err(|_| RouteError::TopicInvalid)?;
                Topic::new(text).map_err(|_| RouteError::TopicInvalid)?;
                // 0 means the fixed topic; a valid topic is never empty.
                if n == 0 {
                    return Err(RouteError::TopicInvalid);
                }
                n
            }
        };
        let payload = K::encode(&self.encoder, value, out).map_err(RouteError::Encode)?;
        let p = &mut out.produced;
        p.topic_len = topic_len;
        (p.payload_len, p.owned) = match payload {
            Payload::Scratch(n) => (n, false),
            Payload::Owned => (0, true),
        };
        p.lagged = lagged;
        // Settled when the table linked this route: copied, not decided.
        p.retain = self.errors.on();
        p.qos = QOS_BY_CHOICE[self.errors.choice() as usize];
        Ok(())
    }
}

impl<S, Tp, E, K> fmt::Debug for Link<S, Tp, E, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("errors", &self.errors.value())
            .finish_non_exhaustive()
    }
}
