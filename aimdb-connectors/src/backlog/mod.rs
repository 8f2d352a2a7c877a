//! A durable backlog: values kept on NOR flash (or a file) until the
//! transport's peer has acknowledged them, so an outage longer than a
//! record's RAM ring, or a reboot, loses nothing.
//!
//! A [`Backlog`] is a FIFO of [`Entry`]s in a flash range, through
//! [`sequential-storage`](sequential_storage)'s queue (wear-levelled,
//! power-fail safe, no heap) over any `embedded-storage-async` NOR
//! flash. Values leave it in three steps, and only the last removes one:
//!
//! 1. [`Backlog::push`] stores a value, stamped with the node's boot and
//!    a write sequence ([`Stamp`]);
//! 2. [`Backlog::next`] reads the oldest value not yet handed to the
//!    engine, and [`Backlog::sent`] records that the engine took it;
//! 3. [`Backlog::delivered`] removes the `n` oldest once the peer
//!    acknowledged them (MQTT's PUBACK, the framed peer's ack).
//!
//! A power cut at any point leaves every stored, unacknowledged value in
//! flash exactly once and in order; a value whose acknowledgement was
//! being removed when power went is sent again (at least once). The
//! stamp lets a consumer drop that duplicate.
//!
//! When the range is full, [`Full`] decides: drop the oldest values
//! until the new one fits, or refuse the newest; both are counted. Room
//! comes back a flash page at a time, so dropping may take a value the
//! engine already holds: it is still delivered, and its acknowledgement
//! then removes nothing.
//!
//! The node's boot sequence comes from [`next_boot`], a counter in a
//! flash range of its own, or from the firmware (an RTC, a counter it
//! already keeps): it must grow on every boot.
//!
//! Work per call is bounded: `next` reads at most the entries the engine
//! holds plus one; `delivered` reads and marks `n`; a `push` on a full
//! page erases one page. Host processes use the same queue over a file
//! ([`FileFlash`], feature `std`).

mod durable;
mod entry;
#[cfg(feature = "std")]
mod file;
mod metered;
#[cfg(test)]
mod tests;

use core::ops::Range;

use aimdb_core::connector::Message;
use embedded_storage_async::nor_flash::MultiwriteNorFlash;
use sequential_storage::cache::CacheImpl;
use sequential_storage::queue::{QueueConfig, QueueStorage};

pub use durable::{Durable, Origin};
pub use entry::{Entry, Stamp, HEAD};
#[cfg(feature = "std")]
pub use file::FileFlash;
pub use metered::Metered;
pub use sequential_storage::cache;

use crate::clock::Instant;

/// The cache a backlog of up to `PAGES` erase pages wants: each page's
/// state and where its items are, in RAM (a byte and two words a page),
/// so a call reads one page, not all of them. Items themselves are not
/// cached: each is read once on its way out.
pub type PageCache<const PAGES: usize> = cache::Cache<
    cache::page_states::ArrayPageStates<PAGES>,
    cache::page_pointers::ArrayPagePointers<PAGES>,
    cache::Uncached,
>;

/// An empty [`PageCache`], for [`Backlog::open`] (and [`next_boot`]: one
/// cache type for both keeps one copy of the queue's code in flash).
pub fn page_cache<const PAGES: usize>() -> PageCache<PAGES> {
    cache::Cache::new(
        cache::page_states::ArrayPageStates::new(),
        cache::page_pointers::ArrayPagePointers::new(),
        cache::Uncached,
    )
}

