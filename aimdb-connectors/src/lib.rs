//! Transports for `aimdb-core`.
//!
//! A connector owns one transport and runs **one** future that drives both
//! directions: frames read from the transport go to an
//! [`inbound::Dispatch`](aimdb_core::inbound::Dispatch); messages pulled
//! from [`outbound::Routes`](aimdb_core::outbound::Routes) are written to
//! it. No task per route, no allocation per message. One implementation
//! serves embassy and tokio: the byte-stream connectors are written
//! against `embedded-io-async` `Read`/`Write`.
//!
//! Each protocol is an [`engine`]: a state machine with no I/O and no
//! clock (bytes and time in, bytes out). One [`runner`] drives any engine
//! over any [`Connect`] — connect, backoff and reconnect, the outbound
//! pull, link state, timers on the one injected [`clock`] — so a new
//! transport writes an engine and nothing else (`docs/ARCHITECTURE.md`
//! in the repository draws it).
//!
//! | module | what | feature |
//! | --- | --- | --- |
//! | [`engine`] | the contract every protocol engine implements | always |
//! | [`runner`] | what drives every engine: I/O, reconnect, backoff, link state, bursts | always |
//! | [`clock`] | [`Clock`](clock::Clock): now and sleep-until; `EmbassyClock` on embassy-time | always (`embassy-time`) |
//! | [`framed`] | COBS + postcard frames over any byte stream (UART, TCP, UDS, pipes); [`Framed::run`](framed::Framed::run) for one connection, [`Framed::run_reconnecting`](framed::Framed::run_reconnecting) for the reconnect loop | always |
//! | `mqtt` | an MQTT 5 client connector, no heap, a configurable in-flight window, keep-alive, reconnect, sessions | `mqtt` |
//! | [`loopback`] | an in-memory duplex pair, for tests and benches | always |
//! | [`connect`] | [`Connect`]: opens a connection, which the runner splits into two halves | always |
//! | [`reconnect`] | the backoff and policy both reconnecting connectors use | always |
//! | `embassy_net` | `TcpConnect`: an embassy-net `TcpSocket` as a [`Connect`], caller-provided buffers, no heap | `embassy-net` |
//! | `tls` | `TlsConnect`: TLS 1.3 under any [`Connect`] for devices (embedded-tls), the broker's certificate checked, no heap | `embedded-tls` |
//! | `tokio_io` | tokio streams as `embedded-io-async` halves, `TcpConnect`, `UnixConnect`, `TokioClock`, `run_on_thread` | `tokio` |
//! | `backlog` | a durable backlog on NOR flash or a file: values kept until the peer acknowledged them, through outages and reboots | `backlog` |
//! | `fault` | a transport wrapper that splits, stalls and closes on a plan, for tests | `testing` |
//!
//! Other features: `alloc`, `std` (pass-through to `aimdb-core`), `tls`
//! (`mqtt::TlsConnect`, rustls), `log` / `defmt` (the crate's logging
//! shim; `log` wins when both are on). Every combination builds.
//!
//! ## Record → MQTT
//!
//! A record written anywhere in the program, published by the MQTT
//! connector (retained, QoS 1: a `Latest` record's defaults). On
//! **tokio** (features `mqtt`, `tokio`), the connector is a spawned task
//! and any thread writes:
//!
//! ```no_run
//! # #[cfg(all(feature = "mqtt", feature = "tokio"))]
//! # mod example {
//! use aimdb_connectors::mqtt::{Config, Counters, Mqtt, Parts};
//! use aimdb_connectors::tokio_io::{TcpConnect, TokioClock};
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::{inbound::Dispatch, outbound::{Link, Routes}};
//! use aimdb_core::record::{Latest, Record};
//! use aimdb_core::sync::{HostRawMutex, Readiness};
//!
//! static TEMP: Record<HostRawMutex, Latest<i16>, 1> = Record::new("temp");
//! static READY: Readiness<1> = Readiness::new();
//! static COUNTERS: Counters = Counters::new();
//!
//! #[tokio::main]
//! async fn main() {
//!     tokio::spawn(async {
//!         let mut temp = Link::new(TEMP.subscribe().unwrap(), "sensors/temp", Postcard);
//!         let mut payload = [0u8; 16];
//!         let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
//!         b.link(&mut temp);
//!         let mut routes = b.build().unwrap();
//!         let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();
//!         let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
//!         let connect = TcpConnect::new("127.0.0.1:1883");
//!         let parts = Parts { connect, clock: TokioClock::new(), rx: &mut rx, tx: &mut tx, counters: &COUNTERS };
//!         let mut mqtt = Mqtt::new(Config::new("sensor-1"), parts).unwrap();
//!         mqtt.run(&mut dispatch, &mut routes).await
//!     });
//!     std::thread::spawn(|| TEMP.write(215)).join().unwrap(); // → sensors/temp
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! On **embassy** (features `mqtt`, `embassy-net`), the same tables in a
//! task, the records over `CriticalSectionRawMutex`, the broker reached
//! through the firmware's embassy-net stack:
//!
//! ```no_run
//! # #[cfg(all(feature = "mqtt", feature = "embassy-net"))]
//! # mod example {
//! use aimdb_connectors::clock::EmbassyClock;
//! use aimdb_connectors::embassy_net::TcpConnect;
//! use aimdb_connectors::mqtt::{Config, Counters, Mqtt, Parts};
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::{inbound::Dispatch, outbound::{Link, Routes}};
//! use aimdb_core::record::{Latest, Record};
//! use aimdb_core::sync::Readiness;
//! use embassy_net::{Ipv4Address, Stack};
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//!
//! static TEMP: Record<Cs, Latest<i16>, 1> = Record::new("temp");
//! static READY: Readiness<1> = Readiness::new();
//! static COUNTERS: Counters = Counters::new();
//!
//! /// An `#[embassy_executor::task]`'s body; `TEMP.write(215)` in any
//! /// task or interrupt is published on `sensors/temp`.
//! pub async fn mqtt_task(stack: Stack<'static>) {
//!     let mut temp = Link::new(TEMP.subscribe().unwrap(), "sensors/temp", Postcard);
//!     let mut payload = [0u8; 16];
//!     let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
//!     b.link(&mut temp);
//!     let mut routes = b.build().unwrap();
//!     let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();
//!     let (mut sock_rx, mut sock_tx) = ([0u8; 512], [0u8; 512]);
//!     let broker = (Ipv4Address::new(192, 0, 2, 1), 1883);
//!     let connect = TcpConnect::new(stack, broker, &mut sock_rx, &mut sock_tx);
//!     let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
//!     let parts = Parts { connect, clock: EmbassyClock, rx: &mut rx, tx: &mut tx, counters: &COUNTERS };
//!     let mut mqtt = Mqtt::new(Config::new("sensor-1"), parts).unwrap();
//!     mqtt.run(&mut dispatch, &mut routes).await;
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! ## On a host
//!
//! See `tokio_io` for a framed connector over TCP `tokio::spawn`ed on the
//! multi-thread runtime, and `mqtt` for the MQTT connector: records over
//! `aimdb_core::sync::HostRawMutex`, tables leaked or in `static`s, the
//! connector future spawned.
//!
//! ## On firmware
//!
//! The same code on an embassy executor: records in `static`s over
//! `CriticalSectionRawMutex` (shared with interrupts and other tasks;
//! `NoopRawMutex` records, for one executor, live in a `StaticCell` and
//! use the `Local` tables), tables in the task, the UART's halves as the
//! stream.
//! This function is what an embassy task awaits (with
//! `embassy_stm32::usart::BufferedUart::split()`, `embassy_nrf`'s
//! `BufferedUarte`, or any other `embedded-io-async` halves); the device of
//! `examples/device-app` in this repository is this, in full:
//!
//! ```
//! use aimdb_connectors::framed::{self, Counters, Framed};
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::{self, Dispatch};
//! use aimdb_core::outbound::{self, Routes};
//! use aimdb_core::record::{Latest, Mailbox, Record};
//! use aimdb_core::sync::Readiness;
//! use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
//! use embedded_io_async::{Read, Write};
//!
//! static STATUS: Record<Cs, Latest<u8>, 1> = Record::new("status");
//! static CMD: Record<Cs, Mailbox<u8>, 1> = Record::new("cmd");
//! static READY: Readiness<1> = Readiness::new();
//! static LINK: Counters = Counters::new();
//!
//! /// Runs the device link on one UART until it fails.
//! pub async fn uart_link(rx: impl Read, tx: impl Write) -> framed::Error {
//!     let mut status = outbound::Link::new(STATUS.subscribe().unwrap(), "dev/status", Postcard);
//!     let mut payload = [0u8; 16];
//!     let mut b = Routes::<_, 1, 1>::builder(&READY, &mut payload);
//!     b.link(&mut status);
//!     let mut routes = b.build().unwrap();
//!     let cmd = inbound::Link::new(&CMD, Postcard);
//!     let mut b = Dispatch::<1, 1>::builder();
//!     b.link("dev/cmd", &cmd);
//!     let mut dispatch = b.build().unwrap();
//!     // Small frames on a device: 64 bytes in, 128 out.
//!     Framed::<64, 128>::with_sizes(&LINK)
//!         .run(rx, tx, &mut dispatch, &mut routes)
//!         .await
//! }
//!
//! // Here, the UART is the in-memory pair; the peer reads the status frame
//! // and hangs up.
//! let pair = aimdb_connectors::loopback::Pair::<embassy_sync::blocking_mutex::raw::NoopRawMutex, 64>::new();
//! let ((rx, tx), (mut peer_rx, _)) = (pair.a(), pair.b());
//! STATUS.write(1);
//! let peer = async {
//!     let mut buf = [0u8; 32];
//!     let n = peer_rx.read(&mut buf).await.unwrap();
//!     pair.close();
//!     n
//! };
//! let (end, n) = futures::executor::block_on(embassy_futures::join::join(uart_link(rx, tx), peer));
//! assert_eq!((end, LINK.snapshot().sent), (framed::Error::Closed, 1));
//! assert!(n > 0);
//! ```
//!
//! ## Counters
//!
//! Every connector and table counts in the same words. A `Counters` type
//! holds live atomics that one side updates and anyone may read (a
//! `static`, `const fn new()`, no read-modify-write so `thumbv6m` is
//! fine): [`framed::Counters`], `mqtt::Counters`, and
//! [`inbound::Counters`](aimdb_core::inbound::Counters) for a `Dispatch`
//! others must read while a connector owns it. `Counters::snapshot()`
//! returns a `Stats`, a plain copy ([`framed::Stats`], `mqtt::Stats`,
//! [`connector::InboundStats`](aimdb_core::connector::InboundStats)); a table's own
//! `stats()` returns its `Stats` directly. The fields mean the same thing
//! everywhere (the contract's words, see [`aimdb_core::connector`]):
//! `sent` (messages the transport accepted), `received` (messages read
//! from it and handed to the dispatcher, accepted or not), `rejected` (of
//! those, the ones the dispatcher refused: its stats say why), `dropped`
//! (outbound messages that could not be sent, e.g. too large), `lagged`
//! (values a `Ring` reader lost before they could be sent).
#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

