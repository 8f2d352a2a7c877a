//! The two publishers, each run the same way: a thread of its own with a
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aimdb_connectors::mqtt::{self, Counters, Mqtt, QoS};
use aimdb_connectors::tokio_io::{run_on_thread, TcpConnect, TokioClock};
use aimdb_core::codec::{Encode, Postcard};
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

/// Which client publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// This project's MQTT connector.
    Ours,
    /// rumqttc's `AsyncClient`.
    Rumqttc,
}

impl Client {
    /// The column name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::Rumqttc => "rumqttc",
        }
    }
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
            Client::Ours => ours(job, control).await,
            Client::Rumqttc => rumqttc(job, control).await,
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

async fn ours(job: Job, control: Control) -> Report {
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
    let Ok(mut dispatch) = Dispatch::<1, 1>::builder().build() else {
        return failed("inbound table refused");
    };
    let counters = Counters::new();
    let (mut rx, mut tx, mut batch) = ([0u8; 256], [0u8; 4096], [0u8; 8192]);
    let id = format!("b4-ours-{}", job.tag);
    let parts = mqtt::Parts {
        connect: TcpConnect::new(format!("127.0.0.1:{}", job.port)),
        clock: TokioClock::new(),
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

    let produce = async {
        while !counters.is_connected() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let _ = ready.send(own_tid());
        if go.await.is_err() {
            return;
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
    tokio::select! {
        biased;
        _ = stop => {}
        () = produce => {}
        why = client.run(&mut dispatch, &mut routes) => {
            return failed(&format!("connector stopped: {why}"));
        }
    }
    let s = counters.snapshot();
    Report {
        lagged: routes.stats().lagged,
        dropped: u64::from(s.dropped),
        errors: u64::from(s.reconnects + s.connect_failures + s.ack_timeouts),
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
