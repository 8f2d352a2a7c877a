//! The in-process MQTT broker the gateway starts when no `--broker` is
//! given: rumqttd, listening for MQTT 5 on a free loopback port.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Starts the broker on its own threads and waits until it accepts
/// connections. It lives as long as the process.
pub fn start() -> Result<SocketAddr, String> {
    // Ask the OS for a free port, then hand it to the broker. Another
    // process could take it in between; the wait below would then fail
    // loudly rather than talk to a stranger's server for long.
    let addr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?;
    let config = serde_json::json!({
        "id": 0,
        "router": {
            "id": 0,
            "max_connections": 64,
            "max_outgoing_packet_count": 200,
            "max_segment_size": 1_048_576,
            "max_segment_count": 4
        },
        "v5": {
            "1": {
                "name": "v5-1",
                "listen": addr.to_string(),
                "next_connection_delay_ms": 1,
                "connections": {
                    "connection_timeout_ms": 5000,
                    "max_payload_size": 4096,
                    "max_inflight_count": 100,
                    "dynamic_filters": true
                }
            }
        }
    });
    let config: rumqttd::Config =
        serde_json::from_value(config).map_err(|e| format!("broker config: {e}"))?;
    std::thread::Builder::new()
        .name("broker".into())
        .spawn(move || {
            let mut broker = rumqttd::Broker::new(config);
            if let Err(e) = broker.start() {
                eprintln!("gateway: embedded broker stopped: {e}");
            }
        })
        .map_err(|e| format!("broker thread: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return Err(format!("embedded broker did not listen on {addr}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(addr)
}
