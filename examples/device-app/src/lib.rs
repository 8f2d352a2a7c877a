//! The demo device: a `Ring` of sensor readings and a `Latest` status go
//! out, a `Mailbox` of commands comes in, all over one framed-stream
//! connector on whatever byte stream the binary hands it (UART0 on the
//! device, an in-memory pipe in the self-test).
//!
//! ```text
//!  sensor task ──► READINGS (Ring) ──┐
//!  control task ─► STATUS (Latest) ──┼─► OutboundRoutes ─► framed ─► UART0 TX
//!  control task ◄── CMD (Mailbox) ◄──┴── InboundDispatch ◄─ framed ◄─ UART0 RX
//! ```

use portable_atomic::{AtomicU32, Ordering};

use aimdb_connectors::framed::{self, Framed};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{Dispatch, Link as InLink};
use aimdb_core::outbound::{Link as OutLink, Routes};
use aimdb_core::record::{Latest, Mailbox, Record, Ring};
use aimdb_core::sync::Readiness;
use device_protocol::{topics, Command, Reading, Status};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embassy_time::Timer;
use embedded_io_async::{Read, Write};

/// Readings not yet sent; a burst longer than this is reported as lag.
pub const READINGS_DEPTH: usize = 32;

/// Sensor readings, oldest first.
pub static READINGS: Record<Cs, Ring<Reading, READINGS_DEPTH>, 1> = Record::new("readings");
/// The device's state after the last command.
pub static STATUS: Record<Cs, Latest<Status>, 1> = Record::new("status");
/// Commands from the host: the latest wins, taken once.
pub static CMD: Record<Cs, Mailbox<Command>, 1> = Record::new("cmd");
static CMD_IN: InLink<'static, Record<Cs, Mailbox<Command>, 1>, Postcard, Command> =
    InLink::new(&CMD, Postcard).with_max_payload(8);
static READY: Readiness<1> = Readiness::new();
/// Counters of the device link.
pub static LINK: framed::Stats = framed::Stats::new();

/// Reading interval in milliseconds (changed by `SetInterval`).
static INTERVAL_MS: AtomicU32 = AtomicU32::new(100);

/// Largest decoded frame in: a command is a few bytes.
const RX_FRAME: usize = 64;
/// Transmit buffer: a batch of frames (a reading frame is ~20 bytes).
const TX_BUF: usize = 128;

/// Runs the connector on one connection until the stream ends. Call again
/// on the next connection; `Latest` status is re-sent each time.
pub async fn connector<R: Read, W: Write>(rx: R, tx: W) -> framed::Error {
    let (Ok(readings), Ok(status)) = (READINGS.subscribe(), STATUS.subscribe()) else {
        // Only this function subscribes, and it releases its readers on
        // return: a second concurrent call is a programming error.
        return framed::Error::Closed;
    };
    let mut readings = OutLink::new(readings, topics::READINGS, Postcard);
    let mut status = OutLink::new(status, topics::STATUS, Postcard);
    // A reading is at most 10 bytes of postcard, a status 13.
    let (mut payload, mut topic) = ([0u8; 16], [0u8; 0]);
    // Builders live in blocks so they do not keep space in the task's
    // state across the awaits below.
    let routes = {
        let mut b = Routes::<_, 1, 2>::builder(&READY, &mut payload, &mut topic);
        b.link(&mut readings).link(&mut status);
        b.build()
    };
    let dispatch = {
        let mut b = Dispatch::<2, 2>::builder();
        b.link(topics::CMD, &CMD_IN);
        b.build()
    };
    let (Ok(mut routes), Ok(mut dispatch)) = (routes, dispatch) else {
        return framed::Error::Closed;
    };
    let mut framed = Framed::<RX_FRAME, TX_BUF>::new(&LINK);
    framed.run(rx, tx, &mut dispatch, &mut routes).await
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
    let Ok(mut cmds) = CMD.subscribe() else { return };
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

/// [`control`] as an embassy task.
#[embassy_executor::task]
pub async fn control_task() {
    control().await
}
