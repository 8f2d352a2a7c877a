//! Keyed records: one record slot per key (a device id, a room name), the key
//! claimed on first sighting.
//!
//! [`Keyed`] has a fixed capacity (no heap; [`KeyError::Full`] when every
//! slot is claimed). [`KeyedVec`] (feature `alloc`) grows by exactly one
//! allocation per new key, and never allocates again for a known key.
//! Known-key lookup compares a 32-bit hash first, then the key bytes.

use core::cell::RefCell;
use core::fmt;
use core::future::poll_fn;
use core::task::{Context, Poll, Waker};

use embassy_sync::blocking_mutex::raw::RawMutex;
use embassy_sync::blocking_mutex::Mutex;

use super::{Buffer, Record, RecvError, SubscribeError, Take};
use crate::topic::fnv1a;

/// Longest key, in bytes.
pub const KEY_MAX_LEN: usize = 32;

/// Claiming or writing a key failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// Every slot of a fixed-capacity table is claimed.
    Full,
    /// The key is longer than [`KEY_MAX_LEN`] bytes.
    TooLong,
    /// The key is empty.
    Empty,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "key table full",
            Self::TooLong => "key longer than KEY_MAX_LEN",
            Self::Empty => "empty key",
        })
    }
}
impl core::error::Error for KeyError {}

/// A keyed write failed: why, and the value, handed back (as `heapless`
/// does when a collection is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyWriteError<T> {
    /// Why.
    pub error: KeyError,
    /// The value that was not written.
    pub value: T,
}

impl<T> fmt::Display for KeyWriteError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "keyed write refused: {}", self.error)
    }
}
impl<T: fmt::Debug> core::error::Error for KeyWriteError<T> {}

/// A key, as a keyed table keeps it and hands it out.
pub type Key = heapless::String<KEY_MAX_LEN>;

fn check_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        Err(KeyError::Empty)
    } else if key.len() > KEY_MAX_LEN {
        Err(KeyError::TooLong)
    } else {
        Ok(())
    }
}

/// Stores `w` in `slot` unless the stored waker would wake the same task;
/// returns the replaced one, to drop outside the critical section (a drop
/// runs foreign code).
fn store_waker(slot: &mut Option<Waker>, w: Option<&Waker>) -> Option<Waker> {
    match (w, &*slot) {
        (None, _) => None,
        (Some(w), Some(o)) if o.will_wake(w) => None,
        (Some(w), _) => slot.replace(w.clone()),
    }
}

/// The round-robin of a changes reader over `n` slots from `cursor`: the
/// first slot whose `take` has something, and what (a value, or the lag of
/// a `Ring` reader). Moves the cursor past it.
fn next_change<T>(
    n: usize,
    cursor: &mut usize,
    mut take: impl FnMut(usize) -> Take<T>,
) -> Option<(usize, Result<T, RecvError>)> {
    for k in 0..n {
        let i = (*cursor + k) % n;
        let got = match take(i) {
            Take::Empty => continue,
            Take::Value(v) => Ok(v),
            Take::Lagged(lost) => Err(RecvError::Lagged(lost)),
        };
        *cursor = i + 1;
        return Some((i, got));
    }
    None
}

struct KeyTable<const K: usize> {
    hashes: [u32; K],
    keys: [Key; K],
    len: usize,
    /// A [`KeyedChanges`] exists: every claimed slot has a reader of its
    /// own (`watch_reader`), subscribed when the key is claimed.
    watched: bool,
    watch_reader: [u8; K],
    /// The watcher's waker, woken when a key is claimed.
    watch_waker: Option<Waker>,
}

impl<const K: usize> KeyTable<K> {
    fn find(&self, hash: u32, key: &str) -> Option<usize> {
        (0..self.len).find(|&i| self.hashes[i] == hash && self.keys[i] == key)
    }
}

