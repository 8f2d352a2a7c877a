//! Inbound links: what a matched frame is decoded by and written into.

use core::fmt;
use core::marker::PhantomData;

use crate::packed::Packed;

use crate::codec::{Decode, DecodeError};
use crate::connector::DispatchError;
use crate::record::{KeyError, KeyedSink, Sink};

/// Payload limit of a link unless set with `with_max_payload`.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024;

/// The receiving end of an inbound route, type-erased so one table holds
/// links to records of different types. Implemented by [`Link`]
/// and [`KeyedLink`]; implement it for any other receiver (a channel, a
/// callback): `deliver` decodes and writes, and on a bad payload returns
/// the [`DispatchError`] without writing anything.
pub trait Route {
    /// Name of the record written (for diagnostics).
    fn name(&self) -> &'static str;
    /// Largest payload accepted, in bytes.
    fn max_payload(&self) -> usize;
    /// Decodes `payload` and writes it. `key` is the key level's text for a
    /// keyed route, `None` otherwise. On error nothing is written.
    fn deliver(&self, key: Option<&str>, payload: &[u8]) -> Result<(), DispatchError>;
    /// Whether a *retained* message (state a broker kept from the past)
    /// is applied; see [`Dispatch::dispatch_retained`](super::Dispatch::dispatch_retained).
    fn apply_retained(&self) -> bool {
        true
    }
}

fn malformed(e: DecodeError) -> DispatchError {
    DispatchError::MalformedPayload(e)
}

/// An inbound link into one record: a sink (usually a `Record`) and a
/// decoder.
pub struct Link<'r, S: ?Sized, D, T> {
    sink: &'r S,
    decoder: D,
    /// The payload limit (30 bits) and [`Link::with_retained`]'s override
    /// of the record kind's default.
    limit: Packed,
    _t: PhantomData<fn() -> T>,
}

impl<'r, S: ?Sized, D, T> Link<'r, S, D, T> {
    /// Decodes with `decoder` and writes into `sink`.
    pub const fn new(sink: &'r S, decoder: D) -> Self {
        Self {
            sink,
            decoder,
            limit: Packed::new(DEFAULT_MAX_PAYLOAD),
            _t: PhantomData,
        }
    }

    /// Sets the payload limit (larger payloads are rejected unread; at most
    /// 2^30 − 1 bytes).
    pub const fn with_max_payload(mut self, bytes: usize) -> Self {
        self.limit = self.limit.with_value(bytes);
        self
    }

    /// Overrides whether retained messages are applied
    /// ([`Route::apply_retained`]); by default they are, except into
    /// `Mailbox` records (a command kept by a broker is not executed again
    /// at every start).
    pub const fn with_retained(mut self, apply: bool) -> Self {
        self.limit = self.limit.with_flag(apply);
        self
    }
}

impl<S: Sink<T> + ?Sized, D: Decode<T>, T> Route for Link<'_, S, D, T> {
    fn name(&self) -> &'static str {
        self.sink.name()
    }
    fn max_payload(&self) -> usize {
        self.limit.value() as usize
    }
    fn deliver(&self, _key: Option<&str>, payload: &[u8]) -> Result<(), DispatchError> {
        let v = self.decoder.decode(payload).map_err(malformed)?;
        self.sink.write(v);
        Ok(())
    }
    fn apply_retained(&self) -> bool {
        self.limit
            .flag()
            .unwrap_or(self.sink.kind() != crate::record::Kind::Mailbox)
    }
}

/// An inbound link into a keyed table: the route's key level picks the slot.
///
/// ```
/// use aimdb_core::codec::Postcard;
/// use aimdb_core::connector::DispatchError;
/// use aimdb_core::inbound::{Dispatch, KeyedLink};
/// use aimdb_core::record::{Keyed, Latest};
/// use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
///
/// // One `Latest<i16>` slot per device id, at most 2 ids.
/// static TEMPS: Keyed<Cs, Latest<i16>, 2, 1> = Keyed::new("temps");
/// let link = KeyedLink::new(&TEMPS, Postcard);
/// let mut b = Dispatch::<1, 4>::builder();
/// b.link_keyed("sensors/+/temp", 1, &link); // level 1 is the key
/// let mut d = b.build().unwrap();
///
/// assert_eq!(d.dispatch(b"sensors/kitchen/temp", &[0xae, 0x03]), Ok(1));
/// assert_eq!(d.dispatch(b"sensors/hall/temp", &[0x02]), Ok(1));
/// assert_eq!(TEMPS.get("kitchen").unwrap().latest(), Some(215));
/// // A third id: the table is full; counted, nothing written.
/// assert_eq!(
///     d.dispatch(b"sensors/cellar/temp", &[0x02]),
///     Err(DispatchError::KeyTableFull)
/// );
/// assert_eq!(d.stats().key_table_full, 1);
/// ```
pub struct KeyedLink<'r, K: ?Sized, D, T> {
    table: &'r K,
    decoder: D,
    max_payload: usize,
    _t: PhantomData<fn() -> T>,
}

impl<'r, K: ?Sized, D, T> KeyedLink<'r, K, D, T> {
    /// Decodes with `decoder` and writes into `table`'s slot for the key.
    pub const fn new(table: &'r K, decoder: D) -> Self {
        Self {
            table,
            decoder,
            max_payload: DEFAULT_MAX_PAYLOAD,
            _t: PhantomData,
        }
    }

    /// Sets the payload limit.
    pub const fn with_max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }
}

impl<K: KeyedSink<T> + ?Sized, D: Decode<T>, T> Route for KeyedLink<'_, K, D, T> {
    fn name(&self) -> &'static str {
        self.table.name()
    }
    fn max_payload(&self) -> usize {
        self.max_payload
    }
    fn deliver(&self, key: Option<&str>, payload: &[u8]) -> Result<(), DispatchError> {
        let key = key.ok_or(DispatchError::KeyInvalid)?;
        if key.len() > crate::record::KEY_MAX_LEN {
            return Err(DispatchError::KeyInvalid);
        }
        // Decode first: a malformed payload must not claim a key.
        let v = self.decoder.decode(payload).map_err(malformed)?;
        self.table.write_key(key, v).map_err(|e| match e {
            KeyError::Full => DispatchError::KeyTableFull,
            _ => DispatchError::KeyInvalid,
        })
    }
    fn apply_retained(&self) -> bool {
        self.table.kind() != crate::record::Kind::Mailbox
    }
}

impl<S: ?Sized, D, T> fmt::Debug for Link<'_, S, D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("max_payload", &self.limit.value())
            .finish_non_exhaustive()
    }
}

impl<K: ?Sized, D, T> fmt::Debug for KeyedLink<'_, K, D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLink")
            .field("max_payload", &self.max_payload)
            .finish_non_exhaustive()
    }
}
