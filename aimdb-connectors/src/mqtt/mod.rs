//! MQTT connector (feature `mqtt`): records ↔ an MQTT 5 broker.
//!
//! [`Mqtt::run`] is **one** future that drives both directions over one
//! broker connection:
//!
//! ```text
//!  broker ──PUBLISH──► Engine::received ──► FrameSink::dispatch(topic, payload) ──► records
//!  records ──► MessageSource (poll_ready, message) ──► Engine::offer(topic, payload, message's QoS) ──► broker
//! ```
//!
//! and keeps the connection alive:
//!
//! - it subscribes to exactly the filters [`FrameSink::next_filter`]
//!   yields (wildcards included), waiting for each SUBACK;
//! - keep-alive PINGREQs go out while idle; a missed PINGRESP, EOF, an I/O
//!   error, a broker DISCONNECT, or a broker silent past
//!   [`Config::ack_timeout`] while publishes await acknowledgement drops
//!   the connection;
//! - publishes in the order [`MessageSource`] hands messages out, so
//!   urgent routes (`outbound::Builder::link_urgent`) go out before the
//!   normal ones ready with them; what is ready together goes out in one
//!   burst, without parking in between, and with a write buffer
//!   ([`Mqtt::with_write_buffer`]) in a few transport writes;
//! - after a drop it reconnects with bounded exponential [`Backoff`]
//!   (limited or disabled by [`Reconnect`]), resubscribes, re-sends a
//!   message whose publish the drop interrupted, and calls
//!   [`MessageSource::replay_latest`] so every `Latest` record's newest value
//!   is published again;
//! - [`Counters`] (atomics) can be read from anywhere while it runs,
//!   [`Counters::last_error`] included: why the last attempt failed or the
//!   last connection ended.
//!
//! # Record kinds, retain and sessions
//!
//! A route's messages are published retained when it says so
//! ([`Message::retain`](aimdb_core::connector::Message::retain): `Latest`
//! records by default), so a late subscriber gets the current state.
//! Received retained messages go through
//! [`FrameSink::dispatch_retained`]: links into `Mailbox` records skip them
//! by default (a command kept by the broker is not executed again at every
//! start), and their filters are subscribed with retain handling 2. An
//! empty payload (clearing a retained message) is counted in
//! [`Stats::cleared`], not dispatched. With
//! [`Config::session_expiry`] the broker keeps the session across a
//! drop and the connector resends what was unacknowledged; see the
//! repository README's "MQTT semantics by record kind" for the table and
//! the measured restarts.
//!
//! Nothing here allocates or panics; there is no task per route. Buffers
//! are the caller's: the MQTT session's RX/TX slices (given to
//! [`Mqtt::new`]) and the routes' encode scratch. The only per-connector
//! stack buffer is one topic filter (`MAX_TOPIC_LEN` bytes) while
//! subscribing.
//!
//! # Portability
//!
//! The same code runs on embassy and on tokio. It is generic over
//!
//! - [`Connect`]: opens the byte stream (`embedded_io_async::Read + Write`)
//!   to the broker: an embassy-net `TcpSocket`, a TLS session, or with
//!   feature `tokio` the provided [`TcpConnect`](crate::tokio_io::TcpConnect) (and with feature `tls`
//!   `TlsConnect`: TLS via rustls);
//! - [`Clock`]: keep-alive, the acknowledgement and connect timeouts and
//!   the backoff: `clock::EmbassyClock` (feature `embassy-time`) on a
//!   firmware, `tokio_io::TokioClock` on a host.
//!
//! The protocol itself is an [engine](crate::engine), [`Engine`]: the
//! session as a state machine over the RX and TX slices, with no I/O and
//! no clock, driven by the crate's one [runner](crate::runner) (which
//! also drives the framed connector).
//!
//! # The client: MQTT 5 packets of our own
//!
//! The session ([`Engine`]: CONNECT with will and
//! credentials, PUBLISH at QoS 0/1/2 both ways, SUBSCRIBE, keep-alive,
//! session resumption) is written here rather than taken from a crate.
//! What it must do, and what the maintained `no_std` clients do:
//!
//! - **No heap, no `unsafe`.** Each inbound PUBLISH is decoded in place in
//!   the RX slice, its topic and payload lent out; outbound packets are
//!   encoded into the TX slice. minimq 0.13 does the same. rust-mqtt 0.6
//!   hands received data out of a `BufferProvider` whose slices live as
//!   long as the client: without a `Box` per message, memory is reused
//!   only through `unsafe { BumpBuffer::reset() }`.
//! - **No I/O inside**: inbound bytes accumulate in RX, every packet to
//!   send waits in TX or a small control queue until the transport took
//!   it, so the runner may read, write and wait on the routes at once and
//!   no packet is ever split or lost. (minimq's `poll` is cancel-safe and
//!   owns its socket; rust-mqtt's is not cancel-safe, only `poll_header`.)
//! - **A window the user sets.** [`Config::max_in_flight`] QoS 1/2
//!   publishes may await acknowledgement (the broker's receive maximum
//!   lowers it), each kept in TX until acknowledged, so the TX slice
//!   bounds the bytes and nothing is sized at compile time. minimq keeps
//!   at most **8**, a constant; at QoS 1 on a host that makes throughput a
//!   matter of round trips to the broker (`b4_mqtt` in the bench guide
//!   measures it against rumqttc, which keeps 100).
//!
//! So minimq met all but the last, and no client met all three. The
//! packet layer is about 1,300 lines with its tests; the costs and savings
//! in flash, RAM and instructions per message are in the bench guide
//! (`b3_on_target`, the footprint). Counted as they happen:
//! [`Stats::in_flight`], [`Stats::acked`].
//!
//! # Example (tokio, multi-thread runtime)
//!
//! The records are `static` and use the per-record host lock, so the
//! tables built inside the task are `Send` and the connector is
//! `tokio::spawn`ed like any other task; other threads and tasks write and
//! read the records directly. (On embassy, the same body runs in an
//! `#[embassy_executor::task]`, with `CriticalSectionRawMutex` records and
//! an embassy-net socket behind `Connect`.)
//!
//! ```no_run
//! # #[cfg(feature = "tokio")]
//! # async fn demo() {
//! use aimdb_connectors::mqtt::{Config, Counters, Mqtt, Parts};
//! use aimdb_connectors::tokio_io::TcpConnect;
//! use aimdb_connectors::tokio_io::TokioClock;
//! use aimdb_core::codec::Postcard;
//! use aimdb_core::inbound::{self, Dispatch};
//! use aimdb_core::outbound::{self, Routes};
//! use aimdb_core::record::{Latest, Record};
//! use aimdb_core::sync::{HostRawMutex, Readiness};
//!
//! static LED: Record<HostRawMutex, Latest<bool>, 1> = Record::new("led");
//! static TEMP: Record<HostRawMutex, Latest<i16>, 1> = Record::new("temp");
//! static READY: Readiness<1> = Readiness::new();
//! static COUNTERS: Counters = Counters::new();
//!
//! let connector = tokio::spawn(async {
//!     let led = inbound::Link::new(&LED, Postcard);
//!     let mut b = Dispatch::<4, 8>::builder();
//!     b.link("cmd/led", &led);
//!     let mut inbound = b.build().unwrap();
//!
//!     let mut temp = outbound::Link::new(TEMP.subscribe().unwrap(), "sensors/temp", Postcard);
//!     let (mut payload, mut topic) = ([0u8; 64], [0u8; 64]);
//!     let mut b = Routes::<_, 1, 4>::builder(&READY, &mut payload).written_topics(&mut topic);
//!     b.link(&mut temp);
//!     let mut outbound = b.build().unwrap();
//!
//!     let (mut rx, mut tx) = ([0u8; 1024], [0u8; 1024]);
//!     let parts = Parts {
//!         connect: TcpConnect::new("127.0.0.1:1883"),
//!         clock: TokioClock::new(),
//!         rx: &mut rx,
//!         tx: &mut tx,
//!         counters: &COUNTERS,
//!     };
//!     let mut mqtt = Mqtt::new(Config::new("device-7"), parts).unwrap();
//!     mqtt.run(&mut inbound, &mut outbound).await
//! });
//! // Any thread: a plain one here.
//! std::thread::spawn(|| TEMP.write(215));
//! let why = connector.await.unwrap();
//! eprintln!("connector stopped: {why}");
//! # }
//! ```
#![forbid(unsafe_code)]

