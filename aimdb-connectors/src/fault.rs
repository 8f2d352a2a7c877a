//! A fault-injecting byte stream: a **testing aid**.
//!
//! [`Faulty`] wraps one half of any `embedded-io-async` transport (a
//! [`Read`] or a [`Write`]) and damages the bytes passing through it
//! according to a deterministic [`Plan`]: drop, truncate, duplicate or
//! corrupt bytes, split every call into small pieces, stall for a few
//! polls, and close the connection at a chosen byte. Put it in front of
//! the framed connector (or your own transport) to see what survives:
//!
//! ```
//! use aimdb_connectors::fault::{Fault, Faulty, Plan};
//! use aimdb_connectors::loopback::Pair;
//! use embassy_sync::blocking_mutex::raw::NoopRawMutex;
//! use embedded_io_async::{Read, Write};
//!
//! const FAULTS: &[Fault] = &[Fault::Drop { at: 2, len: 2 }, Fault::Close { at: 6 }];
//! let pair = Pair::<NoopRawMutex, 64>::new();
//! let ((_, tx), (mut rx, _)) = (pair.a(), pair.b());
//! let mut tx = Faulty::new(tx, Plan::new().script(FAULTS).split(3));
//! futures::executor::block_on(async {
//!     let mut sent = 0;
//!     while let Ok(n) = tx.write(&b"abcdefgh"[sent..]).await {
//!         sent += n;
//!     }
//!     let mut got = [0u8; 8];
//!     let n = rx.read(&mut got).await.unwrap();
//!     assert_eq!(&got[..n], b"abef"); // "cd" dropped, closed before "g"
//! });
//! assert_eq!(tx.injected().dropped, 2);
//! assert!(tx.injected().closed);
//! ```
//!
//! # Positions
//!
//! Every fault is placed at an **offset in the original stream**: the
//! bytes the writer hands to a wrapped [`Write`], or the bytes a wrapped
//! [`Read`] takes from its inner reader. Offsets do not depend on how the
//! stream is cut into calls, so a plan damages the same bytes whatever the
//! chunking. Faults in a script are applied in order; a fault whose offset
//! was skipped over (inside a dropped range) applies at the next byte.
//!
//! [`Plan::random`] adds faults drawn from a seeded generator: the same
//! seed and the same byte stream give the same faults.
//!
//! # What each fault looks like
//!
//! | fault | on a `Write` | on a `Read` |
//! | --- | --- | --- |
//! | [`Fault::Drop`] | bytes reported written, never passed on | bytes read and thrown away |
//! | [`Fault::Truncate`] | bytes up to the next `0x00` dropped (a frame cut short) | the same |
//! | [`Fault::Duplicate`] | bytes passed on twice | bytes returned twice |
//! | [`Fault::Corrupt`] | one byte XORed | the same |
//! | [`Fault::Delay`] | the call returns `Pending` for some polls | the same |
//! | [`Fault::Close`] | this and every later write fails with `BrokenPipe` | reads return `Ok(0)` (end of stream) |
//!
//! No allocation, no `unsafe`, `no_std`.

use embedded_io_async::{Error as _, ErrorKind, ErrorType, Read, Write};

/// One fault at an offset of the original stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `len` bytes from `at` vanish.
    Drop {
        /// First byte dropped.
        at: u64,
        /// Bytes dropped.
        len: u32,
    },
    /// Bytes from `at` up to (not including) the next `0x00` vanish: on a
    /// framed stream, the frame holding `at` is cut short but its
    /// delimiter arrives.
    Truncate {
        /// First byte dropped.
        at: u64,
    },
    /// `len` bytes from `at` arrive, then the same `len` bytes again
    /// (`len` is at most 32; longer is cut to 32).
    Duplicate {
        /// First byte duplicated.
        at: u64,
        /// Bytes duplicated.
        len: u32,
    },
    /// The byte at `at` arrives XORed with `xor` (non-zero to change it).
    Corrupt {
        /// The byte changed.
        at: u64,
        /// The bits flipped.
        xor: u8,
    },
    /// Before the byte at `at` passes, the call returns `Pending` (waking
    /// itself) `polls` times: a stall the executor sees.
    Delay {
        /// The byte held back.
        at: u64,
        /// Polls that return `Pending`.
        polls: u32,
    },
    /// The connection closes just before the byte at `at`.
    Close {
        /// The first byte that does not pass.
        at: u64,
    },
}

impl Fault {
    /// The fault's offset.
    pub const fn at(&self) -> u64 {
        match *self {
            Self::Drop { at, .. }
            | Self::Truncate { at }
            | Self::Duplicate { at, .. }
            | Self::Corrupt { at, .. }
            | Self::Delay { at, .. }
            | Self::Close { at } => at,
        }
    }
}

