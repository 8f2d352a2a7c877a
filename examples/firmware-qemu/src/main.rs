//! aimdb-core self-test firmware for QEMU's `lm3s6965evb`.
//!
//! Runs every check below against `static` records guarded by
//! `CriticalSectionRawMutex`, prints `PASS name` / `FAIL name` through
//! semihosting, and ends QEMU with exit code 0 when all pass, 1 otherwise
//! (a panic or a hard fault also exits 1). Built and run by
//! `scripts/firmware.sh smoke [--cpu cortex-m3|cortex-m0]`.
//!
//! Adding a check: write `fn my_check() -> bool` (use [`ensure!`] for each
//! condition) and add it to [`SYNC_CHECKS`]; an async check is an
//! `async fn(Spawner) -> bool` called from `main` through [`Tally::check`].
#![no_std]
#![no_main]

use core::future::poll_fn;
use core::task::Poll;

use aimdb_core::record::{Latest, Mailbox, Record, Ring, SubscribeError, TryRecvError};
use cortex_m_rt::{exception, ExceptionFrame};
use cortex_m_semihosting::{debug, hprintln};
use embassy_executor::Spawner;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;

/// Fails the enclosing `fn() -> bool` check, printing the condition and line.
macro_rules! ensure {
    ($cond:expr) => {
        if !$cond {
            hprintln!("  failed at line {}: {}", line!(), stringify!($cond));
            return false;
        }
    };
}

/// Counts check results.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    /// Records and prints one check's result.
    fn check(&mut self, name: &str, ok: bool) {
        if ok {
            self.passed += 1;
            hprintln!("PASS {}", name);
        } else {
            self.failed += 1;
            hprintln!("FAIL {}", name);
        }
    }
}

/// Synchronous checks, run in order.
const SYNC_CHECKS: &[(&str, fn() -> bool)] = &[
    ("latest_coalesces", latest_coalesces),
    ("ring_lag_exact", ring_lag_exact),
    ("mailbox_taken_once", mailbox_taken_once),
    ("subscribe_full_and_release", subscribe_full_and_release),
];

// ---------------------------------------------------------------- Latest

static LATEST: Record<Cs, Latest<u32>, 2> = Record::new("fw/latest");

/// Writes between reads coalesce; each value is seen at most once; a late
/// subscriber sees the current value once.
fn latest_coalesces() -> bool {
    let Ok(mut r) = LATEST.subscribe() else { return false };
    ensure!(r.try_recv() == Err(TryRecvError::Empty));
    LATEST.write(1);
    LATEST.write(2);
    LATEST.write(3);
    ensure!(r.try_recv() == Ok(3));
    ensure!(r.try_recv() == Err(TryRecvError::Empty));
    LATEST.write(3);
    ensure!(r.try_recv() == Ok(3)); // an equal value is still a new write
    let Ok(mut late) = LATEST.subscribe() else { return false };
    ensure!(late.try_recv() == Ok(3));
    ensure!(late.try_recv() == Err(TryRecvError::Empty));
    ensure!(LATEST.writes() == 4);
    true
}

// ---------------------------------------------------------------- Ring

static RING: Record<Cs, Ring<u32, 4>, 2> = Record::new("fw/ring");

/// A reader that falls behind a ring of 4 is told exactly how many values it
/// lost, then reads the oldest one still held; other readers are unaffected.
fn ring_lag_exact() -> bool {
    // The `inject-failure` feature expects a wrong lag count here.
    const LOST_AFTER_7: u64 = if cfg!(feature = "inject-failure") { 4 } else { 3 };

    let (Ok(mut a), Ok(mut b)) = (RING.subscribe(), RING.subscribe()) else { return false };
    for v in 0..4 {
        RING.write(v);
    }
    // Exactly at capacity: nothing lost.
    for v in 0..4 {
        ensure!(a.try_recv() == Ok(v));
    }
    ensure!(a.try_recv() == Err(TryRecvError::Empty));
    for v in 4..7 {
        RING.write(v);
    }
    // b is 7 behind a ring of 4.
    ensure!(b.try_recv() == Err(TryRecvError::Lagged(LOST_AFTER_7)));
    for v in 3..7 {
        ensure!(b.try_recv() == Ok(v));
    }
    ensure!(b.try_recv() == Err(TryRecvError::Empty));
    for v in 4..7 {
        ensure!(a.try_recv() == Ok(v));
    }
    // Far behind: the lag counts every lost value.
    for v in 0..1000 {
        RING.write(v);
    }
    ensure!(a.try_recv() == Err(TryRecvError::Lagged(996)));
    ensure!(a.try_recv() == Ok(996));
    ensure!(RING.writes() == 1007);
    true
}

