//! What a protocol engine is: a state machine with no I/O and no clock.
//!
//! An engine owns one protocol's state over buffers its owner gives it,
//! and nothing else: it never awaits, never reads a clock, never touches a
//! socket. The [runner](crate::runner) moves bytes between a transport and
//! it, reads the [clock](crate::clock), and pulls outbound messages from
//! the routes:
//!
//! ```text
//!                 ┌──────────── runner (one task) ────────────┐
//!   transport ──► │ read ──► Engine::received(n, now, sink) ──┼──► FrameSink (records)
//!   transport ◄── │ write ◄── Engine::io().tx ◄── offer(msg) ◄┼─── MessageSource (records)
//!                 │ sleep_until(poll_at) ──► Engine::poll(now)│
//!                 └───────────────────────────────────────────┘
//! ```
//!
//! as smoltcp's sockets sit under its interface and rumqttc's `MqttState`
//! under its event loop. So an engine can be tested and fuzzed with plain
//! function calls — arbitrary bytes in, arbitrary time steps — and a new
//! transport (UDP, CAN, BLE) writes an engine and nothing else: connect,
//! reconnect, backoff, link state, replay and the outbound pull are the
//! runner's.
//!
//! # The contract
//!
//! - [`Engine::open`] starts a connection; whatever the last one left
//!   (a partial frame, a half-written packet) is the engine's to resume
//!   or drop.
//! - [`Engine::io`] lends the two buffers of the I/O: where the next read
//!   goes and what is to be written next. The runner reads and writes
//!   concurrently, then reports [`Engine::received`] and
//!   [`Engine::transmitted`] with the counts.
//! - [`Engine::offer`] takes one outbound message if it can
//!   ([`Offer::Accepted`]), or says to keep it for later
//!   ([`Offer::Busy`]: the runner keeps its `Ready` and offers the same
//!   message again when [`Engine::accepting`] says so), or that it can
//!   never go ([`Offer::TooLarge`]: counted and dropped by the engine).
//! - [`Engine::poll_at`] is the next instant the engine needs
//!   [`Engine::poll`] called; `None` for none.
//! - Any of them may end the connection: [`Engine::ended`] then holds
//!   why, and the runner closes the transport.
//!
//! Every method is synchronous and bounded: work per call is at most the
//! bytes handed in or the buffers' size.

use aimdb_core::connector::{FrameSink, Message};
use aimdb_core::presence::Cause;
use embedded_io_async::ErrorKind;

use crate::clock::Instant;
use crate::connect::ConnectFailure;

/// What happened to an offered message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Taken: the engine sends it (and, where the protocol has
    /// acknowledgements, keeps it until acknowledged).
    Accepted,
    /// Not now: no room until bytes are written or acknowledgements come.
    /// Offer the same message again when [`Engine::accepting`].
    Busy,
    /// Never: larger than the engine's buffers or the peer accepts. The
    /// engine counted it as dropped.
    TooLarge,
}

/// What identifies a tracked message to its consumers: the node's boot
/// and the message's sequence within it, in the order stored (a
/// backlog's stamp). A consumer that keeps the largest it has seen per
/// node drops every duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id {
    /// The node's boot sequence.
    pub boot: u32,
    /// The message's sequence within that boot.
    pub seq: u32,
}

/// What became of tracked messages ([`Engine::offer_tracked`]) since the
/// last [`Engine::delivered`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivery {
    /// This many of the oldest were acknowledged by the peer, in the
    /// order offered.
    pub acked: u32,
    /// The engine dropped every other tracked message it held (a new
    /// connection): offer them again, oldest first.
    pub lost: bool,
}

/// How the transport ended a connection, as the runner saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoEnd {
    /// End of stream: a read returned no bytes.
    Closed,
    /// A read failed.
    Read(ErrorKind),
    /// A write failed, or took no bytes.
    Write(ErrorKind),
}

/// The buffers of one round of I/O, lent by [`Engine::io`].
#[derive(Debug)]
pub struct Io<'b> {
    /// Where the next read goes; empty: do not read now.
    pub rx: &'b mut [u8],
    /// What to write next; empty: nothing to write.
    pub tx: &'b [u8],
}

/// Why a connection attempt did not come up, for [`Engine::failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure<E> {
    /// Opening the transport failed.
    Connect(ConnectFailure),
    /// The transport opened but the engine did not come up within the
    /// runner's connect timeout.
    Timeout,
    /// The connection ended before the engine came up.
    Ended(E),
}

