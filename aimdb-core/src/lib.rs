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
//! ## Threading model
//!
//! Whether a table or a connector future may cross threads follows from
//! the records' mutex, with one implementation of the routing code:
//!
//! | records over | records are | `Routes` / `Dispatch` (default flavour) | connector future |
//! | --- | --- | --- | --- |
//! | `sync::HostRawMutex` (std hosts), `CriticalSectionRawMutex` | `Send + Sync` | `Send` | `Send`: `tokio::spawn` on the multi-thread runtime |
//! | `NoopRawMutex` | `Send`, not `Sync` | do not build: use [`outbound::LocalRoutes`] / [`inbound::LocalDispatch`] | not `Send`: embassy, a tokio `LocalSet`, or a thread of its own |
//!
//! The tables hold their links type-erased; the erased type is a type
//! parameter, `dyn outbound::Route + Send` in [`outbound::Routes`] and `dyn
//! inbound::Route + Sync` in [`inbound::Dispatch`] by default, `dyn Route`
//! in the `Local` aliases. A link over a `NoopRawMutex` record is not
//! `Send`, so it cannot be linked into a default table by mistake: the
//! compiler names the record. Name the table type when you build it
//! (`Routes::<_, W, N>::builder`, `Dispatch::<N, NODES>::builder`) so the
//! default applies.
//!
//! Which mutex: on a host, records written from other threads or tokio
//! workers take `sync::HostRawMutex` (a lock per record; `std` feature).
//! `CriticalSectionRawMutex` is also thread-safe, but on a host it is
//! `critical-section`'s `std` implementation, one process-wide lock shared
//! by every record, so unrelated records on two threads contend (the
//! `host_lock` rows of `b1_outbound_wakeup`); keep it for code shared with
//! interrupt handlers and MCUs. `NoopRawMutex` is for records that never
//! leave one executor. A write from another thread costs the connector one
//! task wake, however many routes it makes ready.
//!
//! Running a connector: on tokio, `tokio::spawn(async move { framed.run(..).await })`
//! with `'static` tables (statics, or leaked at start-up), on the
//! multi-thread or the current-thread runtime; on a thread of its own,
//! `aimdb_connectors::tokio_io::run_on_thread` (the connector is that
//! thread's `block_on` future, and need not be `Send`); on embassy, a task
//! that awaits `run`.
//!
//! ## Features
//!
//! | feature | adds |
//! | --- | --- |
//! | (none) | `no_std`, no heap |
//! | `alloc` | owned encoders (`Vec<u8>`), growable keyed tables, `Arc` readiness handles |
//! | `std` | implies `alloc`; `sync::HostRawMutex` |
//! | `json` | JSON codec (hosts) |
//! | `defmt` | `defmt::Format` for the error and kind types |
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

mod packed;

pub mod codec;
pub mod connector;
pub mod inbound;
pub mod outbound;
pub mod record;
pub mod sync;
pub mod topic;