/// Up to `K` keyed slots, each a `Record<M, B, R>`; no heap.
pub struct Keyed<M: RawMutex, B: Buffer, const K: usize, const R: usize> {
    name: &'static str,
    table: Mutex<M, RefCell<KeyTable<K>>>,
    slots: [Record<M, B, R>; K],
}

impl<M: RawMutex, B: Buffer, const K: usize, const R: usize> Keyed<M, B, K, R> {
    /// An empty table called `name`. Slot records are unnamed; the table
    /// carries the name.
    #[cfg(not(aimdb_loom))]
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            table: Mutex::new(RefCell::new(KeyTable {
                hashes: [0; K],
                keys: [const { Key::new() }; K],
                len: 0,
                watched: false,
                watch_reader: [0; K],
                watch_waker: None,
            })),
            slots: [const { Record::new("") }; K],
        }
    }
    /// An empty table called `name`.
    #[cfg(aimdb_loom)]
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            table: Mutex::new(RefCell::new(KeyTable {
                hashes: [0; K],
                keys: core::array::from_fn(|_| Key::new()),
                len: 0,
                watched: false,
                watch_reader: [0; K],
                watch_waker: None,
            })),
            slots: core::array::from_fn(|_| Record::new("")),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Number of claimed keys.
    pub fn len(&self) -> usize {
        self.table.lock(|t| t.borrow().len)
    }

    /// Whether no key is claimed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slot of a known key.
    pub fn get(&self, key: &str) -> Option<&Record<M, B, R>> {
        let h = fnv1a(key.as_bytes());
        let i = self.table.lock(|t| t.borrow().find(h, key))?;
        Some(&self.slots[i])
    }

    /// The slot of `key`, claiming a free one on first sighting.
    pub fn claim(&self, key: &str) -> Result<&Record<M, B, R>, KeyError> {
        check_key(key)?;
        let h = fnv1a(key.as_bytes());
        let mut wake = None;
        let i = self.table.lock(|t| {
            let mut t = t.borrow_mut();
            if let Some(i) = t.find(h, key) {
                return Ok(i);
            }
            let i = t.len;
            if i == K {
                return Err(KeyError::Full);
            }
            if t.watched {
                // Before the key is visible, so the watcher's reader is
                // there for the slot's first write. A fresh slot has all
                // `R >= 1` reader slots free.
                t.watch_reader[i] = self.slots[i].subscribe_slot().map_err(|_| KeyError::Full)?;
                wake = t.watch_waker.clone();
            }
            t.hashes[i] = h;
            t.keys[i].clear();
            // Length checked above, so the push cannot fail.
            t.keys[i].push_str(key).map_err(|_| KeyError::TooLong)?;
            t.len += 1;
            Ok(i)
        })?;
        if let Some(w) = wake {
            w.wake();
        }
        Ok(&self.slots[i])
    }

    /// A reader over every key's writes: each receive yields a key and the
    /// value written to it, round-robin over the keys with something new
    /// (a busy key cannot starve the others), including keys claimed after
    /// this call. It sees each slot as a [`Reader`](super::Reader)
    /// subscribed now would: a `Latest` slot's current value first, a
    /// `Ring` slot what is written from now on.
    ///
    /// It takes one reader slot of every slot record (of `R`), and one
    /// `KeyedChanges` per table may exist at a time:
    /// [`SubscribeError::Full`] otherwise. A receive costs a look at each
    /// claimed key (`O(K)`), fine for the tens or hundreds of keys a keyed
    /// table holds; no allocation.
    ///
    /// ```
    /// use aimdb_core::record::{Keyed, Latest};
    /// use embassy_sync::blocking_mutex::raw::NoopRawMutex;
    ///
    /// let rooms: Keyed<NoopRawMutex, Latest<i16>, 8, 2> = Keyed::new("temp");
    /// let mut changes = rooms.changes().unwrap();
    /// rooms.write("kitchen", 215).unwrap();
    /// rooms.write("hall", 198).unwrap();
    /// rooms.write("kitchen", 217).unwrap(); // coalesces with 215 (Latest)
    /// let (key, value) = changes.try_recv().unwrap();
    /// assert_eq!((key.as_str(), value), ("kitchen", Ok(217)));
    /// let (key, value) = changes.try_recv().unwrap();
    /// assert_eq!((key.as_str(), value), ("hall", Ok(198)));
    /// assert!(changes.try_recv().is_none());
    /// ```
    pub fn changes(&self) -> Result<KeyedChanges<'_, M, B, K, R>, SubscribeError> {
        let mut reader = [0u8; K];
        let len = self.table.lock(|t| {
            let mut t = t.borrow_mut();
            if t.watched {
                return Err(SubscribeError::Full);
            }
            for i in 0..t.len {
                match self.slots[i].subscribe_slot() {
                    Ok(r) => reader[i] = r,
                    Err(e) => {
                        for (j, &r) in reader.iter().enumerate().take(i) {
                            self.slots[j].unsubscribe(r as usize);
                        }
                        return Err(e);
                    }
                }
            }
            t.watch_reader = reader;
            t.watched = true;
            Ok(t.len)
        })?;
        Ok(KeyedChanges {
            table: self,
            reader,
            known: len,
            cursor: 0,
        })
    }

    /// Writes `value` to `key`'s slot, claiming it if new. When the table
    /// is full (or the key invalid) the value comes back in the error.
    pub fn write(&self, key: &str, value: B::Item) -> Result<(), KeyWriteError<B::Item>> {
        match self.claim(key) {
            Ok(slot) => {
                slot.write(value);
                Ok(())
            }
            Err(error) => Err(KeyWriteError { error, value }),
        }
    }

    /// Calls `f` with each claimed key and its slot, in claim order. The
    /// slot reference lives as long as the table (for a `static` table,
    /// for ever), so it may be kept past the call.
    pub fn for_each<'t>(&'t self, mut f: impl FnMut(&str, &'t Record<M, B, R>)) {
        let len = self.len();
        for i in 0..len {
            let key = self.table.lock(|t| t.borrow().keys[i].clone());
            f(&key, &self.slots[i]);
        }
    }
}

