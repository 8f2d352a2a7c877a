//! MQTT connector against a real mosquitto broker (placeholder while written).