mod cause;
mod counters;
mod engine;
mod outbox;
mod packet;
#[cfg(all(test, feature = "std"))]
mod tests;
#[cfg(feature = "tls")]
mod tls;
mod tracked;
mod wire;

use core::fmt;
use core::time::Duration;

pub use crate::connect::{Connect, ConnectFailure};
pub use cause::Cause;
pub use counters::{Counters, Stats};
pub use engine::Engine;
#[cfg(feature = "tls")]
pub use tls::{
    tls_client_config, tls_client_config_with_cert, TlsConnect, TlsConnectError, TlsSetupError,
};
/// The rustls [`TlsConnect`] is built on, for a custom
/// [`rustls::ClientConfig`].
#[cfg(feature = "tls")]
pub use tokio_rustls::rustls;
pub use tracked::{parse_id, ID_PROPERTY};

use aimdb_core::connector::{FrameSink, MessageSource};
use aimdb_core::presence::LinkState;
use aimdb_core::record::Sink;

use crate::clock::Clock;
use crate::reconnect::{Backoff, Reconnect, Stopped};
use crate::runner::{Drive, Runner, Settings};

/// MQTT's quality of service: the contract's, so an outbound route carries
/// it ([`outbound::Link::qos`](aimdb_core::outbound::Link::qos)).
pub use aimdb_core::connector::QoS;

