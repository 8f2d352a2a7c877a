//! The COBS/postcard frame codec and the framed connector's read path.
//!
//! Invariants:
//! - `encode` of any (topic, payload) fits `encoded_len`, ends in its only
//!   `0x00`, is exactly COBS (reference decoder) of postcard `(topic,
//!   payload)`, and reports `BufferTooSmall` one byte short;
//! - the `Decoder` over garbage, `0x00`, then that frame, fed in arbitrary
//!   chunks: consumes every byte, each `push` takes 1..=len bytes, produces
//!   the same events as byte-at-a-time feeding, and the last event is that
//!   frame (or `Oversized` if it exceeds the buffer), ending on the last
//!   byte;
//! - `Framed::run` over a loopback pair fed the same stream plus a good
//!   frame ends with `Closed`, counts every byte, classifies exactly the
//!   frames the decoder sees, agrees with the dispatcher's counters, and
//!   the good frame lands in its record.
#![no_main]

use aimdb_connectors::framed::frame::{
    encode, encoded_len, Decoder, EncodeError, Event, FrameError,
};
use aimdb_connectors::framed::{Error, Framed, Counters};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::{DecodeError, Postcard};
use aimdb_core::inbound::{Link, LocalDispatch};
use aimdb_core::outbound::LocalRoutes;
use aimdb_core::record::{Record, Ring, TryRecvError};
use aimdb_core::sync::Readiness;
use arbitrary::Arbitrary;
use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use embedded_io_async::Write;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    garbage: Vec<u8>,
    topic: String,
    payload: Vec<u8>,
    /// Chunk sizes for feeding the decoder (cycled; 0 counts as 1).
    chunks: Vec<u8>,
}

/// Plain COBS decoding of one frame (without its delimiter).
fn cobs_decode(mut wire: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((&code, rest)) = wire.split_first() {
        let n = (code as usize).checked_sub(1)?;
        if code == 0 || n > rest.len() {
            return None;
        }
        out.extend_from_slice(&rest[..n]);
        wire = &rest[n..];
        if code != 0xff && !wire.is_empty() {
            out.push(0);
        }
    }
    Some(out)
}

#[derive(Debug, PartialEq, Eq)]
enum Ev {
    /// Topic, payload, whether it carries ids (tracked or an ack).
    Frame(Vec<u8>, Vec<u8>, bool),
    Error(FrameError),
}

/// Feeds `stream` in pieces of `sizes` (cycled) and records the events and
/// the offset each ended at.
fn decode_all<const N: usize>(stream: &[u8], sizes: &[u8]) -> Vec<(Ev, usize)> {
    let mut d = Decoder::<N>::new();
    let mut events = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < stream.len() {
        let size = sizes
            .get(k % sizes.len().max(1))
            .map_or(1, |&s| s.max(1) as usize);
        k += 1;
        let end = (pos + size).min(stream.len());
        let mut piece = &stream[pos..end];
        while !piece.is_empty() {
            let (ev, used) = match d.push(piece) {
                Event::NeedMore => (None, piece.len()),
                Event::Frame(f, used) => {
                    (Some(Ev::Frame(f.topic.to_vec(), f.payload.to_vec(), f.tracked().is_some())), used)
                }
                Event::Error(e, used) => (Some(Ev::Error(e)), used),
            };
            assert!(
                used >= 1 && used <= piece.len(),
                "push took {used} of {}",
                piece.len()
            );
            pos += used;
            piece = &piece[used..];
            if let Some(ev) = ev {
                assert_eq!(stream[pos - 1], 0, "events end on a delimiter");
                events.push((ev, pos));
            }
        }
    }
    assert_eq!(pos, stream.len());
    events
}

fn check_decoder<const N: usize>(
    stream: &[u8],
    sizes: &[u8],
    topic: &str,
    payload: &[u8],
    frame_len: usize,
) {
    let events = decode_all::<N>(stream, sizes);
    assert_eq!(
        events,
        decode_all::<N>(stream, &[1]),
        "chunking changed the events"
    );
    let zeros = stream.iter().filter(|&&b| b == 0).count();
    assert!(events.len() <= zeros);
    let want = if frame_len <= N {
        Ev::Frame(topic.as_bytes().to_vec(), payload.to_vec(), false)
    } else {
        Ev::Error(FrameError::Oversized)
    };
    assert_eq!(
        events.last(),
        Some(&(want, stream.len())),
        "the frame after the garbage"
    );
}

fn check_encode(topic: &str, payload: &[u8]) -> Vec<u8> {
    let plain = postcard::to_allocvec(&(topic, payload)).unwrap();
    let mut buf = vec![0xaa; encoded_len(plain.len())];
    let n = encode(topic, payload, &mut buf).expect("encoded_len is enough");
    let wire = &buf[..n];
    assert_eq!(
        wire.iter().position(|&b| b == 0),
        Some(n - 1),
        "one delimiter, last"
    );
    assert_eq!(
        cobs_decode(&wire[..n - 1]).as_deref(),
        Some(&plain[..]),
        "COBS of postcard"
    );
    let mut short = vec![0u8; n - 1];
    assert_eq!(
        encode(topic, payload, &mut short),
        Err(EncodeError::BufferTooSmall)
    );
    wire.to_vec()
}

fn raw(p: &[u8]) -> Result<heapless::Vec<u8, 64>, DecodeError> {
    heapless::Vec::from_slice(p).map_err(|_| DecodeError::Malformed)
}

