//! The gateway's records and its two connectors.
//!
//! ```text
//!  device ══UART/TCP══► framed ──► Dispatch ──► READINGS (Ring), STATUS (Latest) ──► Routes ──► MQTT {prefix}/readings, /status
//!  device ◄═UART/TCP═══ framed ◄── Routes ◄──── COMMAND (Mailbox) ◄──── Dispatch ◄── MQTT {prefix}/cmd
//!          framed link state ──► DEVICE_LINK_STATE (Latest) ──► Routes ──► MQTT {prefix}/presence
//!  device ═════ aimdb/rsp ═══► REMOTE_RSP (Ring) ──► MQTT {prefix}/aimdb/rsp   (remote access,
//!  device ◄════ aimdb/req ════ REMOTE_REQ (Ring) ◄── MQTT {prefix}/aimdb/req    passed through)
//!          its table, read at each birth ──► MANIFEST (Latest) ──► MQTT {prefix}/aimdb/manifest
//!                                              gateway's own birth and will: {prefix}/gateway/presence
//! ```
//!
//! postcard on the device link (small, no_std), JSON on MQTT (readable by
//! any client: `mosquitto_sub -t 'aimdb/#'`).

use std::net::SocketAddr;
use std::time::Duration;

use aimdb_connectors::engine::Id;
use aimdb_connectors::framed::{self, Framed};
use aimdb_connectors::mqtt::{self, Config, Connect, Counters, Mqtt, QoS, TlsConnect};
use aimdb_connectors::reconnect::Backoff;
use aimdb_connectors::tokio_io::TcpConnect;
use aimdb_connectors::tokio_io::{self, FromTokio, TokioClock};
use aimdb_core::codec::{self, Json, Postcard};
use aimdb_core::connector::{DispatchError, InboundStats};
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::presence::{LinkState, PresenceJson};
use aimdb_core::record::{Latest, Mailbox, Reader, Record, Ring};
use aimdb_core::remote::proto;
use aimdb_core::sync::HostRawMutex;
use aimdb_core::sync::Readiness;
use device_protocol::{topics, Command, Reading, Status};
use tokio::net::{tcp, TcpListener, TcpStream};

/// Readings held for the MQTT side while the broker is away.
pub const READINGS_DEPTH: usize = 256;

pub static READINGS: Record<HostRawMutex, Ring<Reading, READINGS_DEPTH>, 1> =
    Record::new("readings");
pub static STATUS: Record<HostRawMutex, Latest<Status>, 1> = Record::new("status");
pub static COMMAND: Record<HostRawMutex, Mailbox<Command>, 1> = Record::new("command");
/// Remote-access requests from MQTT to the device, and its answers back,
/// passed through unread: the device's responder answers them.
/// The readings' table when they go through the backlog.
static DURABLE_READY: Readiness<1> = Readiness::new();

pub static REMOTE_REQ: Record<HostRawMutex, Ring<Raw, 4>, 1> = Record::new("remote-req");
/// See [`REMOTE_REQ`].
/// Two readers: the MQTT route and the manifest relay
/// ([`crate::manifest`]).
pub static REMOTE_RSP: Record<HostRawMutex, Ring<Raw, 4>, 2> = Record::new("remote-rsp");
static DEVICE_READY: Readiness<1> = Readiness::new();
static MQTT_READY: Readiness<1> = Readiness::new();

/// Device link counters.
pub static DEVICE_LINK: framed::Counters = framed::Counters::new();
/// The device link's state, written by the device-side framed connector
/// (heartbeat on): `connecting`, `online` with the device's own birth
/// sequence once the device is heard, `offline` with the cause.
/// Two readers: the presence route and the manifest relay.
pub static DEVICE_LINK_STATE: Record<HostRawMutex, Latest<LinkState>, 2> =
    Record::new("device-link");
/// MQTT connector counters.
pub static MQTT: Counters = Counters::new();
/// The device side's inbound table counters, readable here.
pub static DEVICE_IN: inbound::Counters = inbound::Counters::new();
/// The MQTT side's inbound table counters, readable here.
pub static MQTT_IN: inbound::Counters = inbound::Counters::new();