#[macro_use]
mod log_shim;

/// `aimdb_core::remote::Counted` for a connector's shared counters, from
/// the fields its `snapshot()` has in common with `LinkCounters`.
#[cfg(feature = "remote")]
macro_rules! counted {
    ($counters:ty) => {
        impl aimdb_core::remote::Counted for $counters {
            fn link_counters(&self) -> aimdb_core::remote::LinkCounters {
                let s = self.snapshot();
                aimdb_core::remote::LinkCounters {
                    sent: s.sent,
                    received: s.received,
                    rejected: s.rejected,
                    dropped: s.dropped,
                    lagged: s.lagged,
                    reconnects: s.reconnects,
                }
            }
        }
    };
}
#[cfg(feature = "remote")]
pub(crate) use counted;

#[cfg(feature = "backlog")]
pub mod backlog;
pub mod clock;
pub mod connect;
pub mod durable;
#[cfg(feature = "embassy-net")]
pub mod embassy_net;
pub mod engine;
#[cfg(feature = "testing")]
pub mod fault;
pub mod framed;
pub mod loopback;
#[cfg(feature = "mqtt")]
pub mod mqtt;
pub mod reconnect;
pub mod runner;
#[cfg(feature = "embedded-tls")]
pub mod tls;
#[cfg(feature = "tokio")]
pub mod tokio_io;

pub use connect::{Connect, ConnectFailure};