/// Connector settings, by name. Broker address and transport are the
/// [`Connect`] implementation's; buffers and counters are [`Parts`].
///
/// Start from [`Config::new`] and set fields (`#[non_exhaustive]`: fields
/// may be added). Durations are `core::time::Duration` (the same type as
/// `std::time::Duration`); `None` turns a timer off.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct Config<'a> {
    /// MQTT client identifier (at most 64 bytes).
    pub client_id: &'a str,
    /// User name and password, if the broker wants them.
    pub credentials: Option<(&'a str, &'a [u8])>,
    /// Keep-alive interval (whole seconds, rounded up, at most 65,535 s);
    /// `None`: no keep-alive pings. A broker takes a client silent for 1.5
    /// times this long for gone.
    pub keep_alive: Option<Duration>,
    /// Bound on opening the transport plus the MQTT handshake plus the
    /// subscriptions.
    pub connect_timeout: Duration,
    /// While QoS 1/2 publishes await acknowledgement, the longest the
    /// broker may stay silent (no ack, publish or PINGRESP) before the
    /// connection is taken for dead and reconnected; `None`: no limit.
    /// Keep-alive does not cover this case: while the connector
    /// publishes, no PINGREQ is due. It matters most on streams that
    /// cannot report a close (a UART bridged to TCP, a half-open socket).
    /// Counted in [`Stats::ack_timeouts`].
    pub ack_timeout: Option<Duration>,
    /// Waits between connection attempts.
    pub backoff: Backoff,
    /// Whether to reconnect after a failure or a drop.
    pub reconnect: Reconnect,
    /// Maximum QoS requested for every subscription. (Each outbound
    /// route's QoS is on its link: `outbound::Link::qos`.)
    pub subscribe_qos: QoS,
    /// How long the broker keeps the session after a drop (MQTT 5 session
    /// expiry, whole seconds, rounded up); `None` (the default): a clean
    /// session that ends with the connection.
    ///
    /// With a broker that keeps sessions (across its own restart too, if
    /// it persists them), a reconnect resumes the session: the broker kept
    /// the subscriptions and what it queued for them at QoS 1/2, and the
    /// QoS 1/2 publishes still unacknowledged at the drop are sent again
    /// (with the DUP flag) instead of being lost. The first connection
    /// after boot starts clean all the same.
    pub session_expiry: Option<Duration>,
    /// Presence: a will and a birth on a status topic (see [`Presence`]);
    /// `None` (the default): neither.
    pub presence: Option<Presence<'a>>,
    /// QoS 1/2 publishes unacknowledged at most (1 to 65,534; default
    /// 64). The broker's receive maximum lowers it (mosquitto announces
    /// 20 by default), and the TX slice bounds the bytes ([`Parts::tx`]).
    /// A wider window keeps a host's link busy across the broker's round
    /// trips; after a drop, a resumed session sends all of it again.
    pub max_in_flight: u16,
}

impl<'a> Config<'a> {
    /// Defaults: no credentials, keep-alive 30 s, connect timeout 5 s,
    /// acknowledgement timeout 10 s, backoff 100 ms … 5 s, reconnect for
    /// ever, subscribe at up to QoS 1, clean sessions.
    pub const fn new(client_id: &'a str) -> Self {
        Self {
            client_id,
            credentials: None,
            keep_alive: Some(Duration::from_secs(30)),
            connect_timeout: Duration::from_secs(5),
            ack_timeout: Some(Duration::from_secs(10)),
            backoff: Backoff::DEFAULT,
            reconnect: Reconnect::Always,
            subscribe_qos: QoS::AtLeastOnce,
            session_expiry: None,
            presence: None,
            max_in_flight: 64,
        }
    }
}