/// Every key's writes, as `(key, value)`; see [`Keyed::changes`].
pub struct KeyedChanges<'t, M: RawMutex, B: Buffer, const K: usize, const R: usize> {
    table: &'t Keyed<M, B, K, R>,
    /// This watcher's reader slot in each claimed slot record.
    reader: [u8; K],
    /// Slots adopted so far (`reader` is valid below).
    known: usize,
    /// Where the next round-robin look starts.
    cursor: usize,
}

impl<M: RawMutex, B: Buffer, const K: usize, const R: usize> KeyedChanges<'_, M, B, K, R> {
    /// Adopts keys claimed since the last look and, with `waker`, asks to
    /// be woken by the next claim.
    fn adopt(&mut self, waker: Option<&Waker>) {
        let old = self.table.table.lock(|t| {
            let mut t = t.borrow_mut();
            let old = store_waker(&mut t.watch_waker, waker);
            let len = t.len;
            self.reader[self.known..len].copy_from_slice(&t.watch_reader[self.known..len]);
            self.known = len;
            old
        });
        drop(old);
    }

    fn look(&mut self, waker: Option<&Waker>) -> Option<(Key, Result<B::Item, RecvError>)> {
        self.adopt(waker);
        let (slots, reader) = (&self.table.slots, &self.reader);
        let (i, got) = next_change(self.known, &mut self.cursor, |i| {
            slots[i].take(reader[i] as usize, waker, false).take
        })?;
        let key = self.table.table.lock(|t| t.borrow().keys[i].clone());
        Some((key, got))
    }

    /// The next key with something new and its value, if any
    /// (`Err(Lagged)` for a `Ring` slot whose reader fell behind).
    pub fn try_recv(&mut self) -> Option<(Key, Result<B::Item, RecvError>)> {
        self.look(None)
    }

    /// Polls for the next key with something new. Every claimed key and
    /// the table are registered before `Pending`, so no write is missed.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<(Key, Result<B::Item, RecvError>)> {
        match self.look(Some(cx.waker())) {
            Some(c) => Poll::Ready(c),
            None => Poll::Pending,
        }
    }

    /// Waits for the next key with something new.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a value is taken only in the poll that returns it.
    pub async fn recv(&mut self) -> (Key, Result<B::Item, RecvError>) {
        poll_fn(|cx| self.poll_recv(cx)).await
    }
}

