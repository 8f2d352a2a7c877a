//! The publishers, each run the same way: a thread of its own with a
//! current-thread tokio runtime ([`run_on_thread`]) on which the producer
//! and the client share one task, so the thread's CPU time is the
//! publishing side's (plus helper threads the client starts, which the
//! bench adds; see `b4_mqtt.rs`).
//!
//! - **ours**: one `Ring<u64, DEPTH>` record per route, each read by an
//!   `outbound::Link` (postcard, QoS set on the link) in one `Routes`
//!   table, and `Mqtt::run` over `TcpConnect`. The producer writes the
//!   records in turn. Records never block a writer, so the producer keeps
//!   at most [`WINDOW`] messages written and not yet sent
//!   (`Counters::sent`): it tops up to the window when the backlog is at
//!   most half of it, and otherwise sleeps 1 ms (a yield would spin while
//!   the connector waits for the socket or for acknowledgements).
//! - **rumqttc**: `AsyncClient` with a request channel of [`WINDOW`]
//!   (its back-pressure: `publish().await` waits while it is full) and
//!   its `EventLoop` polled in the same task; `publish(topic, qos, false,
//!   payload)` per message, the same postcard bytes on the same topics.
//!   Defaults otherwise (MQTT 3.1.1, 100 in flight), except `TCP_NODELAY`
//!   on, as `TcpConnect` sets it, so both run the same TCP settings.
//! - **ours-aa**: `ours` again, a second identical cell: the A/A control
//!   of the QoS 1 rows (how far two identical columns of one run differ).
//! - **ours+backlog**: `ours` with the routes made durable
//!   (`backlog::Durable` over a `FileFlash` file in a temporary directory,
//!   removed after the round; `Mqtt::run_durable`): every message is
//!   stored in the file when written, read back, published (QoS 1, the
//!   `aimdb-id` property) and removed at its PUBACK. Paced as `ours`.
//! - **ours+drain**: the same connector and file, the round's messages
//!   stored in the backlog before the round (as an outage would leave
//!   them), held back once connected until the go signal; then the
//!   backlog drains: msg/s is the rate of the drain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::cell::Cell;
use std::path::PathBuf;
use std::task::{Context, Poll};

use aimdb_connectors::backlog::{self, page_cache, Backlog, FileFlash, Full, PageCache};
use aimdb_connectors::clock::{self, Clock};
use aimdb_connectors::engine::Engine;
use aimdb_connectors::mqtt::{self, Counters, Mqtt, QoS};
use aimdb_connectors::tokio_io::{run_on_thread, TcpConnect, TokioClock};
use aimdb_core::codec::{Encode, Postcard};
use aimdb_core::connector::{self, Message};
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::{self, words, Routes};
use aimdb_core::record::{Record, Ring};
use aimdb_core::sync::{HostRawMutex, Readiness};
use futures::channel::oneshot;

use crate::broker::{self, own_tid};
use crate::subscriber::value;

/// Most routes a scenario uses.
pub const MAX_ROUTES: usize = 64;
/// Messages handed to a client and not yet on the connection, at most
/// (ours: written and not sent; rumqttc: its request channel).
pub const WINDOW: u32 = 1024;
/// Depth of each of our records: the whole window fits in one.
const DEPTH: usize = 2 * WINDOW as usize;
/// Bound on a publisher's stop once told to.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// The backlog file's erase page and page count: 8 MiB, about 180,000
/// of the bench's messages (a drain round of more refuses the rest,
/// counted as dropped).
const BACKLOG_PAGE: usize = 16 * 1024;
const BACKLOG_PAGES: usize = 512;
/// One backlog entry: its head, the longest topic (`b4/63`), the
/// payload; rounded up to the flash's write size (4 bytes), as the queue
/// reads an entry back in whole words.
const ENTRY: usize = (backlog::HEAD + 5 + 8).next_multiple_of(4);

/// Which client publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// This project's MQTT connector.
    Ours,
    /// rumqttc's `AsyncClient`.
    Rumqttc,
    /// `Ours` again: the A/A control.
    OursAa,
    /// Ours with the routes through a durable backlog.
    OursBacklog,
    /// Ours draining a backlog filled before the round.
    OursDrain,
}

impl Client {
    /// The column name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::Rumqttc => "rumqttc",
            Self::OursAa => "ours-aa",
            Self::OursBacklog => "ours+backlog",
            Self::OursDrain => "ours+drain",
        }
    }

    /// Whether it runs at QoS 0 too (the backlog's messages are QoS 1).
    pub fn qos0(self) -> bool {
        matches!(self, Self::Ours | Self::Rumqttc)
    }
}

