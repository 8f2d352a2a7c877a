//! The three buffer kinds. Each is plain data guarded by its record's mutex.

/// What a reader gets from a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Take<T> {
    /// Nothing new for this reader.
    Empty,
    /// The next value.
    Value(T),
    /// The reader fell behind and lost this many of the oldest values; its
    /// cursor now points at the oldest value still held.
    Lagged(u64),
}

/// Which of the three buffer kinds a record has, for transports that treat
/// state, streams and commands differently (MQTT retains state and does
/// not apply retained commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Kind {
    /// [`Latest`]: state; the newest value is the truth.
    Latest,
    /// [`Ring`]: a stream of values.
    Ring,
    /// [`Mailbox`]: commands, each taken once.
    Mailbox,
}

/// A buffer kind: how writes are kept and how readers see them.
///
/// Implemented by [`Latest`], [`Ring`] and [`Mailbox`]; sealed so the record's
/// invariants (sync writes that never fail, per-reader cursors) hold.
pub trait Buffer: sealed::Sealed {
    /// The value type.
    type Item;
    /// Which kind this is.
    const KIND: Kind;
    /// How many values it holds (`Ring<T, N>`: `N`; the others: 1).
    const CAPACITY: usize = 1;
    /// Per-reader position.
    type Cursor: Copy + Send + Sync;
    /// The empty buffer (used by `const fn` constructors).
    const EMPTY: Self;
    /// Stores a value; never blocks, never fails.
    fn push(&mut self, value: Self::Item);
    /// Whether the buffer holds a value none of the readers at `cursors`
    /// took (`Latest`, `Mailbox`: the next push replaces it unseen; a
    /// `Ring` reports overwritten values to the reader that lags instead).
    fn untaken(&self, cursors: &[Option<Self::Cursor>]) -> bool {
        let _ = cursors;
        false
    }
    /// The cursor of a reader subscribing now.
    fn subscribe(&self) -> Self::Cursor;
    /// Takes the next value for the reader at `cursor`.
    fn take(&mut self, cursor: &mut Self::Cursor) -> Take<Self::Item>;
    /// Whether a `take` at `cursor` would return something other than
    /// [`Take::Empty`].
    fn has_more(&self, cursor: &Self::Cursor) -> bool;
    /// The newest value held, without taking it (`Mailbox`: the pending
    /// command, if any).
    fn newest(&self) -> Option<&Self::Item>;
    /// Re-arms `cursor` so the current value is delivered again, for kinds
    /// where that is meaningful (`Latest`: state is re-published after a
    /// transport reconnects). Streams and commands are not replayed.
    fn replay(&self, cursor: &mut Self::Cursor) {
        let _ = cursor;
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for super::Latest<T> {}
    impl<T, const N: usize> Sealed for super::Ring<T, N> {}
    impl<T> Sealed for super::Mailbox<T> {}
}

/// Only the newest value matters (state, configuration).
///
/// Writes between two reads coalesce; a reader sees each value at most once.
/// A new reader sees the current value, if there is one.
#[derive(Debug)]
pub struct Latest<T> {
    value: Option<T>,
    seq: u32,
}

impl<T> Latest<T> {
    /// The current value, if any (no reader involved).
    pub(crate) fn current(&self) -> Option<&T> {
        self.value.as_ref()
    }
}

impl<T: Clone> Buffer for Latest<T> {
    type Item = T;
    const KIND: Kind = Kind::Latest;
    /// The write sequence number this reader last saw.
    type Cursor = u32;
    const EMPTY: Self = Self {
        value: None,
        seq: 0,
    };

    fn push(&mut self, value: T) {
        self.value = Some(value);
        self.seq = self.seq.wrapping_add(1);
    }

    fn newest(&self) -> Option<&T> {
        self.value.as_ref()
    }

    // A reader that took the current value has its cursor at `seq`.
    fn untaken(&self, cursors: &[Option<u32>]) -> bool {
        self.value.is_some() && !cursors.contains(&Some(self.seq))
    }

    fn subscribe(&self) -> u32 {
        if self.value.is_some() {
            self.seq.wrapping_sub(1)
        } else {
            self.seq
        }
    }

    fn replay(&self, cursor: &mut u32) {
        if self.value.is_some() {
            *cursor = self.seq.wrapping_sub(1);
        }
    }

    fn has_more(&self, cursor: &u32) -> bool {
        self.value.is_some() && *cursor != self.seq
    }

    fn take(&mut self, cursor: &mut u32) -> Take<T> {
        match &self.value {
            Some(v) if *cursor != self.seq => {
                *cursor = self.seq;
                Take::Value(v.clone())
            }
            _ => Take::Empty,
        }
    }
}

/// A bounded stream of the last `N` values with independent readers
/// (telemetry).
///
/// A reader that falls more than `N` values behind loses the oldest ones and
/// is told exactly how many ([`Take::Lagged`]); the writer never waits. A new
/// reader starts at the next value written.
#[derive(Debug)]
pub struct Ring<T, const N: usize> {
    slots: [Option<T>; N],
    /// Total values ever written; value `s` lives in `slots[s % N]`.
    head: u64,
}

impl<T: Clone, const N: usize> Buffer for Ring<T, N> {
    type Item = T;
    const KIND: Kind = Kind::Ring;
    const CAPACITY: usize = N;
    /// Sequence number of the next value this reader reads.
    type Cursor = u64;
    const EMPTY: Self = {
        assert!(N > 0, "Ring<T, N> needs N > 0");
        Self {
            slots: [const { None }; N],
            head: 0,
        }
    };

    fn push(&mut self, value: T) {
        self.slots[(self.head % N as u64) as usize] = Some(value);
        self.head += 1;
    }

    fn newest(&self) -> Option<&T> {
        let last = self.head.checked_sub(1)?;
        self.slots[(last % N as u64) as usize].as_ref()
    }

    fn subscribe(&self) -> u64 {
        self.head
    }

    fn has_more(&self, cursor: &u64) -> bool {
        *cursor < self.head
    }

    fn take(&mut self, cursor: &mut u64) -> Take<T> {
        if *cursor >= self.head {
            return Take::Empty;
        }
        let oldest = self.head.saturating_sub(N as u64);
        if *cursor < oldest {
            let lost = oldest - *cursor;
            *cursor = oldest;
            return Take::Lagged(lost);
        }
        match &self.slots[(*cursor % N as u64) as usize] {
            Some(v) => {
                *cursor += 1;
                Take::Value(v.clone())
            }
            // Unreachable by the invariant `head - N <= cursor < head`, which
            // only ever addresses written slots; report emptiness rather than
            // panic.
            None => Take::Empty,
        }
    }
}

/// The latest instruction wins and each value is taken by exactly one reader
/// (commands).
#[derive(Debug)]
pub struct Mailbox<T> {
    value: Option<T>,
}

impl<T> Buffer for Mailbox<T> {
    type Item = T;
    const KIND: Kind = Kind::Mailbox;
    type Cursor = ();
    const EMPTY: Self = Self { value: None };

    fn push(&mut self, value: T) {
        self.value = Some(value);
    }

    fn newest(&self) -> Option<&T> {
        self.value.as_ref()
    }

    fn untaken(&self, _: &[Option<()>]) -> bool {
        self.value.is_some()
    }

    fn subscribe(&self) {}

    fn has_more(&self, _: &()) -> bool {
        self.value.is_some()
    }

    fn take(&mut self, _: &mut ()) -> Take<T> {
        match self.value.take() {
            Some(v) => Take::Value(v),
            None => Take::Empty,
        }
    }
}
