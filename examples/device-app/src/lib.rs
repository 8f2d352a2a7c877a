//! The demo device's application (`no_std`, no heap), shared by the QEMU
//! firmware and the nRF52840 firmware: a `Ring` of sensor readings and a
//! `Latest` status go out, a `Mailbox` of commands comes in, over one
//! connector on whatever byte stream the binary hands it: the framed-stream
//! connector ([`connector`]: UART0 to the gateway, an in-memory pipe in
//! the self-test) or the MQTT connector ([`mqtt_connector`]: straight to a
//! broker).
//!
//! ```text
//!  sensor task ──► READINGS (Ring) ──┐
//!  control task ─► STATUS (Latest) ──┼─► OutboundRoutes ─► framed | MQTT ─► TX
//!  link task ───► LINK (Latest) ─────┤   (LINK: MQTT only)
//!  control task ◄── CMD (Mailbox) ◄──┴── InboundDispatch ◄─ framed | MQTT ◄─ RX
//! ```
#![no_std]

use core::time::Duration;

use portable_atomic::{AtomicU32, Ordering};

use aimdb_connectors::clock::EmbassyClock;
use aimdb_connectors::framed::{self, Framed};
use aimdb_connectors::mqtt::{self, Mqtt, QoS};
use aimdb_connectors::reconnect::Reconnect;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::presence::LinkState;
use aimdb_core::record::{Latest, Mailbox, Record, Ring};
use aimdb_core::remote::{Connector, Description, ManifestJson, Responder};
use aimdb_core::sync::Readiness;
use device_protocol::{topics, Command, LinkStats, Reading, Status};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embassy_time::Timer;
use embedded_io_async::{Read, Write};

/// Readings not yet sent; a burst longer than this is reported as lag.
/// With a backlog each reading is stored as it comes: a few suffice.
pub const READINGS_DEPTH: usize = if cfg!(feature = "backlog") { 4 } else { 32 };

/// Sensor readings, oldest first. Two readers: the connector's route and
/// a remote watch.
pub static READINGS: Record<Cs, Ring<Reading, READINGS_DEPTH>, 2> = Record::new("readings");
/// The device's state after the last command (two readers, as
/// [`READINGS`]).
pub static STATUS: Record<Cs, Latest<Status>, 2> = Record::new("status");
/// Commands from the host: the latest wins, taken once.
pub static CMD: Record<Cs, Mailbox<Command>, 1> = Record::new("cmd");
static CMD_IN: inbound::Link<'static, Record<Cs, Mailbox<Command>, 1>, Postcard, Command> =
    inbound::Link::new(&CMD, Postcard).with_max_payload(8);
static READY: Readiness<1> = Readiness::new();
/// Counters of the device link.
pub static LINK: framed::Counters = framed::Counters::new();
/// The device link's state, written by the framed connector
/// ([`connector`]): online once the host is heard, offline with the cause
/// when the link ends.
pub static LINK_STATE: Record<Cs, Latest<LinkState>, 1> = Record::new("framed-link");
/// The device link's heartbeat: a keep-alive after 1 s idle, the host gone
/// after 3 s of silence.
pub const HEARTBEAT: framed::Heartbeat =
    framed::Heartbeat::new(Duration::from_secs(1), Duration::from_secs(3));
/// The birth sequence of the next connection (since boot).
static BIRTH: AtomicU32 = AtomicU32::new(1);
/// Counters of the MQTT connector ([`mqtt_connector`]).
pub static MQTT: mqtt::Counters = mqtt::Counters::new();
/// The MQTT connector's link state (a task may await it).
pub static MQTT_LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("mqtt-link");
/// [`MQTT`]'s counters as a record, published on `dev/link` when they
/// change ([`link_stats`]); two readers, as [`READINGS`].
pub static LINK_STATS: Record<Cs, Latest<LinkStats>, 2> = Record::new("link");
static MQTT_READY: Readiness<1> = Readiness::new();

