//! Pieces of the gateway that its binaries share: the mosquitto child
//! process ([`broker`]) and the device firmware under QEMU ([`qemu`]).
//! `gateway` (src/main.rs) bridges the framed device to MQTT;
//! `mqtt-device-e2e` (src/bin) checks the MQTT device against mosquitto.

pub mod broker;
pub mod qemu;
