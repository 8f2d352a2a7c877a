//! The MQTT connector's packet path fed arbitrary broker bytes.
//!
//! Input: one flag byte (publish QoS, read chunk size, keep-alive, one or
//! two connections), then the bytes "the broker" sends, served in chunks by
//! an in-memory stream that swallows what the client writes and reports
//! end-of-stream when the bytes run out. With two connections, a second
//! byte says where the first connection's bytes end. The connector runs the
//! fixture's route table (so it subscribes to its nine filters) and one
//! outbound route holding a value, with `Reconnect::Never` (one
//! connection) or `Attempts(1)` (two), and a clock whose waits complete at
//! once (virtual time jumps to each deadline).
//!
//! Invariants: no panic; `run` returns within a bounded number of polls
//! (the stream never blocks); every received publish goes through the
//! dispatcher and is checked against the fixture's model (records change
//! only through declared inbound links, exactly as decoded); the
//! connector's counters agree with the dispatcher's (`received` = frames
//! dispatched, `rejected` = their rejections); at most the one outbound
//! value is published or dropped per connection (a retried publish plus
//! the `Latest` replay after a reconnect); every connection attempt is
//! either a failure or a success, and successes after the first are
//! reconnects; `run`'s reason matches the counters; not connected at the
//! end.
#![no_main]

use core::cell::Cell;
use core::convert::Infallible;

use aimdb_connectors::clock::{Clock, Instant};
use aimdb_connectors::mqtt::{Config, Connect, Counters, Mqtt, QoS};
use aimdb_connectors::reconnect::{Reconnect, Stopped};
use aimdb_core::codec::Postcard;
use aimdb_core::connector::FrameSink;
use aimdb_core::connector::{DispatchError, InboundStats};
use aimdb_core::outbound;
use aimdb_core::outbound::LocalRoutes;
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use aimdb_fuzz::fixture::{Harness, Links, Records, Table};
use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use embedded_io_async::{ErrorType, Read, Write};
use libfuzzer_sys::fuzz_target;

/// The broker's sending side: scripted bytes.
struct Script<'d> {
    data: &'d [u8],
    chunk: usize,
}

impl ErrorType for Script<'_> {
    type Error = Infallible;
}

impl Read for Script<'_> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        let n = self.chunk.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The broker's receiving side: every write dropped.
struct Discard;

impl ErrorType for Discard {
    type Error = Infallible;
}

impl Write for Discard {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        Ok(buf.len())
    }
    async fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// Hands out the scripted connections in turn, then refuses; counts the
/// attempts.
struct Scripted<'d> {
    scripts: [Option<Script<'d>>; 2],
    calls: &'d Cell<u32>,
}

impl<'d> Connect for Scripted<'d> {
    type Connection<'c>
        = (Script<'d>, Discard)
    where
        Self: 'c;
    type Error = ();
    async fn connect(&mut self) -> Result<(Script<'d>, Discard), ()> {
        self.calls.set(self.calls.get() + 1);
        let script = self.scripts.iter_mut().find_map(Option::take).ok_or(())?;
        Ok((script, Discard))
    }
}

/// Virtual time: a wait jumps to its deadline at once.
#[derive(Default)]
struct Jump(Cell<u64>);

impl Clock for Jump {
    fn now(&self) -> Instant {
        Instant::from_micros(self.0.get())
    }
    async fn sleep_until(&self, at: Instant) {
        if at == Instant::MAX {
            return core::future::pending().await;
        }
        self.0.set(self.0.get().max(at.as_micros()));
    }
}

/// The fixture's table, every dispatch checked against the model.
struct Checked<'t, 'r> {
    table: Table<'t>,
    harness: Harness<'r>,
    calls: u32,
    rejected: u32,
}

impl FrameSink for Checked<'_, '_> {
    fn dispatch(&mut self, topic: &[u8], payload: &[u8]) -> Result<usize, DispatchError> {
        self.calls += 1;
        let got = self.harness.step(&mut self.table, topic, payload);
        self.rejected += u32::from(got.is_err());
        got
    }
    fn next_filter(&self, from: usize) -> Option<(usize, &str)> {
        self.table.next_filter(from)
    }
    fn stats(&self) -> &InboundStats {
        self.table.stats()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut broker)) = data.split_first() else {
        return;
    };
    let two = flags & 0x40 != 0;
    let mut second: &[u8] = &[];
    if two {
        let Some((&at, rest)) = broker.split_first() else {
            return;
        };
        (broker, second) = rest.split_at(rest.len() * at as usize / 256);
    }
    let qos = match flags & 3 {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    };
    let chunk = match (flags >> 2) & 0x1f {
        0 => usize::MAX,
        n => n as usize,
    };