/// How [`ours`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Routes straight to the connector.
    Plain,
    /// Routes through the backlog as they are written.
    Through,
    /// The backlog filled before the round, drained from go.
    Drain,
}

/// One round's publishing.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub client: Client,
    /// QoS 1 (else 0).
    pub qos1: bool,
    /// Routes (topics), written in turn: `b4/0`, `b4/1`, ...
    pub routes: usize,
    pub msgs: u32,
    /// The round's tag in every payload ([`value`]).
    pub tag: u32,
    pub port: u16,
}

/// What a publisher reports when stopped.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Ours: values a `Ring` overwrote before the connector read them
    /// (the window keeps this 0).
    pub lagged: u64,
    /// Ours: messages the connector could not send; rumqttc: failed
    /// `publish` calls.
    pub dropped: u64,
    /// Connection errors and reconnects.
    pub errors: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
    /// Ours: transport writes over the round (`mqtt::Stats::writes`).
    pub writes: Option<u64>,
}

/// The bench's side of a publisher thread.
struct Control {
    ready: mpsc::Sender<u32>,
    go: oneshot::Receiver<()>,
    stop: oneshot::Receiver<()>,
    produced: Arc<AtomicBool>,
}

/// A publisher thread, connected and waiting for [`Running::go`].
pub struct Running {
    /// Its thread's id.
    pub tid: u32,
    go: Option<oneshot::Sender<()>>,
    stop: Option<oneshot::Sender<()>>,
    produced: Arc<AtomicBool>,
    handle: JoinHandle<Report>,
}

/// Starts `job`'s publisher and waits (at most `wait`) until it is
/// connected.
pub fn start(job: Job, wait: Duration) -> Result<Running, String> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    let produced = Arc::new(AtomicBool::new(false));
    let control = Control {
        ready: ready_tx,
        go: go_rx,
        stop: stop_rx,
        produced: Arc::clone(&produced),
    };
    let name = format!("b4-{}", job.client.name());
    let handle = run_on_thread(&name, move || async move {
        match job.client {
            Client::Ours | Client::OursAa => ours(job, control, Mode::Plain).await,
            Client::Rumqttc => rumqttc(job, control).await,
            Client::OursBacklog => ours(job, control, Mode::Through).await,
            Client::OursDrain => ours(job, control, Mode::Drain).await,
        }
    })
    .map_err(|e| format!("publisher thread: {e}"))?;
    let running = Running {
        tid: 0,
        go: Some(go_tx),
        stop: Some(stop_tx),
        produced,
        handle,
    };
    match ready_rx.recv_timeout(wait) {
        Ok(tid) => Ok(Running { tid, ..running }),
        Err(_) => {
            let report = running.finish();
            Err(format!(
                "{} not connected within {wait:?} ({report:?})",
                job.client.name()
            ))
        }
    }
}

impl Running {
    /// Starts publishing.
    pub fn go(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// Whether every message was handed to the client.
    pub fn produced(&self) -> bool {
        self.produced.load(Ordering::Acquire)
    }

    /// Stops the publisher (dropping its connection) and returns its
    /// report; an error if it did not stop within [`STOP_WAIT`].
    pub fn finish(mut self) -> Report {
        drop(self.stop.take());
        let deadline = Instant::now() + STOP_WAIT;
        while !self.handle.is_finished() {
            if Instant::now() > deadline {
                return Report {
                    last_error: Some(format!("did not stop within {STOP_WAIT:?}")),
                    ..Report::default()
                };
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.handle.join().unwrap_or_else(|_| Report {
            last_error: Some("publisher thread panicked".to_string()),
            ..Report::default()
        })
    }
}

/// `b4/0` .. `b4/{n-1}`.
fn topics(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("b4/{i}")).collect()
}

type Rec = Record<HostRawMutex, Ring<u64, DEPTH>, 1>;

type BacklogCache = PageCache<BACKLOG_PAGES>;

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: u32) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("aimdb-b4-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The round's backlog, in a fresh file under `dir`.
async fn open_backlog<'c>(
    dir: &TempDir,
    counters: &'c backlog::Counters,
) -> Result<Backlog<'c, FileFlash<BACKLOG_PAGE>, BacklogCache>, String> {
    let flash = FileFlash::<BACKLOG_PAGE>::open(dir.0.join("backlog"), BACKLOG_PAGES as u32)
        .map_err(|e| format!("backlog file: {e}"))?;
    let mut buf = [0u8; ENTRY];
    Backlog::open(
        flash,
        0..(BACKLOG_PAGES * BACKLOG_PAGE) as u32,
        page_cache(),
        1,
        Full::RefuseNewest,
        counters,
        &mut buf,
    )
    .await
    .map_err(|e| format!("backlog: {e}"))
}

