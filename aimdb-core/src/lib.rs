//! # aimdb-core
//!
//! A typed data plane for devices and hosts: application code writes typed
//! *records*; connectors mirror them to and from a transport. The crate is
//! `#![no_std]` and uses no heap unless the `alloc` feature is on.
//!
//! ```text
//!  producers ──► Record<T> ──┐                          ┌── Record<U> ◄── inbound::Dispatch
//!  (sync, never block)       │ route waker sets bit i   │   (decode + write, zero alloc)
//!                            ▼                          │
//!                 outbound::Routes ──► transport ──► peer ──► transport ──► frames
//!                 (readiness bitmap; transport pulls next())
//! ```
//!
//! Layers, top-down:
//!
//! - [`record`]: `Latest`, `Ring<N>` and `Mailbox` buffers behind a
//!   `RawMutex`; synchronous writes, poll-based readers, `const fn new()`.
//! - [`topic`]: validated topic names and MQTT filters, matched without
//!   allocating.
//! - [`codec`]: `Encode` into a borrowed scratch slice (postcard by default),
//!   `Decode` from bytes.
//! - [`inbound`]: `Dispatch` routes `(topic, payload)` frames from a
//!   transport into records by exact topic, pattern or key.
//! - [`outbound`]: `Routes` turns record writes into messages the transport
//!   pulls with `next()`: one task per connector, never one per route.
//! - [`sync`]: the readiness bitmap the outbound path is built on (route
//!   bits, and the transport's waker parked in its summary word); the only
//!   module with `unsafe`.
//!
//! ## Features
//!
//! | feature | adds |
//! | --- | --- |
//! | (none) | `no_std`, no heap |
//! | `alloc` | owned encoders (`Vec<u8>`), growable keyed tables, `Arc` readiness handles |
//! | `std` | implies `alloc` |
//! | `json` | JSON codec (hosts) |
//! | `defmt` / `log` | the crate's logging shim (at most one) |
//!
//! ## Example
//!
//! ```
//! use aimdb_core::record::{Ring, Record};
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
//!
//! static TEMPS: Record<CriticalSectionRawMutex, Ring<i16, 4>, 1> = Record::new("temps");
//!
//! let mut r = TEMPS.subscribe().unwrap();
//! for t in 0..6 {
//!     TEMPS.write(t);
//! }
//! // Six writes into a ring of four: the reader lost the two oldest.
//! assert_eq!(r.try_recv(), Err(aimdb_core::record::TryRecvError::Lagged(2)));
//! assert_eq!(r.try_recv(), Ok(2));
//! ```
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

#[cfg(all(feature = "defmt", feature = "log"))]
compile_error!("features `defmt` and `log` are mutually exclusive: pick one logging backend");

#[macro_use]
mod log_shim;

pub mod codec;
pub mod inbound;
pub mod outbound;
pub mod record;
pub mod sync;
pub mod topic;

pub use inbound::Dispatch as InboundDispatch;
pub use outbound::Routes as OutboundRoutes;