/// What the device lets a remote client see (`aimdb ls`): every record,
/// with the topics it is routed on. Only commands may be written.
pub static DESCRIPTIONS: [Description; 6] = [
    Description::of(&READINGS).topics(&[topics::READINGS]),
    Description::of(&STATUS).topics(&[topics::STATUS]),
    Description::of(&CMD).topics(&[topics::CMD]).writable(),
    Description::of(&LINK_STATS).topics(&[topics::LINK]),
    Description::of(&LINK_STATE),
    Description::of(&MQTT_LINK),
];
/// The connectors `aimdb stats` reports, with their link state.
static CONNECTORS: [Connector; 2] = [
    Connector::new("framed", &LINK).link(&LINK_STATE),
    #[cfg(not(feature = "backlog"))]
    Connector::new("mqtt", &MQTT).link(&MQTT_LINK),
    // With its backlog: how far behind the readings are, in `aimdb stats`.
    #[cfg(feature = "backlog")]
    Connector::new("mqtt", &MQTT)
        .link(&MQTT_LINK)
        .backlog(&BACKLOG),
];
/// Answers remote-access requests (one at a time, up to 64 bytes each)
/// on whichever connector runs.
pub static REMOTE: Responder<Cs, REMOTE_REQ_MAX> =
    Responder::new(&DESCRIPTIONS).with_connectors(&CONNECTORS);
/// The largest remote-access request taken.
const REMOTE_REQ_MAX: usize = 64;
/// The answer buffer: the largest answer is a description with its
/// schema (about 150 bytes for `LinkStats`); list pages shrink to fit.
const ANSWER_MAX: usize = 192;
/// The MQTT routes' payload buffer: the manifest ([`ManifestJson`] of
/// [`DESCRIPTIONS`] and [`CONNECTORS`], 673 bytes; 679 when the MQTT
/// connector keeps a backlog) is the largest payload.
const MQTT_PAYLOAD_MAX: usize = 704;

/// Reading interval in milliseconds (changed by `SetInterval`).
static INTERVAL_MS: AtomicU32 = AtomicU32::new(100);

/// Largest decoded frame in: a command is a few bytes.
const RX_FRAME: usize = 64;
/// Transmit buffer: a batch of frames (a reading frame is ~20 bytes; a
/// remote answer up to ANSWER_MAX plus its topic and COBS overhead).
const TX_BUF: usize = 256;

/// The device link's configuration: [`HEARTBEAT`] on (the host end must
/// run it too).
pub fn framed_config() -> framed::Config {
    let mut config = framed::Config::new();
    config.heartbeat = Some(HEARTBEAT);
    config
}

/// Runs the connector on one connection until the stream ends (or, with
/// the heartbeat of `config`, the host falls silent), reporting the link
/// in [`LINK_STATE`]. Call again on the next connection; `Latest` status
/// is re-sent each time, and each call takes the next birth sequence
/// (`config.first_seq` is not used).
pub async fn connector<R: Read, W: Write>(rx: R, tx: W, config: framed::Config) -> framed::Error {
    let Ok(readings) = READINGS.subscribe() else {
        // Only this function subscribes, and it releases its readers on
        // return: a second concurrent call is a programming error.
        return framed::Error::Closed;
    };
    let mut readings = outbound::Link::new(readings, topics::READINGS, Postcard);
    connection(rx, tx, &config, Some(&mut readings), ()).await
}