    let records = Records::new();
    let links = Links::new(&records);
    let mut sink = Checked {
        table: links.table(),
        harness: Harness::new(&records),
        calls: 0,
        rejected: 0,
    };

    static READY: Readiness<1> = Readiness::new();
    let state: Record<NoopRawMutex, Latest<u8>, 1> = Record::new("state");
    state.write(7);
    let mut out_link =
        outbound::Link::new(state.subscribe().unwrap(), "out/state", Postcard).qos(qos);
    let (mut scratch, mut topic) = ([0u8; 16], [0u8; 16]);
    let mut b = LocalRoutes::<_, 1, 1>::builder(&READY, &mut scratch).written_topics(&mut topic);
    b.link(&mut out_link);
    let mut routes = b.build().unwrap();

    let mut config = Config::new("fuzz");
    config.reconnect = if two {
        Reconnect::Attempts(1)
    } else {
        Reconnect::Never
    };
    config.keep_alive = (flags & 0x80 != 0).then_some(core::time::Duration::from_secs(5));
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let calls = Cell::new(0);
    let connect = Scripted {
        scripts: [
            Some(Script {
                data: broker,
                chunk,
            }),
            two.then_some(Script {
                data: second,
                chunk,
            }),
        ],
        calls: &calls,
    };
    let mut mqtt = Mqtt::new(config, aimdb_connectors::mqtt::Parts { connect, clock: Jump::default(), rx: &mut rx, tx: &mut tx, counters: &counters }).unwrap();

    let stopped = aimdb_fuzz::poll_bounded(mqtt.run(&mut sink, &mut routes), 1_000)
        .expect("run ends once the broker's bytes run out");

    let c = counters.snapshot();
    if std::env::var_os("AIMDB_FUZZ_DEBUG").is_some() {
        eprintln!("{stopped:?} {c:?} {:?}", sink.table.stats());
    }
    // An empty payload (a cleared retained message) is received, counted
    // as `cleared`, and never reaches the sink.
    assert_eq!(c.received, sink.calls + c.cleared, "{c:?}");
    assert_eq!(c.rejected, sink.rejected, "{c:?}");
    assert_eq!(c.rejected, sink.table.stats().total_rejected(), "{c:?}");
    let calls = calls.get();
    assert!(calls >= c.connect_failures, "{calls} attempts, {c:?}");
    let successes = calls - c.connect_failures;
    assert_eq!(
        c.reconnects,
        successes.saturating_sub(1),
        "{calls} attempts, {c:?}"
    );
    assert!(successes <= 1 + u32::from(two), "{calls} attempts, {c:?}");
    assert!(
        c.sent + c.dropped <= 2 * successes,
        "one outbound value: {c:?}"
    );
    assert!(!c.connected, "{c:?}");
    match stopped {
        Stopped::ConnectFailed(1) => assert!(c.connect_failures >= 1, "{c:?}"),
        Stopped::Disconnected => assert!(!two && c.connect_failures == 0, "{c:?}"),
        other => panic!("unexpected stop {other:?}, {c:?}"),
    }
});
