//! The demo device on a host, over a real TCP/IP stack: the device
//! application of the firmware (`device-app`: readings, status, commands)
//! with its MQTT connector over embassy-net on a Linux TAP interface,
//! through `aimdb_connectors::embassy_net::TcpConnect` — the same code as
//! the NUCLEO-F767ZI firmware, with a TAP device where the board has its
//! Ethernet MAC. No aimdb code differs from the board's but the driver,
//! the executor's platform (std) and the time driver (std).
//!
//! ```text
//! device-tap --tap NAME --address 10.42.0.2/24 --broker 10.42.0.1:1883
//!            [--tls-ca CA.der --tls-name BROKER-NAME]
//! ```
//!
//! With `--tls-ca`, the MQTT connection is TLS 1.3 through
//! `aimdb_connectors::tls::TlsConnect` (embedded-tls, no heap), as on the
//! board: the broker's certificate must be signed by the CA in `CA.der`
//! (DER) and valid for `BROKER-NAME`. The random numbers come from the
//! host here; firmware passes its hardware generator.
//!
//! The TAP device must exist and be up (`ip tuntap add NAME mode tap`);
//! the other end of it is the host's (or a network namespace's) IP stack.
//! `tap-e2e` (`make tap`) sets all of that up in a namespace of its own.
//! Connection changes of the MQTT connector go to stderr; the process
//! exits 1 if the connector stops.

use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddrV4;

use aimdb_connectors::embassy_net::TcpConnect;
use aimdb_connectors::tls::{MaxFragmentLength, TlsConnect};
use aimdb_connectors::{Connect, ConnectFailure};
use embassy_executor::Spawner;
use embassy_net::{Config, Ipv4Cidr, Runner, StackResources, StaticConfigV4};
use embassy_net_tuntap::TunTapDevice;
use embassy_time::{Duration, Instant, Timer};
use rand_core::OsRng;
use static_cell::StaticCell;

const USAGE: &str = "usage: device-tap --tap NAME --address A.B.C.D/LEN --broker A.B.C.D:PORT \
                     [--tls-ca CA.der --tls-name BROKER-NAME]";

/// Times each connection attempt of the `Connect` it wraps, and prints it
/// on stderr with `what`: the TCP connect under TLS, and TCP plus the
/// handshake above it, so the handshake's time is their difference.
struct Timed<C> {
    inner: C,
    what: &'static str,
}

impl<C: Connect> Connect for Timed<C> {
    type Connection<'c>
        = C::Connection<'c>
    where
        Self: 'c;
    type Error = C::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let start = Instant::now();
        let opened = self.inner.connect().await;
        eprintln!(
            "device-tap: {} {} in {} µs",
            self.what,
            if opened.is_ok() { "opened" } else { "failed" },
            start.elapsed().as_micros()
        );
        opened
    }

    fn failure(error: &Self::Error) -> ConnectFailure {
        C::failure(error)
    }
}

/// What the TLS layer saw (with `--tls-ca`).
static TLS: aimdb_connectors::tls::Counters = aimdb_connectors::tls::Counters::new();

/// One socket: the broker connection (a static address, no DHCP).
static RESOURCES: StaticCell<StackResources<1>> = StaticCell::new();

struct Args {
    tap: String,
    address: Ipv4Cidr,
    broker: SocketAddrV4,
    /// The broker's CA certificate (DER) and name: TLS when given.
    tls: Option<(Vec<u8>, String)>,
}