// By hand: the password stays out of logs.
impl fmt::Debug for Config<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("client_id", &self.client_id)
            .field("user", &self.credentials.map(|(user, _)| user))
            .field("keep_alive", &self.keep_alive)
            .field("connect_timeout", &self.connect_timeout)
            .field("ack_timeout", &self.ack_timeout)
            .field("backoff", &self.backoff)
            .field("reconnect", &self.reconnect)
            .field("subscribe_qos", &self.subscribe_qos)
            .field("session_expiry", &self.session_expiry)
            .field("presence", &self.presence)
            .field("max_in_flight", &self.max_in_flight)
            .finish()
    }
}

/// A node's presence on one retained topic: a birth published on
/// every connection before anything else, and a will the broker publishes
/// when the connection ends without a goodbye. Payloads follow the
/// convention of [`aimdb_core::presence`]:
///
/// ```text
/// birth, retained:             {"status":"online","seq":7}
/// will, retained:              {"status":"offline","seq":7,"cause":"lost"}
/// graceful stop, retained:     {"status":"offline","seq":7,"cause":"stopped"}
/// ```
///
/// - **Sequence.** Each connection that comes up gets the next birth
///   sequence, starting at [`Presence::first_seq`]; its will carries the
///   same number, so a consumer can tell a death that ends the current
///   birth from a late one of an older connection
///   ([`LinkState::applies_after`](aimdb_core::presence::LinkState::applies_after)).
///   The counter lives in RAM: it restarts at `first_seq` when the
///   connector is built anew (a reboot, a new process). Seed `first_seq`
///   from something that grows to keep it increasing across restarts: a
///   boot counter in flash shifted left by 32 bits on a device, the wall
///   clock in milliseconds on a host.
/// - **Timing.** The broker publishes the will when it notices the
///   connection is gone: at once for a closed socket, after 1.5 ×
///   [`Config::keep_alive`] for a silent one, plus the will delay if set.
/// - **Goodbye.** A clean DISCONNECT suppresses the will, so
///   [`Mqtt::run_until`] publishes the offline payload itself before it
///   disconnects.
///
/// The will payload is padded with spaces to a fixed length (its bytes are
/// fixed when the connection opens); JSON parsers ignore them.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Presence<'a> {
    /// The presence topic, e.g. `"site/dev-7/presence"` (at most 128
    /// bytes, no wildcards).
    pub topic: &'a str,
    /// QoS of the birth, the will and the goodbye.
    pub qos: QoS,
    /// MQTT 5 will delay: the broker waits this long before publishing the
    /// will, and publishes nothing if the client is back meanwhile.
    pub will_delay: Option<&'a WillDelay>,
    /// The first connection's birth sequence.
    pub first_seq: u64,
}

impl<'a> Presence<'a> {
    /// Presence on `topic`: QoS 1, no will delay, sequence from 1.
    pub const fn new(topic: &'a str) -> Self {
        Self {
            topic,
            qos: QoS::AtLeastOnce,
            will_delay: None,
            first_seq: 1,
        }
    }
}

/// An MQTT 5 will delay, kept where the session can borrow it for its
/// lifetime (`static DELAY: WillDelay = WillDelay::from_secs(10);`).
#[derive(Debug)]
pub struct WillDelay(u32);

impl WillDelay {
    /// A delay of `secs` seconds.
    pub const fn from_secs(secs: u32) -> Self {
        Self(secs)
    }
}

/// Whole seconds of `d`, rounded up.
fn whole_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() != 0)
}

/// What an MQTT connector is made of besides its [`Config`], by name:
/// [`Mqtt::new`]`(config, Parts { .. })`.
#[derive(Debug)]
pub struct Parts<'a, C, K> {
    /// Opens each connection to the broker.
    pub connect: C,
    /// The clock for keep-alive, the acknowledgement and connect timeouts
    /// and the backoff ([`crate::clock`]).
    pub clock: K,
    /// Holds inbound MQTT packets: size it for the largest topic + payload
    /// the broker may send, plus ~16 bytes. Its length is announced to the
    /// broker as the maximum packet size, so a broker never sends more.
    pub rx: &'a mut [u8],
    /// Holds each packet until it is written and each QoS 1/2 publish
    /// until it is acknowledged (3 bytes more each): size it for the
    /// CONNECT packet (about 30 bytes plus client id, will and
    /// credentials) and for the largest outbound packet times the
    /// publishes you want in flight. It bounds the in-flight *bytes*;
    /// [`Config::max_in_flight`] and the broker bound the *count*.
    /// [`Stats::in_flight`] shows the count.
    pub tx: &'a mut [u8],
    /// The counters this connector updates, readable from anywhere.
    pub counters: &'a Counters,
}