impl<M: RawMutex, B: Buffer, const K: usize, const R: usize> Drop for KeyedChanges<'_, M, B, K, R> {
    fn drop(&mut self) {
        let table = self.table;
        let old = table.table.lock(|t| {
            let mut t = t.borrow_mut();
            for i in 0..t.len {
                // Keys claimed since the last look have their reader in
                // the table only.
                table.slots[i].unsubscribe(t.watch_reader[i] as usize);
            }
            t.watched = false;
            t.watch_waker.take()
        });
        drop(old);
    }
}

impl<M: RawMutex, B: Buffer, const K: usize, const R: usize> fmt::Debug
    for KeyedChanges<'_, M, B, K, R>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedChanges")
            .field("table", &self.table.name)
            .field("keys", &self.known)
            .finish_non_exhaustive()
    }
}

impl<M: RawMutex, B: Buffer, const K: usize, const R: usize> fmt::Debug for Keyed<M, B, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("name", &self.name)
            .field("capacity", &K)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// Write access to a keyed table whose buffer kind is erased: what a keyed
/// inbound link writes through.
pub trait KeyedSink<T> {
    /// The table's name.
    fn name(&self) -> &'static str;
    /// Writes `value` to `key`'s slot, claiming it on first sighting.
    fn write_key(&self, key: &str, value: T) -> Result<(), KeyError>;
    /// The slots' buffer kind (`Latest` unless said otherwise).
    fn kind(&self) -> super::Kind {
        super::Kind::Latest
    }
}

impl<M: RawMutex, B: Buffer, const K: usize, const R: usize> KeyedSink<B::Item>
    for Keyed<M, B, K, R>
{
    fn name(&self) -> &'static str {
        self.name
    }
    fn write_key(&self, key: &str, value: B::Item) -> Result<(), KeyError> {
        self.write(key, value).map_err(|e| e.error)
    }
    fn kind(&self) -> super::Kind {
        B::KIND
    }
}

#[cfg(feature = "alloc")]
mod growable {
    use alloc::sync::Arc;
    use alloc::vec::Vec;

    use super::*;

    /// A claimed key of a [`KeyedVec`] and its record.
    pub struct KeySlot<M: RawMutex, B: Buffer, const R: usize> {
        hash: u32,
        key: Key,
        record: Record<M, B, R>,
        /// The watcher's reader slot in `record`, when a
        /// [`KeyedVecChanges`] existed as the key was claimed (a watcher
        /// that finds the key already there keeps its own).
        watch_reader: u8,
    }

    impl<M: RawMutex, B: Buffer, const R: usize> KeySlot<M, B, R> {
        /// The key.
        pub fn key(&self) -> &str {
            &self.key
        }
        /// The key's record.
        pub fn record(&self) -> &Record<M, B, R> {
            &self.record
        }
    }

    struct Index<M: RawMutex, B: Buffer, const R: usize> {
        slots: Vec<Arc<KeySlot<M, B, R>>>,
        /// A [`KeyedVecChanges`] exists (see [`Keyed::changes`]).
        watched: bool,
        watch_waker: Option<Waker>,
    }

    /// A keyed table that grows: one allocation (the slot) per new key.
    /// The index is reserved up front ([`KeyedVec::with_capacity`]); past
    /// that reservation it also reallocates, amortised.
    pub struct KeyedVec<M: RawMutex, B: Buffer, const R: usize> {
        name: &'static str,
        index: Mutex<M, RefCell<Index<M, B, R>>>,
    }