/// Where the device's byte stream comes from.
pub enum DeviceLink {
    /// Accept connections (QEMU's `-serial tcp:HOST:PORT` connects here).
    Listen(TcpListener),
    /// Connect to a device that listens (QEMU's `-serial tcp::PORT,server=on`).
    Connect(String),
}

/// Each attempt of the device connector: accept QEMU's connection, or
/// connect to it.
impl aimdb_connectors::Connect for DeviceLink {
    type Connection<'c> = (
        FromTokio<tcp::OwnedReadHalf>,
        FromTokio<tcp::OwnedWriteHalf>,
    );
    type Error = std::io::Error;

    async fn connect(&mut self) -> std::io::Result<Self::Connection<'_>> {
        let stream = match self {
            Self::Listen(l) => l.accept().await.map(|(s, _)| s),
            Self::Connect(addr) => TcpStream::connect(addr.as_str()).await,
        };
        match stream {
            Ok(s) => Ok(tokio_io::tcp(s)),
            Err(e) => {
                eprintln!("gateway: device link: {e}; retrying");
                Err(e)
            }
        }
    }
}

/// A remote-access message, as bytes.
pub type Raw = heapless::Vec<u8, 256>;

/// The record readers the two connectors drain, subscribed before either
/// task starts: a `Ring` reader sees only what is written after it
/// subscribed, and the tasks run on different workers in no fixed order.
pub struct Readers {
    command: Reader<'static, HostRawMutex, Mailbox<Command>, 1>,
    remote_req: Reader<'static, HostRawMutex, Ring<Raw, 4>, 1>,
    remote_rsp: Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
    readings: Reader<'static, HostRawMutex, Ring<Reading, READINGS_DEPTH>, 1>,
    status: Reader<'static, HostRawMutex, Latest<Status>, 1>,
    presence: Reader<'static, HostRawMutex, Latest<LinkState>, 2>,
    manifest: Reader<'static, HostRawMutex, Latest<crate::manifest::Text>, 1>,
    relay: (
        Reader<'static, HostRawMutex, Latest<LinkState>, 2>,
        Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
    ),
}

impl Readers {
    /// Subscribes every outbound route's reader (once per process).
    pub fn subscribe() -> Self {
        Self {
            command: COMMAND.subscribe().expect("command reader"),
            remote_req: REMOTE_REQ.subscribe().expect("remote request reader"),
            remote_rsp: REMOTE_RSP.subscribe().expect("remote answer reader"),
            readings: READINGS.subscribe().expect("readings reader"),
            status: STATUS.subscribe().expect("status reader"),
            presence: DEVICE_LINK_STATE.subscribe().expect("device link reader"),
            manifest: crate::manifest::MANIFEST
                .subscribe()
                .expect("manifest reader"),
            relay: (
                DEVICE_LINK_STATE.subscribe().expect("relay's link reader"),
                REMOTE_RSP.subscribe().expect("relay's answer reader"),
            ),
        }
    }

    /// The device side's readers, the MQTT side's, and the manifest
    /// relay's ([`crate::manifest::relay`]: link state, answers).
    pub fn split(self) -> (DeviceReaders, MqttReaders, RelayReaders) {
        (
            DeviceReaders(self.command, self.remote_req),
            MqttReaders(
                self.readings,
                self.status,
                self.presence,
                self.remote_rsp,
                self.manifest,
            ),
            self.relay,
        )
    }
}

/// What [`device`] drains.
pub struct DeviceReaders(
    Reader<'static, HostRawMutex, Mailbox<Command>, 1>,
    Reader<'static, HostRawMutex, Ring<Raw, 4>, 1>,
);
/// What [`mqtt`] drains.
pub struct MqttReaders(
    Reader<'static, HostRawMutex, Ring<Reading, READINGS_DEPTH>, 1>,
    Reader<'static, HostRawMutex, Latest<Status>, 1>,
    Reader<'static, HostRawMutex, Latest<LinkState>, 2>,
    Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
    Reader<'static, HostRawMutex, Latest<crate::manifest::Text>, 1>,
);
/// What the manifest relay reads: the device link's state and the
/// device's remote-access answers.
pub type RelayReaders = (
    Reader<'static, HostRawMutex, Latest<LinkState>, 2>,
    Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
);

