//! The bench's subscriber: one rumqttc client on `b4/#` for the whole run,
//! on a thread of its own, counting what each round delivered.
//!
//! The same subscriber serves both publishers, so it is a fixed cost of
//! the fixture, not a column. It subscribes at QoS 0: the broker delivers
//! at the lower of the publish and the subscription QoS, so the publisher
//! leg runs at the scenario's QoS while the subscriber leg has no
//! in-flight window of its own to limit the rate. With the broker's queue
//! unbounded (see `broker.rs`) a message missing here was lost before or
//! in the broker.
//!
//! Every payload carries its round's tag and a sequence number
//! ([`value`]); a bitmap counts each sequence number once, so duplicates
//! (QoS 1 re-deliveries) and stragglers of an earlier round are told
//! apart from the round's own messages.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aimdb_connectors::tokio_io::run_on_thread;
use aimdb_core::codec::{Decode, Postcard};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

use crate::broker::own_tid;

/// The filter every publisher's topics fall under.
pub const FILTER: &str = "b4/#";

/// The `seq`-th message of the round tagged `tag` (< 2^23): bit 55 set, so
/// postcard's varint encodes every one in exactly 8 bytes.
pub fn value(tag: u32, seq: u32) -> u64 {
    debug_assert!(tag < 1 << 23);
    (1 << 55) | (u64::from(tag) << 32) | u64::from(seq)
}

/// What the subscriber counted for the current round, readable from any
/// thread.
pub struct Tally {
    /// Tag of the round being counted (0: none).
    round: AtomicU32,
    received: AtomicU64,
    duplicates: AtomicU64,
    /// Messages of another round, or not of this bench.
    stale: AtomicU64,
    /// When the last new message of the round arrived, ns after `base`.
    last_ns: AtomicU64,
    base: Instant,
}

impl Tally {
    /// Starts counting the round tagged `tag` from zero.
    pub fn begin(&self, tag: u32) {
        self.received.store(0, Ordering::Relaxed);
        self.duplicates.store(0, Ordering::Relaxed);
        self.last_ns.store(0, Ordering::Relaxed);
        self.round.store(tag, Ordering::Release);
    }

    /// Distinct messages of the round received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Acquire)
    }

    /// Messages of the round received more than once.
    pub fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Messages of other rounds (or not of this bench) since the start.
    pub fn stale(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Now, on the tally's clock (ns).
    pub fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// When the round's last new message arrived, on the tally's clock.
    pub fn last_ns(&self) -> u64 {
        self.last_ns.load(Ordering::Acquire)
    }
}

/// Per-thread state: which sequence numbers of the round were seen.
struct Seen {
    round: u32,
    bits: Vec<u64>,
}

impl Seen {
    fn on(&mut self, tally: &Tally, payload: &[u8]) {
        let round = tally.round.load(Ordering::Acquire);
        let v: Option<u64> = Postcard.decode(payload).ok();
        let (tag, seq) = match v {
            Some(v) => (((v >> 32) & 0x7f_ffff) as u32, v as u32 as usize),
            None => (0, 0),
        };
        if round == 0 || tag != round || seq >= self.bits.len() * 64 {
            tally.stale.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.round != round {
            self.bits.fill(0);
            self.round = round;
        }
        let (word, bit) = (seq / 64, 1u64 << (seq % 64));
        if self.bits[word] & bit != 0 {
            tally.duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.bits[word] |= bit;
        tally.last_ns.store(tally.now_ns(), Ordering::Release);
        tally.received.fetch_add(1, Ordering::Release);
    }
}

/// The subscriber thread; stopped and joined on drop.
pub struct Subscriber {
    tally: Arc<Tally>,
    /// Its thread's id (for the CPU accounting).
    pub tid: u32,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Subscriber {
    /// Connects to the broker on `port`, subscribes to [`FILTER`] and waits
    /// for the SUBACK (at most `wait`). Rounds of up to `max_msgs`
    /// messages can be counted.
    pub fn start(port: u16, max_msgs: u32, wait: Duration) -> Result<Self, String> {
        let tally = Arc::new(Tally {
            round: AtomicU32::new(0),
            received: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            base: Instant::now(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (t, s) = (Arc::clone(&tally), Arc::clone(&stop));
        let handle = run_on_thread("b4-subscriber", move || async move {
            let mut opts = MqttOptions::new("b4-subscriber", "127.0.0.1", port);
            opts.set_keep_alive(Duration::from_secs(30));
            let (client, mut events) = AsyncClient::new(opts, 16);
            let mut seen = Seen {
                round: 0,
                bits: vec![0; (max_msgs as usize).div_ceil(64)],
            };
            let mut ready = Some(ready_tx);
            while !s.load(Ordering::Relaxed) {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => seen.on(&t, &p.payload),
                    // Every (re)connection starts a clean session.
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        let _ = client.try_subscribe(FILTER, QoS::AtMostOnce);
                    }
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(own_tid());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if !s.load(Ordering::Relaxed) {
                            eprintln!("b4 subscriber: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        })
        .map_err(|e| format!("subscriber thread: {e}"))?;
        let mut sub = Self {
            tally,
            tid: 0,
            stop,
            handle: Some(handle),
        };
        sub.tid = ready_rx
            .recv_timeout(wait)
            .map_err(|_| format!("the subscriber was not subscribed within {wait:?}"))?;
        Ok(sub)
    }

    /// What it counted.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The loop sees the flag at its next event (the broker's
        // PINGRESP at the latest, or the error once the broker is
        // gone); do not wait for it.
        drop(self.handle.take());
    }
}
