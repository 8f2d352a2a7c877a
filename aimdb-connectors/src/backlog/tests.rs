//! The backlog over a flash model that loses power at a chosen write or
//! erase: after every cut, recovery finds each acknowledged value gone,
//! each unacknowledged one exactly once and in order, and nothing
//! corrupted.

use std::vec;
use std::vec::Vec;

use aimdb_core::connector::{Message, QoS};
use embedded_storage_async::nor_flash::{
    ErrorType, MultiwriteNorFlash, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};
use futures::executor::block_on;
use sequential_storage::cache::Cache;

use super::*;

const PAGE: usize = 256;
const PAGES: usize = 6;
const RANGE: Range<u32> = 0..(PAGE * PAGES) as u32;

/// NOR flash in RAM that loses power at its `cut`-th write or erase:
/// that operation is half done (a prefix of the words written, or of the
/// page erased, the word at the edge left with undefined bits) and every
/// later one fails.
struct CutFlash {
    mem: Vec<u8>,
    ops: u32,
    cut: Option<u32>,
    off: bool,
}

#[derive(Debug)]
struct PowerOff;

impl NorFlashError for PowerOff {
    fn kind(&self) -> NorFlashErrorKind {
        NorFlashErrorKind::Other
    }
}

impl CutFlash {
    fn new(cut: Option<u32>) -> Self {
        Self {
            mem: vec![0xff; PAGE * PAGES],
            ops: 0,
            cut,
            off: false,
        }
    }

    /// The same bits, powered again.
    fn reboot(&self) -> Self {
        Self {
            mem: self.mem.clone(),
            ops: 0,
            cut: None,
            off: false,
        }
    }

    /// Whether this operation is the one power is lost in.
    fn step(&mut self) -> Result<bool, PowerOff> {
        if self.off {
            return Err(PowerOff);
        }
        self.ops += 1;
        Ok(self.cut == Some(self.ops))
    }
}

impl ErrorType for CutFlash {
    type Error = PowerOff;
}

impl ReadNorFlash for CutFlash {
    const READ_SIZE: usize = 1;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), PowerOff> {
        if self.off {
            return Err(PowerOff);
        }
        let o = offset as usize;
        bytes.copy_from_slice(&self.mem[o..o + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl NorFlash for CutFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), PowerOff> {
        let (from, to) = (from as usize, to as usize);
        if self.step()? {
            // Half the range erased, the rest as it was.
            let mid = from + (to - from) / 2;
            self.mem[from..mid].fill(0xff);
            self.mem[mid] &= 0x5a;
            self.off = true;
            return Err(PowerOff);
        }
        self.mem[from..to].fill(0xff);
        Ok(())
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), PowerOff> {
        let o = offset as usize;
        let cut = self.step()?;
        // A cut write lands its first half of words; the next word's
        // bits that were to be cleared are undefined (here: some are).
        let whole = if cut {
            bytes.len() / 8 * 4
        } else {
            bytes.len()
        };
        for (m, b) in self.mem[o..o + whole].iter_mut().zip(bytes) {
            *m &= b;
        }
        if cut {
            if let Some(b) = bytes.get(whole) {
                self.mem[o + whole] &= b | 0xa5;
            }
            self.off = true;
            return Err(PowerOff);
        }
        Ok(())
    }
}

impl MultiwriteNorFlash for CutFlash {}

fn msg(payload: &[u8]) -> Message<'_> {
    Message {
        route: 1,
        topic: "sensors/t",
        payload,
        lagged: 0,
        qos: QoS::AtLeastOnce,
        retain: false,
        urgent: false,
    }
}

type Q<'c> = Backlog<
    'c,
    CutFlash,
    Cache<
        sequential_storage::cache::Uncached,
        sequential_storage::cache::Uncached,
        sequential_storage::cache::Uncached,
    >,
>;

fn open<'c>(flash: CutFlash, boot: u32, counters: &'c Counters) -> Result<Q<'c>, Error> {
    let mut buf = [0u8; 64];
    block_on(Backlog::open(
        flash,
        RANGE,
        Cache::new_uncached(),
        boot,
        Full::RefuseNewest,
        counters,
        &mut buf,
    ))
}

/// What the run had done when power went.
#[derive(Debug, Default)]
struct Done {
    /// Values stored (their push returned Ok), in order.
    stored: Vec<u32>,
    /// How many of the oldest were acknowledged and removed.
    removed: usize,
    /// A push was under way: its value may or may not be stored.
    pushing: Option<u32>,
    /// A removal was under way: the oldest may or may not be gone.
    removing: bool,
}