/// A protocol as a state machine; see the module docs.
pub trait Engine {
    /// Why a connection ended: the connector's own error type.
    type End: Copy;

    /// The connector's name, for logs.
    const NAME: &'static str;

    /// Starts a new connection at `now`: per-connection state reset, the
    /// opening bytes (a CONNECT, a hello) queued.
    fn open(&mut self, now: Instant);

    /// The buffers for the next read and write; both empty once the
    /// connection [`ended`](Engine::ended) (until the next `open`).
    fn io(&mut self) -> Io<'_>;

    /// `n` bytes were read into [`Io::rx`]; inbound messages among them
    /// go to `sink`.
    fn received<S: FrameSink + ?Sized>(&mut self, n: usize, now: Instant, sink: &mut S);

    /// `n` bytes of [`Io::tx`] were accepted by the transport (ignored
    /// after the end).
    fn transmitted(&mut self, n: usize, now: Instant);

    /// Whether a message offered now could be taken (the connection is
    /// up and not closing).
    fn accepting(&self) -> bool;

    /// Offers one outbound message; see [`Offer`].
    fn offer(&mut self, message: &Message<'_>, now: Instant) -> Offer;

    /// Whether the engine learns of delivery (acknowledgements from the
    /// peer) and reports it through [`Engine::delivered`]: only such an
    /// engine can drain a durable backlog.
    const TRACKS: bool = false;

    /// Offers a message the runner keeps in a durable backlog until the
    /// peer acknowledges it: as [`Engine::offer`], carrying `id` to the
    /// consumer, with its acknowledgement reported by
    /// [`Engine::delivered`].
    fn offer_tracked(&mut self, message: &Message<'_>, id: Id, now: Instant) -> Offer {
        let _ = id;
        self.offer(message, now)
    }

    /// What became of tracked messages since the last call.
    fn delivered(&mut self) -> Delivery {
        Delivery::default()
    }

    /// When [`Engine::poll`] must next be called; `None`: not for time.
    fn poll_at(&self) -> Option<Instant>;

    /// Time has come: timers due at `now` fire (keep-alives go out,
    /// silent peers end the connection).
    fn poll(&mut self, now: Instant);

    /// The transport ended the connection.
    fn end(&mut self, why: IoEnd);

    /// The connection ended, and why; the runner closes the transport.
    fn ended(&self) -> Option<Self::End>;

    /// Whether the connection ended on purpose to be opened again at once
    /// (not a failure: no backoff, no count).
    fn reopen(&self) -> bool {
        false
    }

    /// Begins a graceful goodbye (a stop was asked for); [`Engine::closed`]
    /// says when it is done. By default there is nothing to say.
    fn close(&mut self, now: Instant) {
        let _ = now;
    }

    /// The goodbye is done: the runner may drop the transport.
    fn closed(&self) -> bool {
        true
    }

    /// The link is up: report it `online` with this sequence.
    fn online(&self) -> Option<u64>;

    /// The sequence this connection reports its end with (`offline`);
    /// `None`: it reports nothing (it never came far enough).
    fn link_seq(&self) -> Option<u64>;

    /// The sequence to report `connecting` with before the next attempt;
    /// `None`: the last one reported.
    fn next_seq(&self) -> Option<u64> {
        None
    }

    /// The link-state cause for an end.
    fn cause(end: Self::End) -> Cause;

    /// Counts an attempt that did not come up.
    fn failed(&mut self, why: Failure<Self::End>);

    /// Counts a connection that came up (`again`: not the first).
    fn came_up(&mut self, again: bool);

    /// Counts the end of a connection that was up (`None`: stopped on
    /// purpose).
    fn went_down(&mut self, why: Option<Self::End>);

    /// Counts one write to the transport.
    fn wrote(&mut self) {}

    /// Whether [`Engine::io`] may lend bytes to write (a cheap hint: a
    /// `true` may still lend none). By default `true`.
    fn has_output(&self) -> bool {
        true
    }

    /// Work waits for a call of [`Engine::received`] with no new bytes
    /// (received packets waiting for output room, a step that needs the
    /// sink): the runner makes that call after every event while this
    /// holds.
    fn pending(&self) -> bool {
        false
    }
}