/// Where the device's tracked readings (from its own durable backlog)
/// wait between the device link and the gateway's backlog: the MQTT side
/// stores each under the device's id ([`backlog::Origin`]), and the
/// device link acknowledges it to the device only then
/// ([`framed::Hold`]). So a reading leaves the device's flash only once
/// it is in the gateway's file, and a consumer drops a reading the device
/// sent twice (a connection or the gateway lost between the two) by the
/// device's id.
///
/// [`backlog::Origin`]: aimdb_connectors::backlog::Origin
pub struct Relay {
    /// Tracked frames taken, oldest first, and whether each is settled
    /// (stored, or never to be: rejected, lost).
    taken: std::sync::Mutex<std::collections::VecDeque<(Id, bool)>>,
    settled: std::sync::Mutex<Option<Id>>,
}

/// The gateway's one relay (`--backlog` only).
pub static RELAY: Relay = Relay {
    taken: std::sync::Mutex::new(std::collections::VecDeque::new()),
    settled: std::sync::Mutex::new(None),
};

impl Relay {
    /// Settles the first unsettled entry `which` picks (`None`: the
    /// first), then moves the settled mark past the settled front.
    fn settle(&self, which: Option<Id>) {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = taken
            .iter_mut()
            .find(|(id, done)| !*done && which.is_none_or(|w| w == *id))
        {
            e.1 = true;
        }
        let mut newest = None;
        while let Some(&(id, true)) = taken.front() {
            newest = Some(id);
            taken.pop_front();
        }
        drop(taken);
        if newest.is_some() {
            *self.settled.lock().unwrap_or_else(|e| e.into_inner()) = newest;
        }
    }
}

impl framed::Hold for Relay {
    fn taking(&self, topic: &[u8], id: Id) {
        // Only readings go through the backlog; anything else is settled
        // once the dispatcher took it.
        let stored = topic == topics::READINGS.as_bytes();
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.push_back((id, !stored));
    }

    fn took(&self, id: Id, accepted: bool) {
        if !accepted {
            self.settle(Some(id));
        }
    }