/// A configuration the MQTT session cannot take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The client id is longer than MQTT allows (65,535 bytes).
    ClientIdTooLong,
    /// The presence topic is empty, has a wildcard, or is over 128 bytes.
    PresenceTopic,
    /// A value out of range ([`Config::max_in_flight`]).
    Invalid,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ClientIdTooLong => "MQTT client id too long",
            Self::PresenceTopic => "invalid MQTT presence topic",
            Self::Invalid => "invalid MQTT configuration",
        })
    }
}
impl core::error::Error for ConfigError {}

impl<'a> Engine<'a> {
    /// The MQTT engine for `config` over the two slices, counting into
    /// `counters` ([`Parts::rx`] and [`Parts::tx`] say how to size them).
    pub fn new(
        config: &Config<'a>,
        rx: &'a mut [u8],
        tx: &'a mut [u8],
        counters: &'a Counters,
    ) -> Result<Self, ConfigError> {
        if config.client_id.len() > usize::from(u16::MAX) {
            return Err(ConfigError::ClientIdTooLong);
        }
        if !(1..u16::MAX).contains(&config.max_in_flight) {
            return Err(ConfigError::Invalid);
        }
        if let Some(p) = &config.presence {
            let topic = p.topic;
            if topic.is_empty() || topic.len() > 128 || topic.contains(['+', '#', '\0']) {
                return Err(ConfigError::PresenceTopic);
            }
        }
        let settings = engine::Settings {
            client_id: config.client_id,
            credentials: config.credentials,
            keep_alive: config.keep_alive.map_or(0, |d| {
                u16::try_from(whole_secs(d).max(1)).unwrap_or(u16::MAX)
            }),
            session_expiry: config.session_expiry.map_or(0, |d| {
                u32::try_from(whole_secs(d).max(1)).unwrap_or(u32::MAX)
            }),
            presence: config.presence,
            max_in_flight: config.max_in_flight,
            subscribe_qos: config.subscribe_qos,
            ack_timeout: config.ack_timeout,
            // The first connection after boot opens with Clean Start = 1
            // (there is no session state to resume yet). mosquitto (2.0,
            // checked with `mosquitto_sub -V mqttv5 -x 300`) then keeps the
            // session for its expiry while it runs, but does not restore it
            // after its own restart: it persists resumable sessions only
            // when the latest CONNECT had Clean Start = 0. So with a session
            // expiry, a fresh first session is subscribed, closed at once
            // with a normal DISCONNECT (the broker keeps it) and reopened
            // with Clean Start = 0, once per run. Not with
            // `Reconnect::Never`: there is no second connection to resume
            // it on.
            reopen: config.session_expiry.is_some() && config.reconnect != Reconnect::Never,
        };
        Ok(Self::with_settings(settings, rx, tx, counters))
    }
}

/// One MQTT connector: the MQTT [`Engine`] under the crate's runner,
/// over transports opened by `C`, timed by the clock `K`.
pub struct Mqtt<'a, C: Connect, K: Clock> {
    engine: Engine<'a>,
    runner: Runner<'a, true>,
    connect: C,
    clock: K,
    config: Config<'a>,
    counters: &'a Counters,
}

impl<'a, C: Connect, K: Clock> Mqtt<'a, C, K> {
    /// A connector, not yet connected.
    pub fn new(config: Config<'a>, parts: Parts<'a, C, K>) -> Result<Self, ConfigError> {
        let Parts {
            connect,
            clock,
            rx,
            tx,
            counters,
        } = parts;
        Ok(Self {
            engine: Engine::new(&config, rx, tx, counters)?,
            runner: Runner::gathering(),
            connect,
            clock,
            config,
            counters,
        })
    }

    /// The same connector, writing its [`LinkState`] into `link` as it
    /// changes: `connecting` before each attempt, `online` once connected
    /// (the birth published and the subscriptions made), `offline` with
    /// the cause when a connection ends. `seq` is the birth sequence
    /// ([`Presence`]; without presence, the count of connections that came
    /// up). A task awaits the record's reader to act on up and down.
    #[must_use]
    pub fn with_link(mut self, link: &'a (dyn Sink<LinkState> + Sync)) -> Self {
        self.runner.set_link(link);
        self
    }

