//! What b3's firmware binaries share: the instruction counter (SysTick
//! under `qemu -icount`), the calibration, the row protocol on
//! semihosting (`B3CAL`, `B3`; see `src/bin/b3.rs`) and the pollers.

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use cortex_m_semihosting::hprintln;

/// Uncounted operations before the measured batches.
pub const WARMUP: usize = 64;
/// Operations in the first batch (the second runs twice as many); a
/// multiple of 8, the period of every row's inputs.
pub const OPS: usize = 4096;
/// Calibration: iterations of [`spin`] in the first batch.
pub const CAL: u32 = 1 << 21;

/// Starts SysTick free-running on the core clock, no interrupt.
pub fn start(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(0x00FF_FFFF);
    syst.clear_current();
    syst.enable_counter();
}

/// The value written by operation `i`: period 8, two postcard bytes.
pub fn value(i: usize) -> u32 {
    1000 + (i % 8) as u32
}

/// SysTick counts down from 2^24 - 1 on the core clock.
fn now() -> u32 {
    SYST::get_current()
}

fn elapsed(from: u32, to: u32) -> u32 {
    from.wrapping_sub(to) & 0x00FF_FFFF
}

/// Ticks for operations `from .. from + n`.
pub fn batch(op: &mut impl FnMut(usize), from: usize, n: usize) -> u32 {
    let t0 = now();
    for i in from..from + n {
        op(i);
    }
    elapsed(t0, now())
}

/// Warms up, runs the two batches, prints the row.
pub fn row(name: &str, mut op: impl FnMut(usize)) {
    batch(&mut op, 0, WARMUP);
    let small = batch(&mut op, WARMUP, OPS);
    let large = batch(&mut op, WARMUP + OPS, 2 * OPS);
    hprintln!("B3 {} {} {} {}", name, OPS, small, large);
}

/// Executes exactly `2 * n` instructions for `n >= 1`: `n` times `subs`
/// and `bne` (a count of ours, not a library's, so it cannot change under
/// us).
#[inline(never)]
fn spin(n: u32) {
    // SAFETY: a register-only loop: it reads and writes no memory and no
    // stack (`nomem, nostack`), and clobbers only its own register (declared
    // as `inout`, discarded) and the flags (not preserved by default).
    unsafe {
        core::arch::asm!(
            ".p2align 2",
            "2:",
            "subs {0}, #1",
            "bne 2b",
            inout(reg) n => _,
            options(nomem, nostack),
        );
    }
}

pub fn calibrate() {
    let run = |n: u32| {
        let t0 = now();
        spin(n);
        elapsed(t0, now())
    };
    run(CAL); // as every row, one uncounted round first
    let small = run(CAL);
    let large = run(2 * CAL);
    // spin(2 * CAL) runs 2 * CAL more instructions than spin(CAL).
    hprintln!("B3CAL {} {} {}", 2 * CAL, small, large);
}

/// Polls `fut` once with a no-op waker; it must be ready.
pub fn ready<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => {
            hprintln!("b3: expected a ready future");
            crate::fail()
        }
    }
}

/// Polls the connector future once with the task's waker: it must not
/// end.
pub fn step<F: Future>(run: core::pin::Pin<&mut F>, waker: &Waker) {
    let mut cx = Context::from_waker(waker);
    if run.poll(&mut cx).is_ready() {
        hprintln!("b3: the MQTT connector stopped");
        crate::fail()
    }
}