    fn settled(&self) -> Option<Id> {
        *self.settled.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl aimdb_connectors::backlog::Origin for Relay {
    fn id(&self, lagged: u64) -> Option<Id> {
        // Readings the ring lost before the backlog took them are gone.
        for _ in 0..lagged {
            self.settle(None);
        }
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.iter().find(|(_, done)| !done).map(|&(id, _)| id)
    }

    fn stored(&self, id: Id) {
        self.settle(Some(id));
    }
}

/// The device side: framed-stream connector over TCP; reconnects for
/// ever. With `hold`, the device's tracked readings are acknowledged
/// only once stored in the gateway's backlog ([`Relay`]).
pub async fn device(link: DeviceLink, readers: DeviceReaders, hold: bool) {
    let dev_in = [
        (
            topics::READINGS,
            &inbound::Link::new(&READINGS, Postcard) as &(dyn inbound::Route + Sync),
        ),
        (topics::STATUS, &inbound::Link::new(&STATUS, Postcard)),
        (
            topics::REMOTE_RSP,
            &inbound::Link::new(&REMOTE_RSP, codec::Raw).with_max_payload(256),
        ),
    ];
    let mut b = Dispatch::<4, 8>::builder();
    for (t, l) in dev_in {
        b.link(t, l);
    }
    b.counters(&DEVICE_IN);
    let mut dispatch = b.build().expect("device inbound table");
    let mut cmd = outbound::Link::new(readers.0, topics::CMD, Postcard);
    let mut remote = outbound::Link::new(readers.1, topics::REMOTE_REQ, codec::Raw);
    let mut payload = [0u8; 256];
    let mut b = Routes::<_, 1, 2>::builder(&DEVICE_READY, &mut payload);
    b.link(&mut cmd).link(&mut remote);
    let mut routes = b.build().expect("device outbound table");
    // Reconnect for ever, waiting 1 s between attempts (QEMU restarts
    // take about that long).
    let mut config = framed::Config::new();
    config.backoff = Backoff {
        min: Duration::from_secs(1),
        max: Duration::from_secs(1),
    };
    // The device's heartbeat: a keep-alive after 1 s idle, the device gone
    // after 3 s of silence.
    config.heartbeat = Some(framed::Heartbeat::new(
        Duration::from_secs(1),
        Duration::from_secs(3),
    ));
    let mut framed = Framed::new(&DEVICE_LINK)
        .with_config(config)
        .with_link(&DEVICE_LINK_STATE);
    if hold {
        framed = framed.with_hold(&RELAY);
    }
    let stopped = framed
        .run_reconnecting(link, TokioClock::new(), &mut dispatch, &mut routes)
        .await;
    unreachable!("Reconnect::Always ended: {stopped}");
}

/// MQTT settings from the command line.
pub struct Broker {
    pub addr: SocketAddr,
    pub credentials: Option<(String, String)>,
    pub prefix: String,
    /// TLS to the broker (`--tls-ca`), else plain TCP.
    pub tls: Option<TlsConnect>,
    /// The readings' durable backlog file (`--backlog`).
    pub backlog: Option<std::path::PathBuf>,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The gateway's own presence topic under `prefix`. Consumers join it with
/// the device's presence (`{prefix}/presence`): the device is there only
/// while both say `online`. One MQTT will covers one topic with a payload
/// fixed at connect time, so it cannot carry the device's own (changing)
/// birth sequence; and a gateway serving several devices would need one
/// will per device. So the gateway's will marks the gateway, as an edge
/// node's death implies its devices' in Sparkplug.
pub fn gateway_presence_topic(prefix: &str) -> String {
    format!("{prefix}/gateway/presence")
}

/// The first birth sequence of this process: the wall clock in
/// milliseconds, so sequences keep growing across restarts of the
/// gateway.
fn first_seq() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

/// The MQTT side: readings and status out, commands in; its own presence.
/// Runs until `stop` completes (then says `offline` and disconnects
/// cleanly) or the reconnect policy gives up.
pub async fn mqtt(
    broker: Broker,
    readers: MqttReaders,
    stop: impl std::future::Future<Output = ()>,
) -> aimdb_connectors::reconnect::Stopped {
    let cmd_topic = leak(format!("{}/cmd", broker.prefix));
    let cmd_in = inbound::Link::new(&COMMAND, Json).with_max_payload(256);
    let req_topic = leak(proto::topic(&broker.prefix, proto::REQUEST));
    let req_in = inbound::Link::new(&REMOTE_REQ, codec::Raw).with_max_payload(256);
    let mut b = Dispatch::<4, 8>::builder();
    b.link(cmd_topic, &cmd_in)
        .link(req_topic, &req_in)
        .counters(&MQTT_IN);
    let mut dispatch = b.build().expect("MQTT inbound table");

    let readings_topic = leak(format!("{}/readings", broker.prefix));
    let status_topic = leak(format!("{}/status", broker.prefix));
    let presence_topic = leak(format!("{}/presence", broker.prefix));
    let rsp_topic = leak(proto::topic(&broker.prefix, proto::RESPONSE));
    let manifest_topic = leak(proto::topic(&broker.prefix, proto::MANIFEST));
    let MqttReaders(readings, status, presence, remote_rsp, manifest) = readers;
    // At least once (a `Ring`'s default, said here because it matters): a
    // reading survives a broker hiccup.
    let readings = outbound::Link::new(readings, readings_topic, Json).qos(QoS::AtLeastOnce);
    // With a backlog the readings go through a table of their own.
    let (mut plain_readings, mut durable_readings) = match broker.backlog {
        None => (Some(readings), None),
        Some(_) => (None, Some(readings)),
    };
    let mut status = outbound::Link::new(status, status_topic, Json);
    // The device's presence: its link state, retained (a `Latest`), in the
    // presence convention's JSON, with the device's own birth sequence.
    let mut presence = outbound::Link::new(presence, presence_topic, PresenceJson);
    // Remote-access answers from the device, unread, to MQTT clients
    // (`aimdb --mqtt ... --node PREFIX`).
    let mut answers = outbound::Link::new(remote_rsp, rsp_topic, codec::Raw);
    // The device's manifest (a `Latest`: retained), read by the relay.
    let mut manifest = outbound::Link::new(manifest, manifest_topic, codec::Raw);
    let mut payload = vec![0u8; crate::manifest::MANIFEST_MAX];
    let mut b = Routes::<_, 1, 5>::builder(&MQTT_READY, &mut payload);
    if let Some(r) = plain_readings.as_mut() {
        b.link(r);
    }
    b.link(&mut status)
        .link(&mut presence)
        .link(&mut answers)
        .link(&mut manifest);
    let mut routes = b.build().expect("MQTT outbound table");

    let mut config = Config::new("aimdb-gateway");
    let mut presence = mqtt::Presence::new(leak(gateway_presence_topic(&broker.prefix)));
    presence.first_seq = first_seq();
    config.presence = Some(presence);
    let creds = broker
        .credentials
        .as_ref()
        .map(|(u, p)| (u.as_str(), p.as_bytes()));
    config.credentials = creds;
    let (Some(file), Some(readings)) = (broker.backlog, durable_readings.as_mut()) else {
        return connect(
            config,
            broker.tls,
            broker.addr,
            &mut dispatch,
            &mut routes,
            (),
            stop,
        )
        .await;
    };
    let mut payload = vec![0u8; 64];
    let mut b = Routes::<&'static Readiness<1>, 1, 1>::builder(&DURABLE_READY, &mut payload);
    b.link(readings);
    let mut durable_routes = b.build().expect("durable table");
    let mut backlog = match backlog::open(&file).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("gateway: backlog {}: {e}", file.display());
            return aimdb_connectors::reconnect::Stopped::Disconnected;
        }
    };
    let mut entry = vec![0u8; 512];
    let durable =
        aimdb_connectors::backlog::Durable::new(&mut backlog, &mut durable_routes, &mut entry)
            .with_origin(&RELAY);
    connect(
        config,
        broker.tls,
        broker.addr,
        &mut dispatch,
        &mut routes,
        durable,
        stop,
    )
    .await
}

/// The connector over TLS (`--tls-ca`) or plain TCP.
async fn connect<D: aimdb_connectors::durable::Durable>(
    config: Config<'_>,
    tls: Option<TlsConnect>,
    addr: SocketAddr,
    dispatch: &mut (impl aimdb_core::connector::FrameSink + ?Sized),
    routes: &mut (impl aimdb_core::connector::MessageSource + ?Sized),
    durable: D,
    stop: impl std::future::Future<Output = ()>,
) -> aimdb_connectors::reconnect::Stopped {
    match tls {
        Some(tls) => run(config, tls, dispatch, routes, durable, stop).await,
        None => {
            run(
                config,
                TcpConnect::new(addr),
                dispatch,
                routes,
                durable,
                stop,
            )
            .await
        }
    }
}

/// The connector over `connect` (TCP or TLS).
async fn run<C: Connect, D: aimdb_connectors::durable::Durable>(
    config: Config<'_>,
    connect: C,
    dispatch: &mut (impl aimdb_core::connector::FrameSink + ?Sized),
    routes: &mut (impl aimdb_core::connector::MessageSource + ?Sized),
    durable: D,
    stop: impl std::future::Future<Output = ()>,
) -> aimdb_connectors::reconnect::Stopped {
    let (mut rx, mut tx) = (vec![0u8; 2048], vec![0u8; 8192]);
    let mut client = Mqtt::new(
        config,
        mqtt::Parts {
            connect,
            clock: TokioClock::new(),
            rx: &mut rx,
            tx: &mut tx,
            counters: &MQTT,
        },
    )
    .expect("MQTT configuration");
    client.run_durable(dispatch, routes, durable, stop).await
}

/// One line of counters.
pub fn status_line() -> String {
    let d = DEVICE_LINK.snapshot();
    let m = MQTT.snapshot();
    format!(
        "device→gw {:>6} frames  gw→device {:>4}  rejected {:>3}  | mqtt sent {:>6} received {:>4} rejected {:>3} lagged {} cmd replaced {} reconnects {} {}",
        d.received,
        d.sent,
        d.errors_in(),
        m.sent,
        m.received,
        m.rejected,
        m.lagged,
        COMMAND.replaced(),
        m.reconnects,
        if MQTT.is_connected() { "(connected)" } else { "(not connected)" },
    )
}

/// What changed since the last call worth a line of its own: the first
/// rejection of each kind on either inbound table, with its reason, and a
/// new MQTT connection error with its cause.
pub struct Notices {
    device: InboundStats,
    mqtt: InboundStats,
    mqtt_error: Option<mqtt::Cause>,
}

impl Notices {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self {
            device: InboundStats::default(),
            mqtt: InboundStats::default(),
            mqtt_error: None,
        }
    }