/// Stores the round's `job.msgs` messages in `backlog`, as the routes
/// would have: the same topics, payloads and QoS.
async fn fill(
    backlog: &mut Backlog<'_, FileFlash<BACKLOG_PAGE>, BacklogCache>,
    job: Job,
    topics: &[String],
    now: clock::Instant,
) {
    let mut buf = [0u8; ENTRY];
    let mut payload = [0u8; 8];
    for seq in 0..job.msgs {
        let Ok(n) = Postcard.encode(&value(job.tag, seq), &mut payload) else {
            continue;
        };
        let m = Message {
            route: seq as usize % topics.len(),
            topic: &topics[seq as usize % topics.len()],
            payload: &payload[..n],
            lagged: 0,
            qos: connector::QoS::AtLeastOnce,
            retain: false,
            urgent: false,
        };
        // A refused value is counted by the backlog (reported as dropped).
        let _ = backlog.push(&m, now, &mut buf).await;
    }
}

/// A durable part held back until `open`: stores, but hands the engine
/// nothing before the round's go.
struct Gate<'g, D> {
    inner: D,
    open: &'g Cell<bool>,
    started: bool,
}

impl<D: aimdb_connectors::durable::Durable> aimdb_connectors::durable::Durable for Gate<'_, D> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.open.get() && !self.started {
            self.started = true;
            return Poll::Ready(());
        }
        self.inner.poll_ready(cx)
    }

    fn round<E: Engine>(
        &mut self,
        engine: &mut E,
        offer: bool,
        now: clock::Instant,
        cx: &mut Context<'_>,
    ) {
        self.inner.round(engine, offer && self.open.get(), now, cx);
    }

    fn keep(&mut self, now: clock::Instant, cx: &mut Context<'_>) {
        self.inner.keep(now, cx);
    }
}