/// Which faults [`Plan::random`] draws (a bit set; combine with `|`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds(u8);

impl Kinds {
    /// [`Fault::Drop`].
    pub const DROP: Self = Self(1);
    /// [`Fault::Truncate`].
    pub const TRUNCATE: Self = Self(2);
    /// [`Fault::Duplicate`].
    pub const DUPLICATE: Self = Self(4);
    /// [`Fault::Corrupt`].
    pub const CORRUPT: Self = Self(8);
    /// [`Fault::Delay`].
    pub const DELAY: Self = Self(16);
    /// Every kind that damages bytes (all but delays).
    pub const DAMAGE: Self = Self(1 | 2 | 4 | 8);

    /// Both sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl core::ops::BitOr for Kinds {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

/// Seeded random faults: on average one every `mean_gap` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Random {
    /// Generator seed (any value; 0 is mapped to a fixed non-zero one).
    pub seed: u64,
    /// Mean distance between faults, in bytes (at least 1).
    pub mean_gap: u32,
    /// Longest drop or duplicate, in bytes (at least 1).
    pub max_len: u32,
    /// Which faults to draw.
    pub kinds: Kinds,
    /// No random fault starts at or after this offset (`u64::MAX`: they
    /// never stop).
    pub end: u64,
}

/// What a [`Faulty`] does to its stream. Build with the `const` methods;
/// the empty plan passes everything through untouched.
#[derive(Debug, Clone, Copy, Default)]
pub struct Plan<'a> {
    script: &'a [Fault],
    split: usize,
    split_seed: Option<u64>,
    random: Option<Random>,
}

impl<'a> Plan<'a> {
    /// No faults.
    pub const fn new() -> Self {
        Self {
            script: &[],
            split: 0,
            split_seed: None,
            random: None,
        }
    }

    /// These faults, in order of their offsets.
    pub const fn script(mut self, faults: &'a [Fault]) -> Self {
        self.script = faults;
        self
    }

    /// Every call passes at most `max` bytes (`0`: no limit).
    pub const fn split(mut self, max: usize) -> Self {
        self.split = max;
        self
    }

    /// Every call passes between 1 and `max` bytes, drawn from `seed`.
    pub const fn split_random(mut self, max: usize, seed: u64) -> Self {
        self.split = max;
        self.split_seed = Some(seed);
        self
    }

    /// Random faults as well as the script's.
    pub const fn random(mut self, random: Random) -> Self {
        self.random = Some(random);
        self
    }
}

/// What a [`Faulty`] has injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Injected {
    /// Faults started (scripted and random; delays and the close included).
    pub faults: u32,
    /// Bytes dropped (by drops and truncations).
    pub dropped: u64,
    /// Truncations.
    pub truncations: u32,
    /// Bytes passed twice.
    pub duplicated: u64,
    /// Bytes corrupted.
    pub corrupted: u32,
    /// Delays.
    pub delays: u32,
    /// The connection is closed.
    pub closed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Active {
    Idle,
    Drop(u32),
    Truncate,
    Duplicate(u32),
    Corrupt(u8),
    Delay(u32),
}

/// Bytes a read-side duplicate holds back per call.
const STASH: usize = 32;

/// One transport half with faults injected by a [`Plan`]; see the
/// [module docs](self).
///
/// `&mut Faulty` is a transport too, so a test can hand it to a connector
/// and read [`Faulty::injected`] afterwards.
#[derive(Debug)]
pub struct Faulty<'a, T> {
    inner: T,
    plan: Plan<'a>,
    next: usize,
    random_next: Option<Fault>,
    rng: u64,
    split_rng: u64,
    offset: u64,
    active: Active,
    stash: [u8; STASH],
    stash_len: usize,
    stash_pos: usize,
    injected: Injected,
}

fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn seeded(seed: u64) -> u64 {
    if seed == 0 {
        0x9e37_79b9_7f4a_7c15
    } else {
        seed
    }
}

impl<'a, T> Faulty<'a, T> {
    /// `inner` with `plan` applied.
    pub fn new(inner: T, plan: Plan<'a>) -> Self {
        let mut s = Self {
            inner,
            plan,
            next: 0,
            random_next: None,
            rng: seeded(plan.random.map_or(0, |r| r.seed)),
            split_rng: seeded(plan.split_seed.unwrap_or(0)),
            offset: 0,
            active: Active::Idle,
            stash: [0; STASH],
            stash_len: 0,
            stash_pos: 0,
            injected: Injected::default(),
        };
        s.draw_random(0);
        s
    }

    /// What was injected so far.
    pub fn injected(&self) -> Injected {
        self.injected
    }

    /// Bytes of the original stream passed (or dropped) so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Closes the connection now, as a [`Fault::Close`] at the current
    /// offset would.
    pub fn close(&mut self) {
        self.injected.closed = true;
    }