fn parse_args() -> Result<Args, String> {
    let (mut tap, mut address, mut broker) = (None, None, None);
    let (mut tls_ca, mut tls_name) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let value = it.next().ok_or(format!("{a} needs a value\n{USAGE}"))?;
        match a.as_str() {
            "--tap" => tap = Some(value),
            "--address" => {
                let (ip, len) = value
                    .split_once('/')
                    .ok_or(format!("--address {value}: no /LEN"))?;
                let ip = ip.parse().map_err(|e| format!("--address {value}: {e}"))?;
                let len = len.parse().map_err(|e| format!("--address {value}: {e}"))?;
                address = Some(Ipv4Cidr::new(ip, len));
            }
            "--broker" => {
                broker = Some(
                    value
                        .parse()
                        .map_err(|e| format!("--broker {value}: {e}"))?,
                )
            }
            "--tls-ca" => {
                tls_ca = Some(std::fs::read(&value).map_err(|e| format!("--tls-ca {value}: {e}"))?)
            }
            "--tls-name" => tls_name = Some(value),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    let tls = match (tls_ca, tls_name) {
        (Some(ca), Some(name)) => Some((ca, name)),
        (None, None) => None,
        _ => return Err(format!("--tls-ca and --tls-name go together\n{USAGE}")),
    };
    match (tap, address, broker) {
        (Some(tap), Some(address), Some(broker)) => Ok(Args {
            tap,
            address,
            broker,
            tls,
        }),
        _ => Err(USAGE.into()),
    }
}

#[embassy_executor::task]
async fn net_task(mut runner: Runner<'static, TunTapDevice>) -> ! {
    runner.run().await
}

/// Reports the MQTT connector's connection changes on stderr.
#[embassy_executor::task]
async fn report_task() {
    let mut last = (false, None);
    loop {
        let now = (
            device_app::MQTT.is_connected(),
            device_app::MQTT.last_error(),
        );
        if now != last {
            match now {
                (true, _) => eprintln!(
                    "device-tap: connected to the broker ({} TLS handshakes)",
                    TLS.snapshot().handshakes
                ),
                (false, Some(cause)) => eprintln!(
                    "device-tap: not connected: {cause} ({} failed attempts)",
                    device_app::MQTT.connect_failures()
                ),
                (false, None) => {}
            }
            last = now;
        }
        Timer::after_millis(50).await;
    }
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let device = TunTapDevice::new(&args.tap).unwrap_or_else(|e| {
        eprintln!("device-tap: cannot open TAP device {}: {e}", args.tap);
        std::process::exit(1)
    });
    let config = Config::ipv4_static(StaticConfigV4 {
        address: args.address,
        gateway: None,
        dns_servers: Default::default(),
    });
    // The stack's seed (initial sequence numbers, local ports): random per run.
    let seed = RandomState::new().hash_one(std::process::id());
    let (stack, runner) =
        embassy_net::new(device, config, RESOURCES.init(StackResources::new()), seed);
    eprintln!(
        "device-tap: {} on {}, broker {}",
        args.address, args.tap, args.broker
    );
    if let Ok(t) = net_task(runner) {
        spawner.spawn(t);
    }
    if let Ok(t) = report_task() {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::control_task() {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::sensor_task() {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::link_stats_task() {
        spawner.spawn(t);
    }

    // As on the board (examples/firmware-stm32f767): socket and MQTT
    // session buffers in this task, a TCP timeout above the MQTT
    // keep-alive.
    let (mut sock_rx, mut sock_tx) = ([0u8; 1024], [0u8; 1024]);
    let (mut rx, mut tx) = ([0u8; device_app::MQTT_RX], [0u8; device_app::MQTT_TX]);
    let connect = TcpConnect::new(stack, args.broker, &mut sock_rx, &mut sock_tx)
        .timeout(Duration::from_secs(5));
    let stopped = match &args.tls {
        None => device_app::mqtt_connector(connect, &mut rx, &mut tx).await,
        Some((ca, name)) => {
            // TLS buffers as the module docs size them: records of up to
            // 4 KiB from the broker, 1 KiB to it.
            let (mut tls_rx, mut tls_tx) = ([0u8; 2 * (4096 + 256 + 5)], [0u8; 2 * 1280]);
            let tcp = Timed {
                inner: connect,
                what: "TCP",
            };
            let tls = TlsConnect::new(tcp, name, ca, OsRng, &mut tls_rx, &mut tls_tx)
                .max_fragment_length(MaxFragmentLength::Bits12)
                .counters(&TLS);
            let tls = Timed {
                inner: tls,
                what: "TCP + TLS handshake",
            };
            device_app::mqtt_connector(tls, &mut rx, &mut tx).await
        }
    };
    eprintln!("device-tap: the MQTT connector stopped: {stopped:?}");
    std::process::exit(1);
}