    /// The same connector, gathering the messages it publishes together
    /// into `buf` and writing them to the transport in one write.
    ///
    /// Without it each packet is one transport write. That is what a
    /// firmware wants: an embassy-net socket (or a UART driver) already
    /// copies each write into its own TX buffer, and RAM is scarce. On a
    /// host each write is a system call (and with TLS a record), so a
    /// buffer of a few KiB lets a burst of ready messages (a `Ring`
    /// backlog, many routes written at once) go out in a few writes
    /// instead of one each. Gathered bytes are written as soon as the
    /// burst is gathered, while the connector goes on reading.
    /// [`Stats::writes`] counts transport writes.
    #[must_use]
    pub fn with_write_buffer(mut self, buf: &'a mut [u8]) -> Self {
        self.runner.set_gather(buf);
        self
    }

    /// The counters this connector updates.
    pub fn counters(&self) -> &'a Counters {
        self.counters
    }

    /// Runs the connector: connects, subscribes to `sink`'s filters, then
    /// dispatches received publishes into `sink` and publishes what
    /// `source` yields, reconnecting as configured. Returns only when the
    /// [`Reconnect`] policy gives up.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection without a DISCONNECT (the
    /// broker sees an abnormal close). No record value is lost by the drop
    /// itself: `source` hands out a value only in the poll that returns it,
    /// and what the engine took stays in TX for the next run.
    pub async fn run<S, M>(&mut self, sink: &mut S, source: &mut M) -> Stopped
    where
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
    {
        self.run_until(sink, source, core::future::pending()).await
    }

    /// As [`Self::run`], until `stop` completes: then, if connected, the
    /// connector publishes the offline presence (cause `stopped`, when
    /// [`Config::presence`] is set), waits for the broker to acknowledge
    /// what is in flight (at most [`Config::connect_timeout`]), sends a
    /// normal DISCONNECT (so the broker does not publish the will) and
    /// returns [`Stopped::Requested`].
    ///
    /// ```no_run
    /// # async fn demo<C: aimdb_connectors::Connect, K: aimdb_connectors::clock::Clock>(
    /// #     mqtt: &mut aimdb_connectors::mqtt::Mqtt<'_, C, K>,
    /// #     inbound: &mut aimdb_core::inbound::Dispatch<'_, 1, 1>,
    /// #     outbound: &mut dyn aimdb_core::connector::MessageSource) {
    /// # let shutdown = core::future::pending::<()>();
    /// // `shutdown`: a signal, a channel, `tokio::signal::ctrl_c()`, ...
    /// let why = mqtt.run_until(inbound, outbound, shutdown).await;
    /// # let _ = why;
    /// # }
    /// ```
    pub async fn run_until<S, M, F>(&mut self, sink: &mut S, source: &mut M, stop: F) -> Stopped
    where
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
        F: core::future::Future<Output = ()>,
    {
        self.run_durable(sink, source, (), stop).await
    }

    /// As [`Self::run_until`], with durable routes beside `source`: their
    /// values are stored in a backlog (flash, or a file on hosts) as they
    /// come, connected or not, published from it oldest first at QoS 1
    /// at least with the `aimdb-id` user property ([`ID_PROPERTY`]), and
    /// removed once the broker acknowledged them — so a broker outage
    /// longer than a record's ring, or a reboot, loses none of them
    /// (`backlog::Durable`, feature `backlog`).
    pub async fn run_durable<S, M, D, F>(
        &mut self,
        sink: &mut S,
        source: &mut M,
        durable: D,
        stop: F,
    ) -> Stopped
    where
        S: FrameSink + ?Sized,
        M: MessageSource + ?Sized,
        D: crate::durable::Durable,
        F: core::future::Future<Output = ()>,
    {
        let settings = Settings {
            reconnect: self.config.reconnect,
            backoff: self.config.backoff,
            connect_timeout: Some(self.config.connect_timeout),
            close_timeout: self.config.connect_timeout,
        };
        let mut d = Drive {
            engine: &mut self.engine,
            clock: &self.clock,
            sink,
            source,
            durable,
        };
        self.runner
            .run(&mut d, &mut self.connect, &settings, stop)
            .await
    }
}

impl<C: Connect, K: Clock> fmt::Debug for Mqtt<'_, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mqtt")
            .field("config", &self.config)
            .field("counters", &self.counters.snapshot())
            .finish_non_exhaustive()
    }
}