async fn ours(job: Job, control: Control, mode: Mode) -> Report {
    let Control {
        ready,
        go,
        stop,
        produced,
    } = control;
    let records: Vec<Rec> = (0..job.routes).map(|_| Record::new("b4")).collect();
    let topics = topics(job.routes);
    let qos = if job.qos1 {
        QoS::AtLeastOnce
    } else {
        QoS::AtMostOnce
    };
    let mut links: Vec<_> = records
        .iter()
        .zip(&topics)
        .map(|(r, t)| {
            let reader = r.subscribe().expect("one reader per record");
            outbound::Link::new(reader, t.as_str(), Postcard).qos(qos)
        })
        .collect();
    let mut payload = [0u8; 16];
    let ready_bits = Arc::new(Readiness::<{ words(MAX_ROUTES) }>::new());
    let mut b = Routes::<_, { words(MAX_ROUTES) }, MAX_ROUTES>::builder(ready_bits, &mut payload);
    for l in &mut links {
        b.link(l);
    }
    let Ok(mut routes) = b.build() else {
        return failed("outbound table refused");
    };
    // With a backlog the routes above are its table, and the connector's
    // own table is empty.
    let mut none = [0u8; 16];
    let Ok(mut plain) =
        Routes::<_, 1, 1>::builder(Arc::new(Readiness::<1>::new()), &mut none).build()
    else {
        return failed("outbound table refused");
    };
    let Ok(mut dispatch) = Dispatch::<1, 1>::builder().build() else {
        return failed("inbound table refused");
    };
    let counters = Counters::new();
    let (mut rx, mut tx, mut batch) = ([0u8; 256], [0u8; 4096], [0u8; 8192]);
    let id = format!("b4-ours-{}", job.tag);
    let clock = TokioClock::new();
    let now = clock.now();
    let parts = mqtt::Parts {
        connect: TcpConnect::new(format!("127.0.0.1:{}", job.port)),
        clock,
        rx: &mut rx,
        tx: &mut tx,
        counters: &counters,
    };
    let mut config = mqtt::Config::new(&id);
    config.max_in_flight = broker::IN_FLIGHT;
    let Ok(client) = Mqtt::new(config, parts) else {
        return failed("connector configuration refused");
    };
    let mut client = client.with_write_buffer(&mut batch);

    let backlog_counters = backlog::Counters::new();
    let dir = match mode {
        Mode::Plain => None,
        _ => match TempDir::new(job.tag) {
            Ok(d) => Some(d),
            Err(e) => return failed(&format!("temporary directory: {e}")),
        },
    };
    let mut backlog = match &dir {
        None => None,
        Some(d) => match open_backlog(d, &backlog_counters).await {
            Ok(b) => Some(b),
            Err(e) => return failed(&e),
        },
    };
    if let (Mode::Drain, Some(b)) = (mode, backlog.as_mut()) {
        fill(b, job, &topics, now).await;
    }
    let open = Cell::new(mode != Mode::Drain);

    let produce = async {
        while !counters.is_connected() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _ = ready.send(own_tid());
        if go.await.is_err() {
            return;
        }
        if mode == Mode::Drain {
            // Everything is stored: let the backlog drain.
            open.set(true);
            produced.store(true, Ordering::Release);
            std::future::pending::<()>().await;
        }
        let (n, half) = (job.msgs, WINDOW / 2);
        let mut written = 0u32;
        while written < n {
            let backlog = written.wrapping_sub(counters.sent());
            if backlog > half {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            let until = (written + WINDOW - backlog).min(n);
            while written < until {
                records[written as usize % records.len()].write(value(job.tag, written));
                written += 1;
            }
            tokio::task::yield_now().await;
        }
        produced.store(true, Ordering::Release);
        std::future::pending::<()>().await;
    };
    let mut entry = [0u8; ENTRY];
    let run = async {
        match backlog.as_mut() {
            None => client.run(&mut dispatch, &mut routes).await,
            Some(b) => {
                let durable = Gate {
                    inner: backlog::Durable::new(b, &mut routes, &mut entry),
                    open: &open,
                    started: false,
                };
                client
                    .run_durable(&mut dispatch, &mut plain, durable, std::future::pending())
                    .await
            }
        }
    };
    tokio::select! {
        biased;
        _ = stop => {}
        () = produce => {}
        why = run => {
            return failed(&format!("connector stopped: {why}"));
        }
    }
    let s = counters.snapshot();
    let b = backlog_counters.snapshot();
    drop(backlog);
    drop(dir);
    Report {
        lagged: routes.stats().lagged,
        dropped: u64::from(s.dropped) + u64::from(b.dropped + b.refused + b.too_large),
        errors: u64::from(s.reconnects + s.connect_failures + s.ack_timeouts + b.flash_errors),
        last_error: counters.last_error().map(|c| c.to_string()),
        writes: Some(u64::from(s.writes)),
    }
}

async fn rumqttc(job: Job, control: Control) -> Report {
    use rumqttc::{AsyncClient, Event, MqttOptions, NetworkOptions, Packet};

    let Control {
        ready,
        go,
        stop,
        produced,
    } = control;
    let topics = topics(job.routes);
    let qos = if job.qos1 {
        rumqttc::QoS::AtLeastOnce
    } else {
        rumqttc::QoS::AtMostOnce
    };
    let mut opts = MqttOptions::new(format!("b4-rumqttc-{}", job.tag), "127.0.0.1", job.port);
    opts.set_keep_alive(Duration::from_secs(30));
    opts.set_inflight(broker::IN_FLIGHT);
    let (client, mut events) = AsyncClient::new(opts, WINDOW as usize);
    let mut net = NetworkOptions::new();
    net.set_tcp_nodelay(true);
    events.set_network_options(net);

    let connected = std::cell::Cell::new(false);
    let mut report = Report::default();
    let pump = async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => connected.set(true),
                Ok(_) => {}
                Err(e) => {
                    report.errors += 1;
                    report.last_error = Some(e.to_string());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    let mut dropped = 0u64;
    let produce = async {
        while !connected.get() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _ = ready.send(own_tid());
        if go.await.is_err() {
            return;
        }
        let mut buf = [0u8; 8];
        for seq in 0..job.msgs {
            let ok = Postcard.encode(&value(job.tag, seq), &mut buf).is_ok()
                && client
                    .publish(
                        topics[seq as usize % topics.len()].as_str(),
                        qos,
                        false,
                        buf,
                    )
                    .await
                    .is_ok();
            dropped += u64::from(!ok);
        }
        produced.store(true, Ordering::Release);
        std::future::pending::<()>().await;
    };
    tokio::select! {
        biased;
        _ = stop => {}
        () = produce => {}
        () = pump => {}
    }
    report.dropped = dropped;
    report
}

fn failed(why: &str) -> Report {
    Report {
        last_error: Some(why.to_string()),
        ..Report::default()
    }
}