/// One connection of the framed connector, with the readings route (or
/// none: they go through `durable`).
async fn connection<R: Read, W: Write, L, D>(
    rx: R,
    tx: W,
    config: &framed::Config,
    readings: Option<&mut L>,
    durable: D,
) -> framed::Error
where
    L: outbound::Route + Send,
    D: aimdb_connectors::durable::Durable,
{
    let Ok(status) = STATUS.subscribe() else {
        return framed::Error::Closed;
    };
    let mut status = outbound::Link::new(status, topics::STATUS, Postcard);
    let mut answers = outbound::Link::new(REMOTE.requests(), topics::REMOTE_RSP, REMOTE.answers());
    // A reading is at most 10 bytes of postcard, a status 13; a remote
    // answer up to ANSWER_MAX.
    let mut payload = [0u8; ANSWER_MAX];
    // Builders live in blocks so they do not keep space in the task's
    // state across the awaits below.
    let routes = {
        let mut b = Routes::<_, 1, 3>::builder(&READY, &mut payload);
        if let Some(readings) = readings {
            b.link(readings);
        }
        b.link(&mut status).link(&mut answers);
        b.build()
    };
    let dispatch = {
        let mut b = Dispatch::<2, 8>::builder();
        b.link(topics::CMD, &CMD_IN)
            .link(topics::REMOTE_REQ, &REMOTE);
        b.build()
    };
    let (Ok(mut routes), Ok(mut dispatch)) = (routes, dispatch) else {
        return framed::Error::Closed;
    };
    let mut config = *config;
    let birth = BIRTH.load(Ordering::Relaxed);
    BIRTH.store(birth.wrapping_add(1), Ordering::Relaxed);
    config.first_seq = u64::from(birth);
    let mut framed = Framed::<RX_FRAME, TX_BUF>::with_sizes(&LINK)
        .with_config(config)
        .with_link(&LINK_STATE);
    framed
        .run_with_clock_durable(rx, tx, EmbassyClock, &mut dispatch, &mut routes, durable)
        .await
}

/// As [`connector`] for ever (a UART never closes; should a connection
/// end anyway, the next starts), with the readings durable: each is
/// stored in `flash` (its whole `range`, erase pages) as it is written,
/// sent from there oldest first as tracked frames and removed once the
/// host acknowledged it, so an outage longer than the readings `Ring`, or
/// a reset, loses none ([`aimdb_connectors::backlog`]). `boot` must grow
/// at every reset (`backlog::next_boot`). A full backlog drops its oldest
/// readings. Returns only if the backlog cannot be opened.
#[cfg(feature = "backlog")]
pub async fn connector_durable<R, W, F>(
    mut rx: R,
    mut tx: W,
    config: framed::Config,
    flash: F,
    range: core::ops::Range<u32>,
    boot: u32,
) where
    R: Read,
    W: Write,
    F: embedded_storage_async::nor_flash::MultiwriteNorFlash,
{
    use aimdb_connectors::backlog::{self, Backlog, Full};
    static DURABLE_READY: Readiness<1> = Readiness::new();
    let mut entry = [0u8; ENTRY_MAX];
    let pages = (range.end - range.start) as usize / F::ERASE_SIZE;
    if pages > BACKLOG_PAGES {
        return;
    }
    let opened = Backlog::open(
        flash,
        range,
        backlog_cache(),
        boot,
        Full::DropOldest,
        &BACKLOG,
        &mut entry,
    )
    .await;
    let (Ok(mut backlog), Ok(readings)) = (opened, READINGS.subscribe()) else {
        return;
    };
    let mut readings = outbound::Link::new(readings, topics::READINGS, Postcard);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(&DURABLE_READY, &mut payload);
    b.link(&mut readings);
    let Ok(mut durable_routes) = b.build() else {
        return;
    };
    let mut durable = backlog::Durable::new(&mut backlog, &mut durable_routes, &mut entry);
    loop {
        let e = connection(
            &mut rx,
            &mut tx,
            &config,
            None::<&mut ReadingsLink>,
            &mut durable,
        )
        .await;
        let _ = e;
    }
}

