//! The demo device's firmware pieces for QEMU's `lm3s6965evb`, shared by
//! the binaries in `src/bin`:
//!
//! - `device`: the demo device: readings, status and commands linked over
//!   the framed-stream connector on UART0 (the gateway's other end);
//! - `selftest`: aimdb-core checks plus the same device app against a
//!   scripted peer over an in-memory pipe; exits QEMU with 0 or 1;
//! - `footprint`: N or 2N routes, to measure the RAM cost of one route.
//!
//! No heap: no allocator is linked.
#![no_std]

pub mod app;
pub mod time;
pub mod uart;