// ---------------------------------------------------------------- Mailbox

static MAILBOX: Record<Cs, Mailbox<u32>, 2> = Record::new("fw/mailbox");

/// The latest write wins and each value is taken by exactly one of two
/// readers.
fn mailbox_taken_once() -> bool {
    let (Ok(mut a), Ok(mut b)) = (MAILBOX.subscribe(), MAILBOX.subscribe()) else { return false };
    MAILBOX.write(1);
    MAILBOX.write(2);
    ensure!(a.try_recv() == Ok(2));
    ensure!(b.try_recv() == Err(TryRecvError::Empty));
    ensure!(a.try_recv() == Err(TryRecvError::Empty));
    let mut taken = [0u32; 2];
    for v in 10..20 {
        MAILBOX.write(v);
        // Alternate who tries first; exactly one reader gets each value.
        let (first, second) = if v % 2 == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
        let x = first.try_recv();
        let y = second.try_recv();
        ensure!(x == Ok(v));
        ensure!(y == Err(TryRecvError::Empty));
        taken[(v % 2) as usize] += 1;
    }
    ensure!(taken == [5, 5]);
    true
}

// ---------------------------------------------------------------- slots

static SLOTS: Record<Cs, Latest<u8>, 2> = Record::new("fw/slots");

/// Subscribing past `R` readers fails; dropping a reader frees its slot.
fn subscribe_full_and_release() -> bool {
    let (Ok(a), Ok(_b)) = (SLOTS.subscribe(), SLOTS.subscribe()) else { return false };
    ensure!(SLOTS.subscribe().map(|_| ()) == Err(SubscribeError::Full));
    drop(a);
    ensure!(SLOTS.subscribe().is_ok());
    true
}

// ---------------------------------------------------------------- async

/// Values the producer sends; the ring (4) never overflows because the
/// producer waits for each acknowledgement.
static DATA: Record<Cs, Ring<u32, 4>, 1> = Record::new("fw/data");
/// The consumer's acknowledgements.
static ACK: Record<Cs, Mailbox<u32>, 1> = Record::new("fw/ack");
/// The producer's verdict, written once when it is done.
static DONE: Record<Cs, Latest<bool>, 1> = Record::new("fw/done");
const ROUNDS: u32 = 32;

#[embassy_executor::task]
async fn producer() {
    let mut ok = true;
    match ACK.subscribe() {
        Ok(mut ack) => {
            for i in 0..ROUNDS {
                DATA.write(i);
                ok &= ack.recv().await == Ok(i);
            }
        }
        Err(_) => ok = false,
    }
    DONE.write(ok);
}

/// A producer task and this (consumer) task exchange `ROUNDS` values through
/// `recv().await` both ways; the consumer must park (poll `Pending`) and be
/// woken by the producer's write every round.
async fn async_recv_ping_pong(spawner: Spawner) -> bool {
    // Subscribe before the producer runs: a ring reader starts at the next
    // write.
    let (Ok(mut data), Ok(mut done)) = (DATA.subscribe(), DONE.subscribe()) else { return false };
    spawner.spawn(match producer() {
        Ok(token) => token,
        Err(_) => return false,
    });
    let mut received_ok = true;
    let mut parked = 0u32;
    for i in 0..ROUNDS {
        let mut first = true;
        let got = poll_fn(|cx| {
            let p = data.poll_recv(cx);
            if p.is_pending() && first {
                parked += 1;
                first = false;
            }
            p
        })
        .await;
        received_ok &= got == Ok(i);
        ACK.write(got.unwrap_or(u32::MAX));
    }
    let producer_ok = done.recv().await == Ok(true);
    // Nothing left over.
    let empty = poll_fn(|cx| Poll::Ready(data.poll_recv(cx).is_pending())).await;
    ensure!(received_ok);
    ensure!(producer_ok);
    ensure!(parked == ROUNDS);
    ensure!(empty);
    ensure!(DATA.writes() == ROUNDS as u64 && ACK.writes() == ROUNDS as u64);
    true
}

// ---------------------------------------------------------------- main

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    hprintln!("aimdb-core firmware self-test");
    let mut t = Tally::default();
    for &(name, run) in SYNC_CHECKS {
        t.check(name, run());
    }
    t.check("async_recv_ping_pong", async_recv_ping_pong(spawner).await);

    hprintln!("firmware: {} passed, {} failed", t.passed, t.failed);
    debug::exit(if t.failed == 0 { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    // Not reached under QEMU; on hardware without a debugger, park here.
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("PANIC {}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    hprintln!("HARDFAULT {:?}", ef);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}