/// MQTT session buffers: one inbound packet (a command: topic + a few
/// bytes), and outbound packets with the QoS 1 publishes awaiting their
/// PUBACK (a reading packet is about 20 bytes).
pub const MQTT_RX: usize = 256;
/// See [`MQTT_RX`].
pub const MQTT_TX: usize = 1024;
/// The MQTT client id.
pub const CLIENT_ID: &str = "aimdb-demo-device";
/// Keep-alive: a dead broker connection is noticed within about this.
pub const KEEP_ALIVE: Duration = Duration::from_secs(2);
/// The broker keeps the session this long after a drop.
pub const SESSION_EXPIRY: Duration = Duration::from_secs(300);

/// The MQTT connector's configuration: a session the broker keeps across
/// a drop (so QoS 1 publishes in flight at the drop are sent again, not lost), and
/// reconnect for ever (feature `no-reconnect`: one connection, to show the
/// end-to-end run fails without it).
///
/// Timeouts are short because a UART cannot report that the TCP
/// connection behind it closed: a broker silent for 1 s while readings
/// await their PUBACK is taken for gone, long before the readings `Ring`
/// ([`READINGS_DEPTH`] readings) overflows.
pub fn mqtt_config() -> mqtt::Config<'static> {
    let mut c = mqtt::Config::new(CLIENT_ID);
    c.keep_alive = Some(KEEP_ALIVE);
    c.connect_timeout = Duration::from_millis(1_000);
    c.ack_timeout = Some(Duration::from_millis(1_000));
    c.backoff = aimdb_connectors::reconnect::Backoff {
        min: Duration::from_millis(200),
        max: Duration::from_millis(2_000),
    };
    c.reconnect = if cfg!(feature = "no-reconnect") {
        Reconnect::Never
    } else {
        Reconnect::Always
    };
    c.session_expiry = Some(SESSION_EXPIRY);
    // Birth and will on `dev/presence`. The sequence is a RAM counter from
    // 1: it grows with each reconnect and restarts at a reboot (a board
    // would seed `first_seq` from a boot counter in flash).
    c.presence = Some(mqtt::Presence::new(topics::PRESENCE));
    c
}

/// Runs the MQTT connector (the same `Mqtt::run` a host runs) over the
/// streams `connect` opens, with the session buffers given. Returns only
/// when the reconnect policy gives up.
pub async fn mqtt_connector<C: aimdb_connectors::Connect>(
    connect: C,
    rx: &mut [u8],
    tx: &mut [u8],
) -> aimdb_connectors::reconnect::Stopped {
    let Ok(readings) = READINGS.subscribe() else {
        // As in `connector`: only one connector runs at a time.
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    let mut readings = outbound::Link::new(readings, topics::READINGS, Postcard);
    let Some(mut mqtt) = mqtt_client(connect, rx, tx) else {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    mqtt_serve(&mut mqtt, Some(&mut readings), &mut ()).await
}

/// The MQTT client over `connect` with the session buffers given (built
/// where it is awaited, so the connection is not moved through a second
/// future).
fn mqtt_client<'a, C: aimdb_connectors::Connect>(
    connect: C,
    rx: &'a mut [u8],
    tx: &'a mut [u8],
) -> Option<Mqtt<'a, C, EmbassyClock>> {
    let parts = mqtt::Parts {
        connect,
        clock: EmbassyClock,
        rx,
        tx,
        counters: &MQTT,
    };
    Mqtt::new(mqtt_config(), parts)
        .ok()
        .map(|m| m.with_link(&MQTT_LINK))
}

/// The backlog's counters (`backlog` feature).
#[cfg(feature = "backlog")]
pub static BACKLOG: aimdb_connectors::backlog::Counters =
    aimdb_connectors::backlog::Counters::new();

/// Flash pages a backlog may span (its cache has a slot per page).
#[cfg(feature = "backlog")]
pub const BACKLOG_PAGES: usize = 64;

/// A fresh cache for the device's backlog (also for `backlog::next_boot`:
/// one cache type, one copy of the queue's code in flash).
#[cfg(feature = "backlog")]
pub fn backlog_cache() -> aimdb_connectors::backlog::PageCache<BACKLOG_PAGES> {
    aimdb_connectors::backlog::page_cache()
}