    /// The wrapped half.
    pub fn inner(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The wrapped half, unwrapped.
    pub fn into_inner(self) -> T {
        self.inner
    }

    fn draw_random(&mut self, after: u64) {
        let Some(r) = self.plan.random else { return };
        let kinds = r.kinds.0 & 0x1f;
        if kinds == 0 {
            return;
        }
        let gap = 1 + xorshift(&mut self.rng) % (2 * u64::from(r.mean_gap.max(1)));
        let at = after.saturating_add(gap);
        if at >= r.end {
            return;
        }
        // The n-th set bit of `kinds`.
        let mut pick = xorshift(&mut self.rng) % u64::from(kinds.count_ones());
        let mut bit = 0;
        for b in 0..5 {
            if kinds & (1 << b) != 0 {
                if pick == 0 {
                    bit = b;
                    break;
                }
                pick -= 1;
            }
        }
        let len = 1 + (xorshift(&mut self.rng) % u64::from(r.max_len.max(1))) as u32;
        self.random_next = Some(match bit {
            0 => Fault::Drop { at, len },
            1 => Fault::Truncate { at },
            2 => Fault::Duplicate { at, len },
            3 => Fault::Corrupt {
                at,
                xor: 1 + (xorshift(&mut self.rng) % 255) as u8,
            },
            _ => Fault::Delay {
                at,
                polls: 1 + (xorshift(&mut self.rng) % 8) as u32,
            },
        });
    }

    /// Offset of the next fault not started yet.
    fn next_at(&self) -> Option<u64> {
        let scripted = self.plan.script.get(self.next).map(Fault::at);
        let random = self.random_next.map(|f| f.at());
        match (scripted, random) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Starts the faults due at the current offset, one at a time.
    fn activate_due(&mut self) {
        while self.active == Active::Idle && !self.injected.closed {
            let Some(at) = self.next_at() else { return };
            if at > self.offset {
                return;
            }
            let fault = match self.plan.script.get(self.next) {
                Some(f) if f.at() == at => {
                    self.next += 1;
                    *f
                }
                _ => {
                    let Some(f) = self.random_next.take() else {
                        return;
                    };
                    self.draw_random(self.offset.max(at));
                    f
                }
            };
            self.injected.faults += 1;
            self.active = match fault {
                Fault::Drop { len, .. } if len > 0 => Active::Drop(len),
                Fault::Duplicate { len, .. } if len > 0 => {
                    (self.stash_len, self.stash_pos) = (0, 0);
                    Active::Duplicate(len.min(STASH as u32))
                }
                Fault::Drop { .. } | Fault::Duplicate { .. } => Active::Idle,
                Fault::Truncate { .. } => {
                    self.injected.truncations += 1;
                    Active::Truncate
                }
                Fault::Corrupt { xor, .. } => Active::Corrupt(xor),
                Fault::Delay { polls, .. } => Active::Delay(polls),
                Fault::Close { .. } => {
                    self.injected.closed = true;
                    Active::Idle
                }
            };
        }
    }

    /// Most bytes one call may pass untouched from here.
    fn limit(&mut self, len: usize) -> usize {
        let mut n = len;
        if self.plan.split > 0 {
            let piece = match self.plan.split_seed {
                Some(_) => 1 + (xorshift(&mut self.split_rng) % self.plan.split as u64) as usize,
                None => self.plan.split,
            };
            n = n.min(piece);
        }
        if let Some(at) = self.next_at() {
            let until = at.saturating_sub(self.offset);
            n = n.min(usize::try_from(until).unwrap_or(usize::MAX));
        }
        n.max(1)
    }

    /// Keeps `bytes` of a duplicated range (`rest` bytes still to come);
    /// `true` when the range is complete and the copy is to go out.
    fn record(&mut self, bytes: &[u8], rest: u32) -> bool {
        let end = self.stash_len + bytes.len();
        self.stash[self.stash_len..end].copy_from_slice(bytes);
        (self.stash_len, self.stash_pos) = (end, end);
        let rest = rest - bytes.len() as u32;
        if rest > 0 {
            self.active = Active::Duplicate(rest);
            return false;
        }
        self.injected.duplicated += end as u64;
        self.active = Active::Idle;
        true
    }

    /// `n` more bytes of a `Drop(rest)` fault dropped (`n <= rest`, the
    /// callers clamp it): counts them and moves on to what remains.
    fn dropped(&mut self, rest: u32, n: usize) {
        self.injected.dropped += n as u64;
        let rest = rest - n as u32;
        self.active = if rest == 0 {
            Active::Idle
        } else {
            Active::Drop(rest)
        };
    }

    async fn stall(&mut self, polls: u32) {
        for _ in 0..polls {
            embassy_futures::yield_now().await;
        }
        self.injected.delays += 1;
        self.active = Active::Idle;
    }
}

impl<T: ErrorType> ErrorType for Faulty<'_, T> {
    type Error = ErrorKind;
}

/// Writes all of `bytes` to `w` (no `write_all`: it panics on `Ok(0)`).
async fn write_fully<W: Write>(w: &mut W, mut bytes: &[u8]) -> Result<(), ErrorKind> {
    while !bytes.is_empty() {
        match w.write(bytes).await {
            Ok(0) => return Err(ErrorKind::WriteZero),
            Ok(n) => bytes = &bytes[n.min(bytes.len())..],
            Err(e) => return Err(e.kind()),
        }
    }
    Ok(())
}

impl<T: Write> Write for Faulty<'_, T> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            self.activate_due();
            if self.injected.closed {
                return Err(ErrorKind::BrokenPipe);
            }
            match self.active {
                Active::Delay(polls) => self.stall(polls).await,
                Active::Drop(rest) => {
                    let k = buf.len().min(rest as usize);
                    self.offset += k as u64;
                    self.dropped(rest, k);
                    return Ok(k);
                }
                Active::Truncate => {
                    let k = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    if k > 0 {
                        self.offset += k as u64;
                        self.injected.dropped += k as u64;
                        return Ok(k);
                    }
                    // The delimiter passes and ends the truncation (so the
                    // next fault starts after it, as on the read side).
                    write_fully(&mut self.inner, &[0]).await?;
                    self.offset += 1;
                    self.active = Active::Idle;
                    return Ok(1);
                }
                Active::Duplicate(rest) => {
                    let k = self.limit(buf.len()).min(rest as usize);
                    let n = self.inner.write(&buf[..k]).await.map_err(|e| e.kind())?;
                    self.offset += n as u64;
                    if self.record(&buf[..n.min(k)], rest) {
                        let (copy, len) = (self.stash, self.stash_len);
                        write_fully(&mut self.inner, &copy[..len]).await?;
                        self.stash_len = 0;
                    }
                    return Ok(n);
                }
                Active::Corrupt(xor) => {
                    write_fully(&mut self.inner, &[buf[0] ^ xor]).await?;
                    self.offset += 1;
                    self.injected.corrupted += 1;
                    self.active = Active::Idle;
                    return Ok(1);
                }
                Active::Idle => {
                    let k = self.limit(buf.len());
                    let n = self.inner.write(&buf[..k]).await.map_err(|e| e.kind())?;
                    self.offset += n as u64;
                    return Ok(n);
                }
            }
        }
    }

    async fn flush(&mut self) -> Result<(), ErrorKind> {
        if self.injected.closed {
            return Err(ErrorKind::BrokenPipe);
        }
        self.inner.flush().await.map_err(|e| e.kind())
    }
}