aimdb_core::counter_set! {
    /// A backlog's counters (one writer: its runner).
    pub struct Counters;
    /// A copy of [`Counters`].
    pub struct Stats {
        /// Values stored now.
        depth,
        /// Bytes of those entries (heads included).
        bytes,
        /// Stored values the engine holds, not yet acknowledged.
        in_flight,
        /// Values stored, ever.
        stored,
        /// Values read back and handed to the engine.
        replayed,
        /// Values acknowledged and removed.
        delivered,
        /// Values dropped, oldest first, to make room ([`Full::DropOldest`]).
        dropped,
        /// Values refused for want of room ([`Full::RefuseNewest`]).
        refused,
        /// Values too large for a flash page or the caller's buffer.
        too_large,
        /// Flash pages erased.
        erases,
        /// Bytes written to flash (entries, their heads, removal marks).
        flash_bytes,
        /// Flash operations that failed.
        flash_errors,
        /// Entries found unreadable and removed (written by another
        /// layout).
        malformed,
        /// How far behind the oldest value is, in milliseconds, as of the
        /// runner's last call (0: empty, or stored before this boot).
        behind_ms,
    }
}

#[cfg(feature = "remote")]
impl aimdb_core::remote::BacklogView for Counters {
    fn backlog_counters(&self) -> aimdb_core::remote::BacklogCounters {
        let s = self.snapshot();
        aimdb_core::remote::BacklogCounters {
            depth: s.depth,
            bytes: s.bytes,
            behind_ms: s.behind_ms,
            dropped: s.dropped.wrapping_add(s.refused),
            erases: s.erases,
            flash_errors: s.flash_errors,
        }
    }
}

/// What a full backlog does with a new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Drop the oldest values until the new one fits (a stream where
    /// recent values matter most).
    DropOldest,
    /// Keep what is stored and refuse the new value (an audit trail).
    RefuseNewest,
}

/// Why a backlog operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// The flash failed.
    Flash,
    /// No room, under the [`Full`] policy (counted).
    Full,
    /// The entry is larger than a flash page or the buffer (counted).
    TooLarge,
    /// The queue found flash it cannot read as its own (erase the range).
    Corrupted,
    /// The range is not whole pages, or shorter than one.
    Config,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Flash => "flash operation failed",
            Error::Full => "backlog full",
            Error::TooLarge => "entry too large",
            Error::Corrupted => "backlog flash corrupted",
            Error::Config => "backlog range not whole flash pages",
        })
    }
}

impl core::error::Error for Error {}

fn map<E>(e: sequential_storage::Error<E>) -> Error {
    use sequential_storage::Error as S;
    match e {
        S::Storage { .. } => Error::Flash,
        S::FullStorage => Error::Full,
        S::ItemTooBig | S::BufferTooSmall(_) | S::BufferTooBig => Error::TooLarge,
        _ => Error::Corrupted,
    }
}

/// A durable FIFO of outbound values; see the module docs.
pub struct Backlog<'c, F: MultiwriteNorFlash, C: CacheImpl<()>> {
    queue: QueueStorage<Metered<'c, F>, C>,
    full: Full,
    boot: u32,
    seq: u32,
    depth: u32,
    bytes: u32,
    /// The oldest entries the engine holds.
    sent: u32,
    /// Values the engine holds whose entries were dropped for room.
    gone: u32,
    /// The oldest entry's stamp, when it is from this boot.
    oldest: Option<Stamp>,
    counters: &'c Counters,
}