/// Bytes of one backlog entry at most: the readings topic and a postcard
/// [`Reading`] (two varints) after the entry's head.
#[cfg(feature = "backlog")]
const ENTRY_MAX: usize = aimdb_connectors::backlog::HEAD + topics::READINGS.len() + 10;

/// As [`mqtt_connector`], with the readings durable: each is stored in
/// `flash` (its whole `range`, erase pages) as it is written, published
/// from there oldest first and removed once the broker acknowledged it,
/// so a broker outage longer than the readings `Ring`, or a reset, loses
/// none ([`aimdb_connectors::backlog`]). `boot` must grow at every reset
/// (`backlog::next_boot`). A full backlog drops its oldest readings.
#[cfg(feature = "backlog")]
pub async fn mqtt_connector_durable<C, F>(
    connect: C,
    rx: &mut [u8],
    tx: &mut [u8],
    flash: F,
    range: core::ops::Range<u32>,
    boot: u32,
) -> aimdb_connectors::reconnect::Stopped
where
    C: aimdb_connectors::Connect,
    F: embedded_storage_async::nor_flash::MultiwriteNorFlash,
{
    use aimdb_connectors::backlog::{self, Backlog, Full};
    static DURABLE_READY: Readiness<1> = Readiness::new();
    let mut entry = [0u8; ENTRY_MAX];
    // Each page's state and where its items are, in RAM (a byte and two
    // words a page): a store then reads one page, not all of them.
    let pages = (range.end - range.start) as usize / F::ERASE_SIZE;
    if pages > BACKLOG_PAGES {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    }
    let opened = Backlog::open(
        flash,
        range,
        backlog_cache(),
        boot,
        Full::DropOldest,
        &BACKLOG,
        &mut entry,
    )
    .await;
    let (Ok(mut backlog), Ok(readings)) = (opened, READINGS.subscribe()) else {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    let mut readings = outbound::Link::new(readings, topics::READINGS, Postcard);
    let mut payload = [0u8; 16];
    let mut b = Routes::<_, 1, 1>::builder(&DURABLE_READY, &mut payload);
    b.link(&mut readings);
    let Ok(mut durable_routes) = b.build() else {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    let mut durable = backlog::Durable::new(&mut backlog, &mut durable_routes, &mut entry);
    let Some(mut mqtt) = mqtt_client(connect, rx, tx) else {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    mqtt_serve(&mut mqtt, None::<&mut ReadingsLink>, &mut durable).await
}

/// The readings route.
#[cfg(feature = "backlog")]
type ReadingsLink = outbound::Link<
    aimdb_core::record::Reader<'static, Cs, Ring<Reading, READINGS_DEPTH>, 2>,
    &'static str,
    Postcard,
>;

/// Runs `mqtt` with the device's routes (the readings among them when
/// `readings` is given) and `durable`.
async fn mqtt_serve<C, D, R>(
    mqtt: &mut Mqtt<'_, C, EmbassyClock>,
    readings: Option<&mut R>,
    durable: &mut D,
) -> aimdb_connectors::reconnect::Stopped
where
    C: aimdb_connectors::Connect,
    D: aimdb_connectors::durable::Durable,
    R: outbound::Route + Send,
{
    let (Ok(status), Ok(link)) = (STATUS.subscribe(), LINK_STATS.subscribe()) else {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    let mut status = outbound::Link::new(status, topics::STATUS, Postcard);
    // Readings and status at their kinds' QoS 1; the counters change
    // often and the next value supersedes a lost one: QoS 0.
    let mut link = outbound::Link::new(link, topics::LINK, Postcard).qos(QoS::AtMostOnce);
    let mut answers =
        outbound::Link::new(REMOTE.requests(), topics::MQTT_REMOTE_RSP, REMOTE.answers());
    // The manifest: retained, re-published at each connection, so QoS 0
    // (it holds no TX buffer space awaiting an acknowledgement).
    let mut manifest = outbound::Link::new(REMOTE.manifest(), topics::MQTT_MANIFEST, ManifestJson)
        .qos(QoS::AtMostOnce);
    // The largest record payload is a LinkStats (seven `u32`s, at most 35
    // bytes of postcard); a remote answer is up to ANSWER_MAX, the
    // manifest MQTT_PAYLOAD_MAX.
    let mut payload = [0u8; MQTT_PAYLOAD_MAX];
    let routes = {
        let mut b = Routes::<_, 1, 5>::builder(&MQTT_READY, &mut payload);
        if let Some(readings) = readings {
            b.link(readings);
        }
        b.link(&mut status)
            .link(&mut link)
            .link(&mut answers)
            .link(&mut manifest);
        b.build()
    };
    let dispatch = {
        let mut b = Dispatch::<2, 8>::builder();
        b.link(topics::CMD, &CMD_IN)
            .link(topics::MQTT_REMOTE_REQ, &REMOTE);
        b.build()
    };
    let (Ok(mut routes), Ok(mut dispatch)) = (routes, dispatch) else {
        return aimdb_connectors::reconnect::Stopped::Disconnected;
    };
    mqtt.run_durable(&mut dispatch, &mut routes, durable, core::future::pending())
        .await
}

/// Copies [`MQTT`]'s counters into [`LINK_STATS`] when they change
/// (checked every 200 ms).
pub async fn link_stats() {
    let mut last = None;
    loop {
        let s = MQTT.snapshot();
        let now = LinkStats {
            received: s.received,
            rejected: s.rejected,
            sent: s.sent,
            reconnects: s.reconnects,
            connect_failures: s.connect_failures,
            commands_replaced: CMD.replaced() as u32,
            lagged: s.lagged,
        };
        // `sent` moves with every publish, this one's included:
        // compare without it, or the record would never settle.
        let key = (
            now.received,
            now.rejected,
            now.reconnects,
            now.connect_failures,
            now.lagged,
        );
        if last != Some(key) {
            last = Some(key);
            LINK_STATS.write(now);
        }
        Timer::after_millis(200).await;
    }
}

/// Writes a reading every interval: a made-up temperature around 21 °C.
pub async fn sensor() {
    let mut seq = 0u32;
    loop {
        let wobble = ((seq * 37) % 200) as i32 - 100;
        READINGS.write(Reading {
            seq,
            centi_celsius: 2100 + wobble,
        });
        seq = seq.wrapping_add(1);
        Timer::after_millis(INTERVAL_MS.load(Ordering::Relaxed) as u64).await;
    }
}

/// Applies commands and publishes the status after each (and once at
/// start).
pub async fn control() {
    let Ok(mut cmds) = CMD.subscribe() else {
        return;
    };
    let mut st = Status {
        led: false,
        interval_ms: INTERVAL_MS.load(Ordering::Relaxed) as u16,
        commands: 0,
        last_ping: 0,
    };
    STATUS.write(st);
    loop {
        let Ok(cmd) = cmds.recv().await else { continue };
        match cmd {
            Command::SetLed(on) => st.led = on,
            Command::SetInterval(ms) => {
                st.interval_ms = ms.max(1);
                INTERVAL_MS.store(st.interval_ms as u32, Ordering::Relaxed);
            }
            Command::Ping(id) => st.last_ping = id,
        }
        st.commands += 1;
        STATUS.write(st);
    }
}

/// [`sensor`] as an embassy task.
#[embassy_executor::task]
pub async fn sensor_task() {
    sensor().await
}

/// [`link_stats`] as an embassy task.
#[embassy_executor::task]
pub async fn link_stats_task() {
    link_stats().await
}

/// [`control`] as an embassy task.
#[embassy_executor::task]
pub async fn control_task() {
    control().await
}
