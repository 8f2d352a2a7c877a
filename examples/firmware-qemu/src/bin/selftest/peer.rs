//! `device_app`: the demo device against a scripted peer.
//!
//! The device's tasks (`device_app::sensor`, `device_app::control`, `device_app::connector`) run
//! exactly as on UART0, but the connector's byte stream is one end of an
//! in-memory pipe; this check plays the gateway on the other end with the
//! connectors' own frame encoder and decoder.

use aimdb_connectors::framed::frame::{self, Decoder, Event};
use aimdb_connectors::framed;
use aimdb_connectors::loopback::{Pair, PipeReader, PipeWriter};
use cortex_m_semihosting::hprintln;
use device_protocol::{topics, Command, Reading, Status};
use embassy_executor::Spawner;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embassy_time::{with_timeout, Duration};
use embedded_io_async::{Read, Write};

static PIPE: Pair<Cs, 256> = Pair::new();
/// Readings the peer checks for order and exactly-once delivery.
const READINGS: u32 = 20;

#[embassy_executor::task]
async fn connector() {
    let (rx, tx) = PIPE.b();
    // No heartbeat: the scripted peer does not speak keep-alives.
    let e = device_app::connector(rx, tx, framed::Config::new()).await;
    hprintln!("  device connector ended: {}", e);
}

/// What the peer reads off the line.
enum Msg {
    Reading(Reading),
    Status(Status),
}

struct Peer {
    rx: PipeReader<'static, Cs, 256>,
    tx: PipeWriter<'static, Cs, 256>,
    dec: Decoder<64>,
    buf: [u8; 32],
    /// Unconsumed bytes of `buf`.
    at: usize,
    len: usize,
    next_seq: u32,
}

impl Peer {
    /// The next reading or status (other topics fail the check).
    async fn recv(&mut self) -> Option<Msg> {
        loop {
            if self.at == self.len {
                self.len = self.rx.read(&mut self.buf).await.ok()?;
                self.at = 0;
                if self.len == 0 {
                    return None;
                }
            }
            match self.dec.push(&self.buf[self.at..self.len]) {
                Event::NeedMore => self.at = self.len,
                Event::Error(e, _) => {
                    hprintln!("  peer: bad frame from device: {}", e);
                    return None;
                }
                Event::Frame(f, used) => {
                    self.at += used;
                    let msg = match f.topic {
                        t if t == topics::READINGS.as_bytes() => {
                            Msg::Reading(postcard::from_bytes(f.payload).ok()?)
                        }
                        t if t == topics::STATUS.as_bytes() => {
                            Msg::Status(postcard::from_bytes(f.payload).ok()?)
                        }
                        _ => return None,
                    };
                    return Some(msg);
                }
            }
        }
    }

    /// Checks a reading's sequence number: each exactly once, in order.
    fn reading(&mut self, r: Reading) -> bool {
        if r.seq != self.next_seq {
            hprintln!(
                "  peer: reading {} arrived, expected {}",
                r.seq,
                self.next_seq
            );
            return false;
        }
        self.next_seq += 1;
        true
    }

    async fn send(&mut self, cmd: Command) -> bool {
        let mut payload = [0u8; 8];
        let mut wire = [0u8; 32];
        let Ok(p) = postcard::to_slice(&cmd, &mut payload) else {
            return false;
        };
        let Ok(n) = frame::encode(topics::CMD, p, &mut wire) else {
            return false;
        };
        self.tx.write_all(&wire[..n]).await.is_ok()
    }

    /// Reads (checking readings on the way) until a status satisfies `want`.
    async fn status_where(&mut self, want: impl Fn(&Status) -> bool) -> bool {
        loop {
            match self.recv().await {
                Some(Msg::Reading(r)) => {
                    if !self.reading(r) {
                        return false;
                    }
                }
                Some(Msg::Status(s)) if want(&s) => return true,
                Some(Msg::Status(_)) => {}
                None => return false,
            }
        }
    }
}

pub async fn device_app(spawner: Spawner) -> bool {
    let (rx, tx) = PIPE.a();
    let mut peer = Peer {
        rx,
        tx,
        dec: Decoder::new(),
        buf: [0; 32],
        at: 0,
        len: 0,
        next_seq: 0,
    };
    let (Ok(c), Ok(s), Ok(k)) = (
        device_app::control_task(),
        device_app::sensor_task(),
        connector(),
    ) else {
        return false;
    };
    spawner.spawn(c);
    spawner.spawn(s);
    spawner.spawn(k);
    let script = async {
        // 1. The status at start, then readings 0.. in order, exactly once.
        ensure!(peer.status_where(|s| s.commands == 0 && !s.led).await);
        while peer.next_seq < READINGS {
            match peer.recv().await {
                Some(Msg::Reading(r)) => ensure!(peer.reading(r)),
                Some(Msg::Status(_)) => {}
                None => return false,
            }
        }
        // 2. Garbage on the line, then a command: the garbage is counted
        //    and skipped, the command applies, its status comes back.
        ensure!(peer
            .tx
            .write_all(&[0x42, 0x13, 0x37, 0x00, 0x05, 0x01, 0x00])
            .await
            .is_ok());
        ensure!(peer.send(Command::SetLed(true)).await);
        ensure!(peer.status_where(|s| s.led && s.commands == 1).await);
        // 3. Each command type round-trips (one at a time: a Mailbox keeps
        //    only the latest).
        ensure!(peer.send(Command::SetInterval(5)).await);
        ensure!(
            peer.status_where(|s| s.interval_ms == 5 && s.commands == 2)
                .await
        );
        ensure!(peer.send(Command::Ping(77)).await);
        ensure!(
            peer.status_where(|s| s.last_ping == 77 && s.commands == 3)
                .await
        );
        // 4. Readings keep flowing, still in order, at the new interval.
        let target = peer.next_seq + 10;
        while peer.next_seq < target {
            match peer.recv().await {
                Some(Msg::Reading(r)) => ensure!(peer.reading(r)),
                Some(Msg::Status(_)) => {}
                None => return false,
            }
        }
        true
    };
    let ok = match with_timeout(Duration::from_secs(20), script).await {
        Ok(ok) => ok,
        Err(_) => {
            hprintln!("  peer: timed out after reading {}", peer.next_seq);
            false
        }
    };
    let s = device_app::LINK.snapshot();
    hprintln!(
        "  device link: {} frames in, {} out, {} dropped in",
        s.received,
        s.sent,
        s.errors_in()
    );
    ensure!(ok);
    ensure!(s.received == 3);
    ensure!(s.cobs_errors + s.malformed + s.oversized == 2);
    true
}