    impl<M: RawMutex, B: Buffer, const R: usize> KeyedVec<M, B, R> {
        /// An empty table with room reserved for `keys` keys.
        pub fn with_capacity(name: &'static str, keys: usize) -> Self {
            Self {
                name,
                index: Mutex::new(RefCell::new(Index {
                    slots: Vec::with_capacity(keys),
                    watched: false,
                    watch_waker: None,
                })),
            }
        }

        /// Number of claimed keys.
        pub fn len(&self) -> usize {
            self.index.lock(|i| i.borrow().slots.len())
        }

        /// Whether no key is claimed.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// The slot of a known key (an `Arc` clone: no allocation).
        pub fn get(&self, key: &str) -> Option<Arc<KeySlot<M, B, R>>> {
            let h = fnv1a(key.as_bytes());
            self.index.lock(|i| {
                i.borrow()
                    .slots
                    .iter()
                    .find(|s| s.hash == h && s.key == key)
                    .cloned()
            })
        }

        /// The claimed keys and their slots, in claim order: `Arc` clones,
        /// a snapshot (no lock held while the caller uses it; one
        /// allocation for the returned `Vec`).
        pub fn slots(&self) -> Vec<Arc<KeySlot<M, B, R>>> {
            self.index.lock(|i| i.borrow().slots.clone())
        }

        /// Writes `value` to `key`'s slot, claiming it if new; an invalid
        /// key hands the value back in the error.
        pub fn write(&self, key: &str, value: B::Item) -> Result<(), KeyWriteError<B::Item>> {
            match self.slot_for(key) {
                Ok(slot) => {
                    slot.record.write(value);
                    Ok(())
                }
                Err(error) => Err(KeyWriteError { error, value }),
            }
        }

        fn slot_for(&self, key: &str) -> Result<Arc<KeySlot<M, B, R>>, KeyError> {
            check_key(key)?;
            let h = fnv1a(key.as_bytes());
            let mut wake = None;
            let slot = self.index.lock(|i| {
                let mut i = i.borrow_mut();
                if let Some(s) = i.slots.iter().find(|s| s.hash == h && s.key == key) {
                    return Ok(Arc::clone(s));
                }
                let mut k = Key::new();
                k.push_str(key).map_err(|_| KeyError::TooLong)?;
                let record = Record::new(self.name);
                let mut watch_reader = 0;
                if i.watched {
                    // Before the slot is visible: the watcher's reader is
                    // there for its first write (a fresh record has all
                    // `R >= 1` reader slots free).
                    watch_reader = record.subscribe_slot().map_err(|_| KeyError::Full)?;
                    wake = i.watch_waker.clone();
                }
                let s = Arc::new(KeySlot {
                    hash: h,
                    key: k,
                    record,
                    watch_reader,
                });
                i.slots.push(Arc::clone(&s));
                Ok(s)
            });
            if let Some(w) = wake {
                w.wake();
            }
            slot
        }

