//! Connectors for aimdb-core (framed streams, MQTT, loopback): see the connectors issue.
#![no_std]