    /// The lines to print now.
    pub fn poll(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (side, shared, seen) in [
            ("device link", &DEVICE_IN, &mut self.device),
            ("MQTT", &MQTT_IN, &mut self.mqtt),
        ] {
            let now = shared.snapshot();
            for reason in REASONS {
                if seen.rejected(reason) == 0 && now.rejected(reason) > 0 {
                    lines.push(format!(
                        "first rejection on the {side} side: {} ({} so far)",
                        reason.as_str(),
                        now.rejected(reason)
                    ));
                }
            }
            *seen = now;
        }
        let err = MQTT.last_error();
        if err.is_some() && err != self.mqtt_error {
            if let Some(cause) = err {
                lines.push(format!("MQTT: {cause}"));
            }
        }
        self.mqtt_error = err;
        lines
    }
}

impl Default for Notices {
    fn default() -> Self {
        Self::new()
    }
}

/// One of each rejection reason (the decoder detail does not matter for
/// the counters).
const REASONS: [DispatchError; 11] = [
    DispatchError::UnknownTopic,
    DispatchError::TopicNotUtf8,
    DispatchError::InvalidTopic,
    DispatchError::WildcardInTopic,
    DispatchError::TopicTooLong,
    DispatchError::MalformedPayload(aimdb_core::codec::DecodeError::Malformed),
    DispatchError::PayloadTooLarge,
    DispatchError::KeyTableFull,
    DispatchError::KeyInvalid,
    DispatchError::SchemaUnverified,
    DispatchError::SchemaMismatch,
];

