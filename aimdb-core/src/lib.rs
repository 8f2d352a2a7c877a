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
//! - [`connector`]: the contract a transport implements against, which
//!   both tables implement: the message, the rejection, the counters.
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
//! ## Critical sections on hosts
//!
//! This library never picks a `critical-section` implementation (firmware
//! does: its HAL, or portable-atomic's single-core option). On a host,
//! records over `CriticalSectionRawMutex` need one: add
//! `critical-section = { version = "1", features = ["std"] }` to the
//! binary, or the link fails with `undefined symbol:
//! _critical_section_1_0_acquire`. Records over `sync::HostRawMutex`
//! (feature `std`) need none.
//!
//! ## Record → MQTT
//!
//! With `aimdb-connectors` (its crate docs compile both of these): on
//! **tokio** (features `mqtt`, `tokio`) the connector is a spawned task,
//! records are written from any thread, and a `Latest` record is
//! published retained at QoS 1:
//!
//! ```ignore
//! static TEMP: Record<HostRawMutex, Latest<i16>, 1> = Record::new("temp");
//! static READY: Readiness<1> = Readiness::new();
//! static COUNTERS: mqtt::Counters = mqtt::Counters::new();
//!
//! tokio::spawn(async {
//!     let mut temp = outbound::Link::new(TEMP.subscribe().unwrap(), "sensors/temp", Postcard);
//!     let mut payload = [0u8; 16];
//!     let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
//!     b.link(&mut temp);
//!     let mut routes = b.build().unwrap();
//!     let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();
//!     let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
//!     let connect = tokio_io::TcpConnect::new("127.0.0.1:1883");
//!     let parts = mqtt::Parts { connect, clock: TokioClock::new(), rx: &mut rx, tx: &mut tx, counters: &COUNTERS };
//!     let mut mqtt = Mqtt::new(mqtt::Config::new("sensor-1"), parts).unwrap();
//!     mqtt.run(&mut dispatch, &mut routes).await
//! });
//! std::thread::spawn(|| TEMP.write(215)); // → sensors/temp
//! ```
//!
//! On **embassy** (features `mqtt`, `embassy-net`) the same tables live in
//! a task, the records over `CriticalSectionRawMutex`, and the broker is
//! reached through the firmware's embassy-net stack:
//!
//! ```ignore
//! static TEMP: Record<CriticalSectionRawMutex, Latest<i16>, 1> = Record::new("temp");
//!
//! #[embassy_executor::task]
//! async fn mqtt_task(stack: embassy_net::Stack<'static>) {
//!     // `temp`, `routes`, `dispatch` as above.
//!     let (mut sock_rx, mut sock_tx) = ([0u8; 512], [0u8; 512]);
//!     let broker = (Ipv4Address::new(192, 0, 2, 1), 1883);
//!     let connect = aimdb_connectors::embassy_net::TcpConnect::new(stack, broker, &mut sock_rx, &mut sock_tx);
//!     let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
//!     let parts = mqtt::Parts { connect, clock: EmbassyClock, rx: &mut rx, tx: &mut tx, counters: &COUNTERS };
//!     let mut mqtt = Mqtt::new(mqtt::Config::new("sensor-1"), parts).unwrap();
//!     mqtt.run(&mut dispatch, &mut routes).await;
//! }
//! ```
//!
//! ## Example: the whole path
//!
//! A device and a host, each with its own records, an outbound table and
//! an inbound table, and a "transport" that is the example itself handing
//! each message to the other side. A connector from `aimdb-connectors`
//! does the same over a UART, TCP or MQTT, in one future per connection.
//!
//! ```
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::{self, Dispatch};
//! use aimdb_core::outbound::{self, Routes};
//! use aimdb_core::record::{Latest, Mailbox, Record};
//! use aimdb_core::sync::Readiness;
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//! use futures::executor::block_on;
//!
//! // Device: a temperature it publishes, a setpoint command it obeys.
//! static TEMP: Record<Cs, Latest<i16>, 1> = Record::new("temp");
//! static SETPOINT: Record<Cs, Mailbox<i16>, 1> = Record::new("setpoint");
//! // Host: its view of the temperature, the command it sends.
//! static HOST_TEMP: Record<Cs, Latest<i16>, 1> = Record::new("host_temp");
//! static HOST_CMD: Record<Cs, Mailbox<i16>, 1> = Record::new("host_cmd");
//! static DEV_READY: Readiness<1> = Readiness::new();
//! static HOST_READY: Readiness<1> = Readiness::new();
//!
//! // Device tables: TEMP goes out on `dev/temp`, `dev/setpoint` comes in.
//! let mut temp_out = outbound::Link::new(TEMP.subscribe().unwrap(), "dev/temp", Postcard);
//! let mut p1 = [0u8; 16];
//! let mut b = Routes::<_, 1, 1>::builder(&DEV_READY, &mut p1);
//! b.link(&mut temp_out);
//! let mut dev_out = b.build().unwrap();
//! let setpoint_in = inbound::Link::new(&SETPOINT, Postcard);
//! let mut b = Dispatch::<1, 1>::builder();
//! b.link("dev/setpoint", &setpoint_in);
//! let mut dev_in = b.build().unwrap();
//!
//! // Host tables, the mirror image.
//! let temp_in = inbound::Link::new(&HOST_TEMP, Postcard);
//! let mut b = Dispatch::<1, 1>::builder();
//! b.link("dev/temp", &temp_in);
//! let mut host_in = b.build().unwrap();
//! let mut cmd_out = outbound::Link::new(HOST_CMD.subscribe().unwrap(), "dev/setpoint", Postcard);
//! let mut p2 = [0u8; 16];
//! let mut b = Routes::<_, 1, 1>::builder(&HOST_READY, &mut p2);
//! b.link(&mut cmd_out);
//! let mut host_out = b.build().unwrap();
//!
//! // The device writes; its routes hand out a message; the host dispatches it.
//! TEMP.write(215);
//! let m = block_on(dev_out.next());
//! assert_eq!((m.topic, m.payload), ("dev/temp", &[0xae, 0x03][..]));
//! assert_eq!(host_in.dispatch(m.topic.as_bytes(), m.payload), Ok(1));
//! assert_eq!(HOST_TEMP.latest(), Some(215));
//!
//! // And back: a command, taken exactly once by the device's reader.
//! let mut cmd = SETPOINT.subscribe().unwrap();
//! HOST_CMD.write(200);
//! let m = block_on(host_out.next());
//! assert_eq!(dev_in.dispatch(m.topic.as_bytes(), m.payload), Ok(1));
//! assert_eq!(cmd.try_recv(), Ok(200));
//!
//! // Bad input is counted, never written.
//! assert!(dev_in.dispatch(b"dev/setpoint", &[0xff]).is_err());
//! assert_eq!(dev_in.stats().malformed_payload, 1);
//! assert!(cmd.try_recv().is_err());
//! ```
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

mod packed;

pub mod codec;
mod config;
pub mod connector;
// The counter-set macro and its single-writer bump, shared with the
// connectors crate; not an API of its own.
#[doc(hidden)]
pub mod counters;
pub mod inbound;
pub mod outbound;
pub mod presence;
pub mod record;
#[cfg(feature = "remote")]
#[cfg_attr(docsrs, doc(cfg(feature = "remote")))]
pub mod remote;
pub mod sync;
pub mod topic;

pub use config::{ConfigErrors, ConfigIssue};
