//! Transports for `aimdb-core`.
//!
//! A connector owns one transport and runs **one** future that drives both
//! directions: frames read from the transport go to an
//! [`inbound::Dispatch`](aimdb_core::inbound::Dispatch); messages pulled
//! from [`outbound::Routes`](aimdb_core::outbound::Routes) are written to
//! it. No task
//! per route, no allocation per message.
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
#[cfg(feature = "tokio")]
pub mod tokio_io;