impl<F: MultiwriteNorFlash, C: CacheImpl<()>> core::fmt::Debug for Backlog<'_, F, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Backlog")
            .field("boot", &self.boot)
            .field("depth", &self.depth)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl<'c, F: MultiwriteNorFlash, C: CacheImpl<()>> Backlog<'c, F, C> {
    /// Opens the backlog in `range` of `flash` (whole erase pages) for a
    /// node in boot `boot`: what an earlier boot stored is found and
    /// counted, entries that do not read as entries are removed
    /// (counted as `malformed`). `buf` holds one entry (the largest
    /// value's topic and payload plus [`HEAD`], rounded up to the flash's
    /// word: the queue reads whole words); `cache` is
    /// sequential-storage's (a page-state and page-pointer cache makes
    /// each call cheaper).
    pub async fn open(
        flash: F,
        range: Range<u32>,
        cache: C,
        boot: u32,
        full: Full,
        counters: &'c Counters,
        buf: &mut [u8],
    ) -> Result<Self, Error> {
        let config = QueueConfig::<Metered<'c, F>>::try_new(range).map_err(|_| Error::Config)?;
        let queue = QueueStorage::new(Metered::new(flash, counters), config, cache);
        let mut b = Self {
            queue,
            full,
            boot,
            seq: 0,
            depth: 0,
            bytes: 0,
            sent: 0,
            gone: 0,
            oldest: None,
            counters,
        };
        b.recover(buf).await?;
        Ok(b)
    }

    /// Counts what is stored; removes what is not an entry.
    async fn recover(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let mut it = self.queue.iter().await.map_err(map)?;
        while let Some(e) = it.next(buf).await.map_err(map)? {
            if entry::decode(&e).is_ok() {
                self.depth += 1;
                self.bytes += e.len() as u32;
            } else {
                e.pop().await.map_err(map)?;
                aimdb_core::counters::bump(&self.counters.malformed, 1);
            }
        }
        self.publish();
        Ok(())
    }

    /// Mirrors the gauges into the counters.
    fn publish(&self) {
        use portable_atomic::Ordering::Relaxed;
        self.counters.depth.store(self.depth, Relaxed);
        self.counters.bytes.store(self.bytes, Relaxed);
        self.counters.in_flight.store(self.sent, Relaxed);
    }

    /// Values stored now.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.depth == 0
    }

    /// Stored values the engine holds (handed out, not acknowledged).
    pub fn in_flight(&self) -> u32 {
        self.sent + self.gone
    }

    /// Whether a stored value waits to be handed to the engine.
    pub fn has_unsent(&self) -> bool {
        self.sent < self.depth
    }

    /// The boot sequence this backlog stamps values with.
    pub fn boot(&self) -> u32 {
        self.boot
    }

    /// Stores `m` (stamped with this boot, the next sequence and `now`),
    /// making room under the [`Full`] policy. `buf` holds one entry.
    /// An entry that does not fit `buf` once rounded up to the flash's
    /// word is refused as [`Error::TooLarge`] (it could not be read back).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe in the sense that a dropped call may or may not
    /// have stored the value (as a power cut would); the backlog stays
    /// consistent either way.
    pub async fn push(
        &mut self,
        m: &Message<'_>,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Stamp, Error> {
        let stamp = Stamp {
            boot: self.boot,
            seq: self.seq,
            at_ms: millis(now),
        };
        let stored = self.put(m, stamp, now, buf).await?;
        self.seq = self.seq.wrapping_add(1);
        Ok(stored)
    }

    /// Stores `m` as [`Self::push`] does, but under the id it came with
    /// from another node's backlog (a gateway forwarding a device's
    /// values keeps the device's ids, so a consumer drops a duplicate
    /// the device sent again); this backlog's own sequence does not move.
    ///
    /// # Errors
    ///
    /// As [`Self::push`].
    pub async fn push_from(
        &mut self,
        m: &Message<'_>,
        origin: crate::engine::Id,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Stamp, Error> {
        let stamp = Stamp {
            boot: origin.boot,
            seq: origin.seq,
            at_ms: millis(now),
        };
        self.put(m, stamp, now, buf).await
    }

    async fn put(
        &mut self,
        m: &Message<'_>,
        stamp: Stamp,
        now: Instant,
        buf: &mut [u8],
    ) -> Result<Stamp, Error> {
        // The queue reads an entry back in whole flash words: one that
        // fits `buf` only unrounded could be stored but never read.
        let word = if F::READ_SIZE > F::WRITE_SIZE {
            F::READ_SIZE
        } else {
            F::WRITE_SIZE
        };
        let Some(n) = entry::encode(m, stamp, buf)
            .ok()
            .filter(|n| n.next_multiple_of(word) <= buf.len())
        else {
            aimdb_core::counters::bump(&self.counters.too_large, 1);
            return Err(Error::TooLarge);
        };
        loop {
            match self.queue.push(&buf[..n], false).await {
                Ok(()) => break,
                Err(sequential_storage::Error::FullStorage) => {
                    if self.full == Full::RefuseNewest || !self.drop_oldest(buf).await? {
                        aimdb_core::counters::bump(&self.counters.refused, 1);
                        return Err(Error::Full);
                    }
                    // Dropping read through `buf`: encode again.
                    entry::encode(m, stamp, buf).map_err(|_| Error::TooLarge)?;
                }
                Err(e) => return Err(self.failed(e)),
            }
        }
        self.depth += 1;
        self.bytes += n as u32;
        if self.depth == 1 {
            self.oldest = Some(stamp);
        }
        aimdb_core::counters::bump(&self.counters.stored, 1);
        self.behind(now);
        self.publish();
        Ok(stamp)
    }

    /// Counts a failed queue operation.
    fn failed<E>(&self, e: sequential_storage::Error<E>) -> Error {
        // Flash errors are counted where they happen ([`Metered`]).
        let e = map(e);
        if e == Error::TooLarge {
            aimdb_core::counters::bump(&self.counters.too_large, 1);
        }
        e
    }

    /// Drops the oldest entry; `false`: nothing is stored. An entry
    /// the engine holds may go too (its page must be freed whole): its
    /// acknowledgement then removes nothing.
    async fn drop_oldest(&mut self, buf: &mut [u8]) -> Result<bool, Error> {
        let len = match self.queue.pop(buf).await {
            Ok(Some(b)) => b.len() as u32,
            Ok(None) => return Ok(false),
            Err(e) => return Err(self.failed(e)),
        };
        self.depth -= 1;
        self.bytes -= len;
        if self.sent > 0 {
            self.sent -= 1;
            self.gone += 1;
        }
        self.oldest = None;
        aimdb_core::counters::bump(&self.counters.dropped, 1);
        Ok(true)
    }

    /// Reads the oldest value not yet handed to the engine into `buf`;
    /// `None` when every stored value is handed out. Call
    /// [`Self::sent`] once the engine took it.
    pub async fn next<'b>(&mut self, buf: &'b mut [u8]) -> Result<Option<Entry<'b>>, Error> {
        if !self.has_unsent() {
            return Ok(None);
        }
        let len = self.first_unsent(buf, false).await?;
        // The queue reads an entry to the start of `buf`.
        entry::decode(&buf[..len])
            .map(Some)
            .map_err(|_| Error::Corrupted)
    }

    /// Reads the oldest entry not handed out into `buf` (removing it with
    /// `pop`); its length.
    async fn first_unsent(&mut self, buf: &mut [u8], pop: bool) -> Result<usize, Error> {
        let mut it = self.queue.iter().await.map_err(map)?;
        let mut i = 0;
        loop {
            let Some(e) = it.next(&mut *buf).await.map_err(map)? else {
                // Counted entries are all in flash: the count was wrong.
                return Err(Error::Corrupted);
            };
            if i == self.sent {
                let len = e.len();
                if pop {
                    e.pop().await.map_err(map)?;
                }
                return Ok(len);
            }
            i += 1;
        }
    }

    /// Removes the value [`Self::next`] returned: the engine can never
    /// take it (larger than it sends). Counted as `too_large`.
    pub async fn discard(&mut self, now: Instant, buf: &mut [u8]) -> Result<(), Error> {
        if !self.has_unsent() {
            return Ok(());
        }
        let len = self.first_unsent(buf, true).await? as u32;
        self.depth -= 1;
        self.bytes -= len;
        if self.sent == 0 {
            self.oldest = None;
        }
        aimdb_core::counters::bump(&self.counters.too_large, 1);
        self.behind(now);
        self.publish();
        Ok(())
    }

    /// The value [`Self::next`] returned was taken by the engine.
    pub fn sent(&mut self) {
        if self.sent < self.depth {
            self.sent += 1;
            aimdb_core::counters::bump(&self.counters.replayed, 1);
            self.publish();
        }
    }

    /// The engine lost what it held (it was reset): hand everything out
    /// again from the oldest.
    pub fn resend(&mut self) {
        self.sent = 0;
        self.gone = 0;
        self.publish();
    }

    /// The `n` oldest values handed out were acknowledged: removed.
    /// `buf` holds one entry.
    pub async fn delivered(&mut self, n: u32, now: Instant, buf: &mut [u8]) -> Result<(), Error> {
        let skip = n.min(self.gone);
        self.gone -= skip;
        let n = (n - skip).min(self.sent);
        if n > 0 {
            // One walk: the `n` oldest removed, then the new oldest read
            // for its age.
            let mut it = self.queue.iter().await.map_err(map)?;
            for _ in 0..n {
                let Some(e) = it.next(&mut *buf).await.map_err(map)? else {
                    return Err(Error::Corrupted);
                };
                let len = e.len() as u32;
                e.pop().await.map_err(map)?;
                self.depth -= 1;
                self.sent -= 1;
                self.bytes -= len;
                aimdb_core::counters::bump(&self.counters.delivered, 1);
            }
            let boot = self.boot;
            self.oldest = match it.next(&mut *buf).await.map_err(map)? {
                Some(e) => entry::decode(&e)
                    .ok()
                    .map(|e| e.stamp)
                    .filter(|s| s.boot == boot),
                None => None,
            };
        }
        self.behind(now);
        self.publish();
        Ok(())
    }

    /// Updates `behind_ms` for `now`.
    pub fn behind(&self, now: Instant) {
        let ms = match self.oldest {
            Some(s) if self.depth > 0 => millis(now).wrapping_sub(s.at_ms),
            _ => 0,
        };
        self.counters
            .behind_ms
            .store(ms, portable_atomic::Ordering::Relaxed);
    }

    /// Gives the flash back.
    pub fn into_flash(self) -> F {
        self.queue.destroy().0.into_inner()
    }
}