const RX: usize = 128;

fn check_framed(garbage: &[u8], payload: &[u8]) {
    let good = check_encode("fz/raw", payload);
    let mut stream = garbage.to_vec();
    stream.push(0);
    stream.extend_from_slice(&good);

    let record: Record<NoopRawMutex, Ring<heapless::Vec<u8, 64>, 4>, 1> = Record::new("raw");
    let mut reader = record.subscribe().unwrap();
    let decoder: fn(&[u8]) -> Result<heapless::Vec<u8, 64>, DecodeError> = raw;
    let link = Link::new(&record, decoder).with_max_payload(64);
    // Pattern routes too, so the trie path sees these topics.
    let other: Record<NoopRawMutex, Ring<u8, 1>, 1> = Record::new("other");
    let other_link = Link::new(&other, Postcard);
    let mut b = LocalDispatch::<4, 8>::builder();
    b.link("fz/raw", &link).link("+/x/#", &other_link);
    let mut dispatch = b.build().unwrap();
    static READY: Readiness<1> = Readiness::new();
    let (mut scratch, mut topic) = ([0u8; 8], [0u8; 8]);
    let mut routes = LocalRoutes::<_, 1, 1>::builder(&READY, &mut scratch).written_topics(&mut topic)
        .build()
        .unwrap();

    let pair = Pair::<NoopRawMutex, 8192>::new();
    let ((_, mut peer_tx), (rx, tx)) = (pair.a(), pair.b());
    let wrote = aimdb_fuzz::poll_bounded(peer_tx.write_all(&stream), 1).expect("fits the pipe");
    assert_eq!(wrote, Ok(()));
    pair.a_to_b().close();

    let stats = Counters::new();
    let mut framed = Framed::<RX, 64>::with_sizes(&stats);
    let end = aimdb_fuzz::poll_bounded(framed.run(rx, tx, &mut dispatch, &mut routes), 10_000);
    assert_eq!(end, Some(Error::Closed));

    let s = stats.snapshot();
    let events = decode_all::<RX>(&stream, &[64]);
    // A frame with an empty topic is a keep-alive: absorbed by the
    // connector, never handed over; counted as one when its payload is
    // exactly a postcard varint (the sender's sequence), else malformed.
    let keepalive = |t: &[u8], p: &[u8]| -> Option<bool> {
        t.is_empty()
            .then(|| matches!(postcard::take_from_bytes::<u64>(p), Ok((_, []))))
    };
    // Frames with ids (tracked frames, acknowledgements) are the
    // engine's unit tests' to check: their counters depend on the order
    // they came in.
    if events.iter().any(|(e, _)| matches!(e, Ev::Frame(.., true))) {
        return;
    }
    let frames = events
        .iter()
        .filter(|(e, _)| matches!(e, Ev::Frame(t, p, _) if keepalive(t, p).is_none()))
        .count() as u32;
    let beats = |good: bool| {
        events
            .iter()
            .filter(|(e, _)| matches!(e, Ev::Frame(t, p, _) if keepalive(t, p) == Some(good)))
            .count() as u32
    };
    let count = |k: FrameError| events.iter().filter(|(e, _)| *e == Ev::Error(k)).count() as u32;
    assert_eq!(s.bytes_in, stream.len() as u32);
    assert_eq!(s.received, frames, "every decoded frame is handed over: {s:?}");
    assert_eq!(s.heartbeats_received, beats(true), "{s:?}");
    assert!(s.rejected <= s.received, "{s:?}");
    assert_eq!(s.oversized, count(FrameError::Oversized), "{s:?}");
    assert_eq!(s.cobs_errors, count(FrameError::Cobs), "{s:?}");
    assert_eq!(
        s.malformed,
        count(FrameError::Malformed) + beats(false),
        "{s:?}"
    );
    assert_eq!((s.sent, s.bytes_out), (0, 0));
    let d = dispatch.stats();
    assert_eq!(s.rejected, d.total_rejected(), "{s:?} {d:?}");
    assert_eq!(
        s.received - s.rejected,
        d.delivered,
        "one link per topic here; {s:?} {d:?}"
    );
    assert_eq!(u64::from(d.delivered), record.writes() + other.writes());

    // The good frame came last: the record's newest value, if it fits.
    let plain = postcard::to_allocvec(&("fz/raw", payload)).unwrap();
    let fits = payload.len() <= 64 && plain.len() <= RX;
    let mut last = None;
    loop {
        match reader.try_recv() {
            Ok(v) => last = Some(v),
            Err(TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    if fits {
        assert_eq!(last.as_deref(), Some(payload), "the good frame lands");
    }
}

fuzz_target!(|input: Input| {
    let wire = check_encode(&input.topic, &input.payload);
    let mut stream = input.garbage.clone();
    stream.push(0);
    stream.extend_from_slice(&wire);
    let frame_len = postcard::to_allocvec(&(input.topic.as_str(), input.payload.as_slice()))
        .unwrap()
        .len();
    check_decoder::<{ aimdb_connectors::framed::MAX_FRAME }>(
        &stream,
        &input.chunks,
        &input.topic,
        &input.payload,
        frame_len,
    );
    check_decoder::<64>(
        &stream,
        &input.chunks,
        &input.topic,
        &input.payload,
        frame_len,
    );
    if input.garbage.len() <= 4096 && input.payload.len() <= 2048 {
        check_framed(&input.garbage, &input.payload);
    }
});
