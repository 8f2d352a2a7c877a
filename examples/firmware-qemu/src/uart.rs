//! UART0 of the lm3s6965 (a PL011) as `embedded-io-async` `Read` and
//! `Write` halves, so the framed-stream connector runs on it unchanged.
//!
//! Receive is interrupt-driven: a reader that finds the FIFO empty
//! registers its waker and unmasks the receive and receive-timeout
//! interrupts; the handler masks them again and wakes it, so the executor
//! sleeps while the line is idle. Transmit writes while the FIFO has room
//! (QEMU drains it at once; on silicon a full FIFO yields to other tasks).

use core::future::poll_fn;
use core::ptr::{read_volatile, write_volatile};
use core::task::Poll;
use portable_atomic::{AtomicBool, Ordering};

use cortex_m::interrupt::InterruptNumber;
use cortex_m::peripheral::NVIC;
use embassy_sync::waitqueue::AtomicWaker;
use embedded_io_async::{ErrorKind, ErrorType, Read, ReadReady, Write};

const BASE: usize = 0x4000_C000;
const DR: usize = 0x00;
const FR: usize = 0x18;
const CTL: usize = 0x30;
const IM: usize = 0x38;
const ICR: usize = 0x44;
const FR_RXFE: u32 = 1 << 4;
const FR_TXFF: u32 = 1 << 5;
/// Receive and receive-timeout interrupts.
const INT_RX: u32 = (1 << 4) | (1 << 6);
/// UART enable, transmit enable, receive enable.
const CTL_ON: u32 = 1 | (1 << 8) | (1 << 9);
/// UART0's interrupt number on the lm3s6965.
pub const IRQ: u16 = 5;

#[derive(Clone, Copy)]
struct Irq;

// SAFETY: 5 is UART0's interrupt line on this device; the vector table
// (cortex-m-rt without `device`) routes every line to `DefaultHandler`.
unsafe impl InterruptNumber for Irq {
    fn number(self) -> u16 {
        IRQ
    }
}

static RX_WAKER: AtomicWaker = AtomicWaker::new();
static TAKEN: AtomicBool = AtomicBool::new(false);

fn reg(offset: usize) -> *mut u32 {
    (BASE + offset) as *mut u32
}

fn read_reg(offset: usize) -> u32 {
    // SAFETY: `offset` is one of the PL011 register offsets above, inside
    // UART0's always-mapped register block; a volatile 32-bit read of a
    // status or data register has no effect beyond the documented one
    // (reading DR pops one received byte, which is what callers want).
    unsafe { read_volatile(reg(offset)) }
}

fn write_reg(offset: usize, v: u32) {
    // SAFETY: as in `read_reg`; writes go to control, mask, clear and data
    // registers, each a plain 32-bit register of UART0.
    unsafe { write_volatile(reg(offset), v) }
}

/// Receiving half of UART0.
pub struct Rx(());
/// Transmitting half of UART0.
pub struct Tx(());

/// Enables UART0 and its interrupt and hands out its halves, once.
/// QEMU does not model baud rates; on silicon, set them here.
pub fn take() -> Option<(Rx, Tx)> {
    if TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    write_reg(IM, 0);
    write_reg(ICR, 0x7ff);
    write_reg(CTL, CTL_ON);
    // SAFETY: unmasking UART0's line is sound: its handler (`on_interrupt`,
    // called from `DefaultHandler`) touches only the mask, clear register
    // and an `AtomicWaker`, all interrupt-safe.
    unsafe { NVIC::unmask(Irq) };
    Some((Rx(()), Tx(())))
}

/// Call from `DefaultHandler` for interrupt [`IRQ`].
pub fn on_interrupt() {
    write_reg(IM, read_reg(IM) & !INT_RX);
    write_reg(ICR, INT_RX);
    RX_WAKER.wake();
}

impl ErrorType for Rx {
    type Error = ErrorKind;
}

impl ErrorType for Tx {
    type Error = ErrorKind;
}

impl Read for Rx {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        if buf.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| {
            let mut n = 0;
            while n < buf.len() && read_reg(FR) & FR_RXFE == 0 {
                buf[n] = read_reg(DR) as u8;
                n += 1;
            }
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            RX_WAKER.register(cx.waker());
            write_reg(IM, read_reg(IM) | INT_RX);
            // A byte that arrived before the unmask raised its interrupt
            // already (the level is latched), so parking here loses nothing.
            Poll::Pending
        })
        .await
    }
}

impl ReadReady for Rx {
    fn read_ready(&mut self) -> Result<bool, ErrorKind> {
        Ok(read_reg(FR) & FR_RXFE == 0)
    }
}

impl Write for Tx {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        if buf.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| {
            let mut n = 0;
            while n < buf.len() && read_reg(FR) & FR_TXFF == 0 {
                write_reg(DR, buf[n] as u32);
                n += 1;
            }
            if n > 0 {
                Poll::Ready(Ok(n))
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await
    }

    async fn flush(&mut self) -> Result<(), ErrorKind> {
        Ok(())
    }
}