/// `now` in milliseconds, wrapping (what a stamp keeps).
fn millis(now: Instant) -> u32 {
    (now.as_micros() / 1000) as u32
}

/// The next boot sequence from a counter kept in `range` of `flash`
/// (whole erase pages, apart from any backlog's): one more than the
/// largest stored, stored before the older ones are removed, so a power
/// cut at any point never hands out a sequence twice.
///
/// Its writes and erases count in `counters` (a backlog's: the same
/// flash wears).
pub async fn next_boot<F: MultiwriteNorFlash, C: CacheImpl<()>>(
    flash: F,
    range: Range<u32>,
    cache: C,
    counters: &Counters,
) -> Result<u32, Error> {
    let config = QueueConfig::<Metered<'_, F>>::try_new(range).map_err(|_| Error::Config)?;
    let mut q = QueueStorage::new(Metered::new(flash, counters), config, cache);
    let mut buf = [0u8; 4];
    let mut last = None::<u32>;
    let mut it = q.iter().await.map_err(map)?;
    let mut count = 0u32;
    while let Some(e) = it.next(&mut buf).await.map_err(map)? {
        if let Ok(b) = <[u8; 4]>::try_from(&e[..]) {
            let v = u32::from_le_bytes(b);
            last = Some(last.map_or(v, |l: u32| l.max(v)));
        }
        count += 1;
    }
    let boot = last.map_or(0, |l| l.wrapping_add(1));
    q.push(&boot.to_le_bytes(), true).await.map_err(map)?;
    // The new count is stored; the old ones can go.
    for _ in 0..count {
        q.pop(&mut buf).await.map_err(map)?;
    }
    Ok(boot)
}