/// A long run of a device's backlog: values stored, handed to an engine
/// with a window of 4, acknowledged a few at a time, the range filling
/// and draining more than once. Stops at the first failed operation.
async fn run(b: &mut Q<'_>, done: &mut Done) -> Result<(), Error> {
    let mut buf = [0u8; 64];
    let mut v = 0u32;
    for round in 0..200u32 {
        // A burst of values (longer bursts while the "link" is down).
        let burst = if round % 10 < 4 { 9 } else { 3 };
        for _ in 0..burst {
            done.pushing = Some(v);
            match b
                .push(
                    &msg(&v.to_le_bytes()),
                    Instant::from_micros(u64::from(v) * 1000),
                    &mut buf,
                )
                .await
            {
                Ok(s) => {
                    assert_eq!(s.seq as usize, done.stored.len());
                    done.stored.push(v);
                    v += 1;
                }
                Err(Error::Full) => {}
                Err(e) => return Err(e),
            }
            done.pushing = None;
        }
        if round % 10 < 4 {
            continue;
        }
        // The engine takes up to 4, then acknowledges the oldest 2..4.
        while b.in_flight() < 4 {
            let Some(e) = b.next(&mut buf).await? else {
                break;
            };
            let got = u32::from_le_bytes(e.payload.try_into().unwrap());
            assert_eq!(got, done.stored[done.removed + b.in_flight() as usize]);
            b.sent();
        }
        let acks = 2 + round % 3;
        for _ in 0..acks.min(b.in_flight()) {
            done.removing = true;
            b.delivered(1, Instant::from_micros(0), &mut buf).await?;
            done.removing = false;
            done.removed += 1;
        }
    }
    Ok(())
}

/// Everything stored after a reboot, oldest first, as (value, stamp).
fn contents(b: &mut Q<'_>) -> Vec<(u32, Stamp)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    while let Some(e) = block_on(b.next(&mut buf)).unwrap() {
        assert_eq!(e.topic, "sensors/t");
        out.push((u32::from_le_bytes(e.payload.try_into().unwrap()), e.stamp));
        b.sent();
    }
    out
}

#[test]
fn a_run_without_cuts_stores_and_drains_in_order() {
    let counters = Counters::new();
    let mut b = open(CutFlash::new(None), 7, &counters).unwrap();
    let mut done = Done::default();
    block_on(run(&mut b, &mut done)).unwrap();
    let s = counters.snapshot();
    assert!(s.refused > 0, "the range never filled: {s:?}");
    assert!(s.erases > PAGES as u32, "pages never turned over: {s:?}");
    assert_eq!(s.stored as usize, done.stored.len());
    assert_eq!(s.delivered as usize, done.removed);
    b.resend();
    let left: Vec<u32> = contents(&mut b)
        .iter()
        .map(|(v, s)| {
            assert_eq!(s.boot, 7);
            *v
        })
        .collect();
    assert_eq!(left, done.stored[done.removed..]);
    assert_eq!(counters.snapshot().depth as usize, left.len());
}

/// Power lost at every write and erase of the run, one cut per run.
#[test]
fn power_cut_at_every_write_and_erase_loses_and_repeats_nothing() {
    // How many writes and erases the whole run makes.
    let counters = Counters::new();
    let mut b = open(CutFlash::new(None), 1, &counters).unwrap();
    block_on(run(&mut b, &mut Done::default())).unwrap();
    let total = b.into_flash().ops;
    assert!(total > 1000, "a long run: {total} operations");

    for cut in 1..=total {
        let counters = Counters::new();
        let mut done = Done::default();
        let flash = match open(CutFlash::new(Some(cut)), 1, &counters) {
            Ok(mut b) => {
                let r = block_on(run(&mut b, &mut done));
                assert_eq!(
                    r,
                    Err(Error::Flash),
                    "cut {cut}: the run must stop at the cut"
                );
                b.into_flash()
            }
            Err(e) => panic!("cut {cut}: open failed before any write: {e}"),
        };
        let after = Counters::new();
        let mut b = open(flash.reboot(), 2, &after)
            .unwrap_or_else(|e| panic!("cut {cut}: recovery failed: {e}"));
        assert_eq!(after.snapshot().malformed, 0, "cut {cut}");
        let left = contents(&mut b);
        // Every stamp is the first boot's, in write order, each once.
        for w in left.windows(2) {
            assert!(w[0].1.seq < w[1].1.seq, "cut {cut}: out of order {left:?}");
        }
        let mut values: Vec<u32> = left
            .iter()
            .map(|(v, s)| {
                assert_eq!(
                    (s.boot, s.seq),
                    (1, *v),
                    "cut {cut}: stamp and value disagree"
                );
                *v
            })
            .collect();
        let mut expect = done.stored[done.removed..].to_vec();
        if done.removing && values.first() != expect.first() {
            // The removal under way completed: that value was
            // acknowledged.
            expect.remove(0);
        }
        if let Some(p) = done.pushing {
            if values.last() == Some(&p) && expect.last() != Some(&p) {
                // The push under way completed; it was never reported
                // stored, so its producer may store it again.
                values.pop();
            }
        }
        assert_eq!(values, expect, "cut {cut}: {done:?}");
        // And the backlog goes on working: remove, store, hand out.
        let mut buf = [0u8; 64];
        let t = Instant::from_micros(0);
        block_on(b.delivered(b.depth(), t, &mut buf)).unwrap();
        assert!(b.is_empty(), "cut {cut}");
        block_on(b.push(&msg(&999u32.to_le_bytes()), t, &mut buf)).unwrap();
        let e = block_on(b.next(&mut buf)).unwrap().unwrap();
        assert_eq!(e.payload, 999u32.to_le_bytes());
        b.sent();
        block_on(b.delivered(1, t, &mut buf)).unwrap();
        assert!(b.is_empty(), "cut {cut}");
    }
}