/// The readings' backlog file (`--backlog`): 256 pages of 4 KiB for the
/// backlog, 2 more for the gateway's boot counter.
mod backlog {
    use std::path::Path;

    use aimdb_connectors::backlog::{next_boot, page_cache, Backlog, Counters, FileFlash};
    use aimdb_connectors::backlog::{Full, PageCache};

    const PAGES: u32 = 256;
    const PAGE: u32 = 4096;

    /// The backlog's counters.
    pub static COUNTERS: Counters = Counters::new();

    type Cached = PageCache<{ PAGES as usize }>;

    /// Opens (or makes) the backlog in `file`: what an earlier run stored
    /// is found and goes first.
    pub async fn open(file: &Path) -> Result<Backlog<'static, FileFlash, Cached>, String> {
        let mut flash = <FileFlash>::open(file, PAGES + 2).map_err(|e| e.to_string())?;
        let boots = PAGES * PAGE..(PAGES + 2) * PAGE;
        let boot = next_boot(
            &mut flash,
            boots,
            page_cache::<{ PAGES as usize }>(),
            &COUNTERS,
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 512];
        let b = Backlog::open(
            flash,
            0..PAGES * PAGE,
            page_cache(),
            boot,
            Full::DropOldest,
            &COUNTERS,
            &mut buf,
        )
        .await
        .map_err(|e| e.to_string())?;
        println!(
            "gateway: backlog {} (boot {boot}): {} readings stored from before",
            file.display(),
            b.depth()
        );
        Ok(b)
    }
}