        /// A reader over every key's writes, as [`Keyed::changes`]
        /// (round-robin, keys claimed later included, one per table, one
        /// reader slot of each key's record). Its list of keys grows with
        /// the table: a new key costs it one amortised `Vec` push when it
        /// first looks, never the writer.
        pub fn changes(&self) -> Result<KeyedVecChanges<'_, M, B, R>, SubscribeError> {
            self.index.lock(|i| {
                let mut i = i.borrow_mut();
                if i.watched {
                    return Err(SubscribeError::Full);
                }
                let mut readers = Vec::with_capacity(i.slots.len());
                for s in &i.slots {
                    match s.record.subscribe_slot() {
                        Ok(r) => readers.push(r),
                        Err(e) => {
                            for (s, &r) in i.slots.iter().zip(&readers) {
                                s.record.unsubscribe(r as usize);
                            }
                            return Err(e);
                        }
                    }
                }
                i.watched = true;
                Ok(KeyedVecChanges {
                    index: &self.index,
                    slots: i.slots.iter().cloned().zip(readers).collect(),
                    cursor: 0,
                })
            })
        }
    }

    /// Every key's writes of a [`KeyedVec`]; see [`KeyedVec::changes`].
    pub struct KeyedVecChanges<'t, M: RawMutex, B: Buffer, const R: usize> {
        index: &'t Mutex<M, RefCell<Index<M, B, R>>>,
        /// Adopted slots and this watcher's reader slot in each.
        slots: Vec<(Arc<KeySlot<M, B, R>>, u8)>,
        cursor: usize,
    }

    impl<M: RawMutex, B: Buffer, const R: usize> KeyedVecChanges<'_, M, B, R> {
        fn look(&mut self, waker: Option<&Waker>) -> Option<(Key, Result<B::Item, RecvError>)> {
            let mut new: Vec<_> = Vec::new();
            let old = self.index.lock(|i| {
                let i = &mut *i.borrow_mut();
                if i.slots.len() > self.slots.len() {
                    new.extend(i.slots[self.slots.len()..].iter().cloned());
                }
                store_waker(&mut i.watch_waker, waker)
            });
            drop(old);
            for s in new {
                let r = s.watch_reader;
                self.slots.push((s, r));
            }
            let slots = &self.slots;
            let (i, got) = next_change(slots.len(), &mut self.cursor, |i| {
                slots[i]
                    .0
                    .record
                    .take(slots[i].1 as usize, waker, false)
                    .take
            })?;
            Some((slots[i].0.key.clone(), got))
        }

        /// See [`KeyedChanges::try_recv`].
        pub fn try_recv(&mut self) -> Option<(Key, Result<B::Item, RecvError>)> {
            self.look(None)
        }

        /// See [`KeyedChanges::poll_recv`].
        pub fn poll_recv(
            &mut self,
            cx: &mut Context<'_>,
        ) -> Poll<(Key, Result<B::Item, RecvError>)> {
            match self.look(Some(cx.waker())) {
                Some(c) => Poll::Ready(c),
                None => Poll::Pending,
            }
        }

        /// See [`KeyedChanges::recv`] (cancel-safe).
        pub async fn recv(&mut self) -> (Key, Result<B::Item, RecvError>) {
            poll_fn(|cx| self.poll_recv(cx)).await
        }
    }

    impl<M: RawMutex, B: Buffer, const R: usize> Drop for KeyedVecChanges<'_, M, B, R> {
        fn drop(&mut self) {
            let old = self.index.lock(|i| {
                let mut i = i.borrow_mut();
                // Adopted slots: the reader this watcher holds (for keys
                // that existed before it, not the slot's `watch_reader`).
                // Keys claimed since its last look: theirs, set at claim.
                for (s, r) in &self.slots {
                    s.record.unsubscribe(*r as usize);
                }
                for s in &i.slots[self.slots.len()..] {
                    s.record.unsubscribe(s.watch_reader as usize);
                }
                i.watched = false;
                i.watch_waker.take()
            });
            drop(old);
        }
    }

    impl<M: RawMutex, B: Buffer, const R: usize> fmt::Debug for KeyedVecChanges<'_, M, B, R> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("KeyedVecChanges")
                .field("keys", &self.slots.len())
                .finish_non_exhaustive()
        }
    }

    impl<M: RawMutex, B: Buffer, const R: usize> KeyedSink<B::Item> for KeyedVec<M, B, R> {
        fn name(&self) -> &'static str {
            self.name
        }
        fn write_key(&self, key: &str, value: B::Item) -> Result<(), KeyError> {
            self.write(key, value).map_err(|e| e.error)
        }
        fn kind(&self) -> crate::record::Kind {
            B::KIND
        }
    }
}

#[cfg(feature = "alloc")]
pub use growable::{KeySlot, KeyedVec, KeyedVecChanges};
