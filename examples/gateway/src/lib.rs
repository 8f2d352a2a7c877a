//! Pieces of the gateway that its binaries share: the mosquitto child
//! process ([`broker`]), the device firmware under QEMU ([`qemu`]), both
//! started so that they die with the gateway ([`child`]).
//! `gateway` (src/main.rs) bridges the framed device to MQTT;
//! `mqtt-device-e2e` (src/bin) checks the MQTT device against mosquitto.

pub mod broker;
pub mod child;
pub mod pki;
pub mod qemu;
