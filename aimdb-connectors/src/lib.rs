//! Transports for `aimdb-core`.
//!
//! A connector owns one transport and runs **one** future that drives both
//! directions: frames read from the transport go to an
//! [`inbound::Dispatch`](aimdb_core::inbound::Dispatch); messages pulled
//! from [`outbound::Routes`](aimdb_core::outbound::Routes) are written to
//! it. No task
//! per route, no allocation per message.
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
//! [`inbound::Stats`](aimdb_core::inbound::Stats)); a table's own
//! `stats()` returns its `Stats` directly. The fields mean the same thing
//! everywhere: `sent` (messages written to the transport), `received`
//! (messages read from it and accepted), `rejected` (read, refused by the
//! dispatcher: its `Stats` say why), `dropped` (outbound messages that
//! could not be sent, e.g. too large), `lagged` (values a `Ring` reader
//! lost before they could be sent).
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

#[macro_use]
mod log_shim;

#[cfg(feature = "testing")]
pub mod fault;
pub mod framed;
pub mod loopback;
#[cfg(feature = "mqtt")]
pub mod mqtt;
pub mod reconnect;
#[cfg(feature = "tokio")]
pub mod tokio_io;