impl<T: Read> Read for Faulty<'_, T> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.stash_pos < self.stash_len {
                let k = buf.len().min(self.stash_len - self.stash_pos);
                buf[..k].copy_from_slice(&self.stash[self.stash_pos..self.stash_pos + k]);
                self.stash_pos += k;
                return Ok(k);
            }
            self.activate_due();
            if self.injected.closed {
                return Ok(0);
            }
            let k = self.limit(buf.len());
            match self.active {
                Active::Delay(polls) => self.stall(polls).await,
                Active::Drop(rest) => {
                    let k = k.min(rest as usize);
                    let n = self.read_inner(&mut buf[..k]).await?;
                    if n == 0 {
                        return Ok(0);
                    }
                    self.dropped(rest, n);
                }
                Active::Truncate => {
                    // A byte at a time: the delimiter must not be read
                    // together with what follows it.
                    let n = self.read_inner(&mut buf[..1]).await?;
                    if n == 0 {
                        return Ok(0);
                    }
                    if buf[0] == 0 {
                        self.active = Active::Idle;
                        return Ok(1);
                    }
                    self.injected.dropped += 1;
                }
                Active::Duplicate(rest) => {
                    let n = self.read_inner(&mut buf[..k.min(rest as usize)]).await?;
                    if n == 0 {
                        return Ok(0);
                    }
                    if self.record(&buf[..n], rest) {
                        // Replayed by the next reads.
                        self.stash_pos = 0;
                    }
                    return Ok(n);
                }
                Active::Corrupt(xor) => {
                    let n = self.read_inner(&mut buf[..1]).await?;
                    if n == 1 {
                        buf[0] ^= xor;
                        self.injected.corrupted += 1;
                        self.active = Active::Idle;
                    }
                    return Ok(n);
                }
                Active::Idle => return self.read_inner(&mut buf[..k]).await,
            }
        }
    }
}

impl<T: Read> Faulty<'_, T> {
    async fn read_inner(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        let n = self.inner.read(buf).await.map_err(|e| e.kind())?;
        self.offset += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
