//! An in-process node for the CLI's tests: described records (each with
//! a reader slot to spare, so it can be watched), a `Responder` reporting
//! its connector, linked into inbound dispatch and outbound routes, served
//! over the framed connector (TCP on loopback, heartbeat on as on the demo
//! firmware) or over MQTT; and a bounded run of the `aimdb` binary.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use aimdb_connectors::framed::{Config, Counters, Framed, Heartbeat};
use aimdb_connectors::tokio_io::{self, TokioClock};
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::{self, Routes};
use aimdb_core::presence::LinkState;
use aimdb_core::record::{Latest, Mailbox, Record, Ring};
use aimdb_core::remote::{BacklogView, Connector, Counted, Description, Responder};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use serde::{Deserialize, Serialize};

pub const REQ: &str = aimdb_core::remote::proto::REQUEST;
pub const RSP: &str = aimdb_core::remote::proto::RESPONSE;

/// Bound on every wait.
pub const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, postcard_schema::Schema)]
pub struct Reading {
    pub seq: u32,
    pub millideg: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, postcard_schema::Schema)]
pub struct Setpoint {
    pub celsius: i16,
    pub on: bool,
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// A node's records and responder (leaked: each test has its own).
pub struct Node {
    pub readings: &'static Record<Cs, Ring<Reading, 4>, 2>,
    pub led: &'static Record<Cs, Latest<bool>, 2>,
    pub setpoint: &'static Record<Cs, Latest<Setpoint>, 2>,
    pub cmd: &'static Record<Cs, Mailbox<u8>, 2>,
    pub responder: &'static Responder<Cs, 256>,
    pub ready: &'static Readiness<1>,
    /// The framed connector's counters (reported as `framed`).
    pub counters: &'static Counters,
    /// The connector's link state, written by it and reported by `stats`.
    pub link: &'static Record<Cs, Latest<LinkState>, 1>,
}

impl Node {
    /// Four records: `readings` (read-only stream of a struct), `led`
    /// (writable bool), `setpoint` (writable struct), `cmd` (read-only
    /// mailbox); its connector is the framed one of [`Self::serve_tcp`],
    /// reported as `framed`.
    pub fn new() -> Self {
        let counters = leak(Counters::new());
        Self::build("framed", counters, counters, None)
    }

    /// [`Self::new`], its connector reporting `backlog` as its durable
    /// backlog.
    pub fn with_backlog(backlog: &'static (dyn BacklogView + Sync)) -> Self {
        let counters = leak(Counters::new());
        Self::build("framed", counters, counters, Some(backlog))
    }

    /// The same records, reporting one connector named `name` with
    /// `counted` as its counters and [`Self::link`] as its link (for a
    /// connector other than [`Self::serve_tcp`]'s).
    pub fn with_connector(name: &'static str, counted: &'static (dyn Counted + Sync)) -> Self {
        Self::build(name, counted, leak(Counters::new()), None)
    }

    fn build(
        name: &'static str,
        counted: &'static (dyn Counted + Sync),
        counters: &'static Counters,
        backlog: Option<&'static (dyn BacklogView + Sync)>,
    ) -> Self {
        let readings = leak(Record::new("readings"));
        let led = leak(Record::new("led"));
        let setpoint = leak(Record::new("setpoint"));
        let cmd = leak(Record::new("cmd"));
        let table: &'static [Description] = Box::leak(Box::new([
            Description::of(readings).topics(&["dev/readings"]),
            Description::of(led).topics(&["dev/led"]).writable(),
            Description::of(setpoint)
                .topics(&["dev/setpoint"])
                .writable(),
            Description::of(cmd),
        ]));
        let link = leak(Record::new("link"));
        let connector = Connector::new(name, counted).link(link);
        let connector = match backlog {
            Some(b) => connector.backlog(b),
            None => connector,
        };
        let connectors: &'static [Connector] = Box::leak(Box::new([connector]));
        Self {
            readings,
            led,
            setpoint,
            cmd,
            responder: leak(Responder::new(table).with_connectors(connectors)),
            ready: leak(Readiness::new()),
            counters,
            link,
        }
    }

    /// Serves the node over framed TCP on 127.0.0.1 (one connection after
    /// another, for ever, on its own thread); returns the port.
    pub fn serve_tcp(&self) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (responder, ready) = (self.responder, self.ready);
        let (counters, link) = (self.counters, self.link);
        tokio_io::run_on_thread("node", move || async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (rx, tx) = tokio_io::tcp(stream);
                let mut b = Dispatch::<2, 4>::builder();
                b.link(REQ, responder);
                let mut dispatch = b.build().unwrap();
                let mut answers =
                    outbound::Link::new(responder.requests(), RSP, responder.answers());
                let mut payload = [0u8; 1024];
                let mut b = Routes::<_, 1, 1>::builder(ready, &mut payload);
                b.link(&mut answers);
                let mut routes = b.build().unwrap();
                // As the demo firmware: keep-alives every second, a link
                // silent for 3 s is dropped.
                let mut config = Config::new();
                config.heartbeat = Some(Heartbeat::new(
                    Duration::from_secs(1),
                    Duration::from_secs(3),
                ));
                let mut framed = Framed::new(counters).with_config(config).with_link(link);
                let _ = framed
                    .run_with_clock(rx, tx, TokioClock::new(), &mut dispatch, &mut routes)
                    .await;
            }
        })
        .expect("node thread");
        port
    }
}

/// Waits (polling every 10 ms) until `cond` holds; fails after [`WAIT`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `aimdb` with `args`, its output piped; the caller ends it.
pub fn spawn_aimdb(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_aimdb"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run aimdb")
}

/// Waits for `child` to exit, killing it (and failing) after [`WAIT`].
pub fn finish(mut child: Child, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > WAIT {
            let _ = child.kill();
            panic!("{what} did not finish within {WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Runs `aimdb` with `args`, killed if it takes longer than [`WAIT`].
pub fn aimdb(args: &[&str]) -> Output {
    finish(spawn_aimdb(args), &format!("aimdb {args:?}"))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts exit code `code`, showing the output otherwise.
pub fn expect_code(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}