#[test]
fn drop_oldest_keeps_the_newest_and_acks_of_dropped_values_remove_nothing() {
    let counters = Counters::new();
    let mut buf = [0u8; 64];
    let mut b = block_on(Backlog::open(
        CutFlash::new(None),
        RANGE,
        Cache::new_uncached(),
        3,
        Full::DropOldest,
        &counters,
        &mut buf,
    ))
    .unwrap();
    block_on(async {
        for v in 0..2u32 {
            let p = v.to_le_bytes();
            b.push(&msg(&p), Instant::from_micros(0), &mut buf)
                .await
                .unwrap();
        }
        // The engine holds the two oldest.
        for _ in 0..2 {
            b.next(&mut buf).await.unwrap().unwrap();
            b.sent();
        }
        for v in 2..400u32 {
            let p = v.to_le_bytes();
            b.push(&msg(&p), Instant::from_micros(0), &mut buf)
                .await
                .unwrap();
        }
        // Their acknowledgements come: the entries went with their page.
        assert_eq!(b.in_flight(), 2);
        b.delivered(2, Instant::from_micros(0), &mut buf)
            .await
            .unwrap();
    });
    let s = counters.snapshot();
    assert!(s.dropped > 2 && s.refused == 0, "{s:?}");
    assert_eq!((s.stored, s.delivered), (400, 0));
    assert_eq!(s.depth + s.dropped, 400);
    let left: Vec<u32> = contents(&mut b).iter().map(|(v, _)| *v).collect();
    // The newest, unbroken up to 399.
    assert_eq!(left.len() as u32, s.depth);
    assert_eq!(*left.last().unwrap(), 399);
    assert!(left.windows(2).all(|w| w[1] == w[0] + 1), "{left:?}");
}

#[test]
fn the_boot_counter_grows_across_boots_and_cuts() {
    let mut flash = CutFlash::new(None);
    let counters = Counters::new();
    let mut seen = Vec::new();
    for _ in 0..40 {
        seen.push(
            block_on(next_boot(
                &mut flash,
                0..(2 * PAGE) as u32,
                Cache::new_uncached(),
                &counters,
            ))
            .unwrap(),
        );
    }
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
    // A cut at every write and erase of the next boot: the one after it
    // is still larger than every boot handed out.
    for cut in 1..=8 {
        let mut f = flash.reboot();
        f.cut = Some(cut);
        let r = block_on(next_boot(
            &mut f,
            0..(2 * PAGE) as u32,
            Cache::new_uncached(),
            &counters,
        ));
        let handed = r.ok();
        let mut f = f.reboot();
        let after = block_on(next_boot(
            &mut f,
            0..(2 * PAGE) as u32,
            Cache::new_uncached(),
            &counters,
        ))
        .unwrap();
        assert!(after >= 40, "cut {cut}: {after}");
        if let Some(h) = handed {
            assert!(after > h, "cut {cut}: {h} handed out twice");
        }
    }
}

#[test]
fn entries_of_another_layout_are_removed_and_counted() {
    let mut flash = CutFlash::new(None);
    block_on(async {
        let mut q = QueueStorage::new(&mut flash, QueueConfig::new(RANGE), Cache::new_uncached());
        q.push(&[1, 2, 3], false).await.unwrap();
    });
    let counters = Counters::new();
    let mut b = open(flash, 1, &counters).unwrap();
    assert_eq!(counters.snapshot().malformed, 1);
    assert!(b.is_empty());
    assert!(contents(&mut b).is_empty());
}

#[test]
fn an_entry_that_fits_the_buffer_only_unrounded_is_refused() {
    let counters = Counters::new();
    let mut b = open(CutFlash::new(None), 1, &counters).unwrap();
    let mut big = [0u8; 64];
    let at = Instant::from_micros(0);
    // A payload whose entry is not a whole number of flash words.
    let (payload, n) = (1..16)
        .map(|len| {
            let p = vec![7u8; len];
            let stamp = Stamp {
                boot: 1,
                seq: 0,
                at_ms: 0,
            };
            let n = entry::encode(&msg(&p), stamp, &mut big).unwrap();
            (p, n)
        })
        .find(|(_, n)| n % CutFlash::WRITE_SIZE != 0)
        .unwrap();
    let mut tight = vec![0u8; n];
    assert_eq!(
        block_on(b.push(&msg(&payload), at, &mut tight)),
        Err(Error::TooLarge)
    );
    assert_eq!(counters.snapshot().too_large, 1);
    assert!(b.is_empty());
    // With room for the rounding it is stored and read back.
    let mut room = vec![0u8; n.next_multiple_of(CutFlash::WRITE_SIZE)];
    block_on(b.push(&msg(&payload), at, &mut room)).unwrap();
    let e = block_on(b.next(&mut room)).unwrap().unwrap();
    assert_eq!(e.payload, &payload[..]);
}
