//! What the demo device and its gateway say to each other: record types and
//! topics. Payloads are postcard on the device link and JSON on MQTT.
#![no_std]

use postcard_schema::Schema;
use serde::{Deserialize, Serialize};

/// Device → host: one sensor reading, `seq` counting from 0 since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Schema)]
pub struct Reading {
    /// Sequence number (0, 1, 2, …), so a receiver can prove exactly-once.
    pub seq: u32,
    /// Temperature in hundredths of a degree Celsius.
    pub centi_celsius: i32,
}

/// Host → device: an instruction (latest wins, taken once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Schema)]
pub enum Command {
    /// Switch the LED.
    SetLed(bool),
    /// Change the reading interval (milliseconds, at least 1).
    SetInterval(u16),
    /// Echo `id` back in the next status.
    Ping(u32),
}

/// Device → host: the device's state after the last command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Schema)]
pub struct Status {
    /// LED state.
    pub led: bool,
    /// Reading interval in milliseconds.
    pub interval_ms: u16,
    /// Commands applied since boot.
    pub commands: u32,
    /// `id` of the last `Ping`.
    pub last_ping: u32,
}

/// Device → host: the MQTT device's connector counters, published when
/// they change (the framed device has no such record: the gateway counts
/// its link).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Schema)]
pub struct LinkStats {
    /// Publishes received from the broker.
    pub received: u32,
    /// Received publishes rejected (unknown topic, malformed payload, …).
    pub rejected: u32,
    /// Messages handed to the broker connection.
    pub sent: u32,
    /// Successful connections after the first.
    pub reconnects: u32,
    /// Failed connection attempts.
    pub connect_failures: u32,
    /// Commands replaced in the device's mailbox before they were applied.
    pub commands_replaced: u32,
    /// Readings the connector never sent because the readings `Ring`
    /// overflowed first (its reader's `Lagged` counts, e.g. while the
    /// broker was unreachable for longer than the ring holds).
    pub lagged: u32,
}

/// Topics on the device link (and, under a prefix, on MQTT through the
/// gateway). The MQTT device publishes and subscribes to these same
/// topics on the broker, postcard payloads as on the framed link.
pub mod topics {
    /// Readings, device → host.
    pub const READINGS: &str = "dev/readings";
    /// Status, device → host.
    pub const STATUS: &str = "dev/status";
    /// Commands, host → device.
    pub const CMD: &str = "dev/cmd";
    /// The MQTT device's [`LinkStats`](super::LinkStats), device → host.
    pub const LINK: &str = "dev/link";
    /// The device's presence (`aimdb_core::presence`'s JSON, retained): its
    /// birth and will on MQTT.
    pub const PRESENCE: &str = "dev/presence";
    /// Remote-access requests to the device on its framed link
    /// (`aimdb_core::remote`); through the gateway, under its prefix.
    pub const REMOTE_REQ: &str = aimdb_core::remote::proto::REQUEST;
    /// Remote-access answers from the device on its framed link.
    pub const REMOTE_RSP: &str = aimdb_core::remote::proto::RESPONSE;
    /// Remote-access requests to the MQTT device.
    pub const MQTT_REMOTE_REQ: &str = aimdb_core::remote_topic!("dev", request);
    /// Remote-access answers from the MQTT device.
    pub const MQTT_REMOTE_RSP: &str = aimdb_core::remote_topic!("dev", response);
    /// The MQTT device's manifest (JSON, retained): its records with
    /// kinds, types, topics and schema hashes.
    pub const MQTT_MANIFEST: &str = aimdb_core::remote_topic!("dev", manifest);
}
