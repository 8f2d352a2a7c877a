//! b3_on_target's backlog rows: what storing a value in a durable
//! backlog and replaying it cost on the Cortex-M, in a binary of its own
//! (as `b3-tls`: the backlog's code in `b3` would change how the
//! compiler inlines `b3`'s rows). The flash is RAM (`flash::RamFlash`),
//! so the counts are the backlog's and sequential-storage's code, not a
//! flash controller's wait: add the chip's program and erase times.
//!
//! - `backlog_store`: one reading (the demo device's: topic
//!   `dev/readings`, a 4-byte postcard payload) stored in a backlog that
//!   is not full, as during an outage;
//! - `backlog_replay`: the oldest read back, handed out and removed once
//!   acknowledged (`next`, `sent`, `delivered(1)`), as after it.
//!
//! The backlog is configured as `device-mqtt-backlog`'s (no cache, 1 KiB
//! pages). Fewer operations than `b3`'s rows (`OPS`): each stored value
//! stays in flash until its replay row, and 40 KiB of the 64 KiB of RAM
//! hold 784 of them. Same counter, calibration and output as `b3`.
#![no_std]
#![no_main]

use aimdb_connectors::backlog::{page_cache, Backlog, Counters, Full};
use aimdb_connectors::clock::Instant;
use aimdb_core::connector::{Message, QoS};
use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use firmware_qemu::flash::{RamFlash, PAGE};
use firmware_qemu::measure::{batch, calibrate, ready};

/// Operations of the first measured batch (the second runs twice as
/// many), after a warm-up of `WARMUP`.
const OPS: usize = 256;
const WARMUP: usize = 16;
const PAGES: usize = 40;

static COUNTERS: Counters = Counters::new();

#[entry]
fn main() -> ! {
    let Some(p) = cortex_m::Peripherals::take() else {
        fail("peripherals taken")
    };
    firmware_qemu::measure::start(p.SYST);
    calibrate();
    let Some(flash) = cortex_m::singleton!(: RamFlash<{ PAGES * PAGE }> = RamFlash::new()) else {
        fail("flash")
    };
    let mut buf = [0u8; 64];
    let range = 0..(PAGES * PAGE) as u32;
    let opened = ready(Backlog::open(
        flash,
        range,
        page_cache::<PAGES>(),
        1,
        Full::RefuseNewest,
        &COUNTERS,
        &mut buf,
    ));
    let Ok(mut backlog) = opened else {
        fail("open the backlog")
    };
    let now = Instant::from_micros(0);
    rows("backlog_store", &mut |i| {
        let payload = firmware_qemu::measure::value(i).to_le_bytes();
        let m = Message {
            route: 0,
            topic: "dev/readings",
            payload: &payload,
            lagged: 0,
            qos: QoS::AtLeastOnce,
            retain: false,
            urgent: false,
        };
        if ready(backlog.push(&m, now, &mut buf)).is_err() {
            fail("store")
        }
    });
    rows("backlog_replay", &mut |_| {
        match ready(backlog.next(&mut buf)) {
            Ok(Some(_)) => {}
            _ => fail("replay: nothing stored"),
        }
        backlog.sent();
        if ready(backlog.delivered(1, now, &mut buf)).is_err() {
            fail("remove")
        }
    });
    if !backlog.is_empty() {
        fail("the rows left values behind")
    }
    hprintln!("B3END");
    firmware_qemu::exit(cortex_m_semihosting::debug::EXIT_SUCCESS)
}

/// As `measure::row`, with this binary's operation counts.
fn rows(name: &str, op: &mut impl FnMut(usize)) {
    batch(op, 0, WARMUP);
    let small = batch(op, WARMUP, OPS);
    let large = batch(op, WARMUP + OPS, 2 * OPS);
    hprintln!("B3 {} {} {} {}", name, OPS, small, large);
}

firmware_qemu::handlers!("b3-backlog");
