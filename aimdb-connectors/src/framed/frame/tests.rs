extern crate std;

use std::vec::Vec;

use proptest::prelude::*;

use super::*;

fn enc(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = std::vec![0u8; encoded_len(topic.len() + payload.len() + 10)];
    let n = encode(topic, payload, &mut out).unwrap();
    out.truncate(n);
    out
}

/// Plain (non-streaming) COBS decode, written independently of `Decoder`.
fn cobs_decode(bytes: &[u8]) -> Vec<u8> {
    assert_eq!(bytes.last(), Some(&0));
    let body = &bytes[..bytes.len() - 1];
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let code = body[i] as usize;
        out.extend_from_slice(&body[i + 1..i + code]);
        i += code;
        if code != 0xff && i < body.len() {
            out.push(0);
        }
    }
    out
}

/// Collects every frame (or error) out of `stream`, fed in `chunk`-sized
/// pieces.
type Decoded = Result<(Vec<u8>, Vec<u8>), FrameError>;

fn decode_all<const N: usize>(stream: &[u8], chunk: usize) -> Vec<Decoded> {
    let mut dec = Decoder::<N>::new();
    let mut got = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        let mut rest = piece;
        loop {
            match dec.push(rest) {
                Event::NeedMore => break,
                Event::Frame(f, n) => {
                    got.push(Ok((f.topic.to_vec(), f.payload.to_vec())));
                    rest = &rest[n..];
                }
                Event::Error(e, n) => {
                    got.push(Err(e));
                    rest = &rest[n..];
                }
            }
        }
    }
    got
}

#[test]
fn wire_bytes_are_cobs_of_postcard_tuple() {
    for payload in [
        &b""[..],
        b"\x00",
        b"abc\x00\x00def",
        &[7u8; 300],
        &[0u8; 300],
    ] {
        let wire = enc("sensors/t", payload);
        assert!(
            !wire[..wire.len() - 1].contains(&0),
            "delimiter inside frame"
        );
        let postcard = postcard::to_allocvec(&("sensors/t", payload)).unwrap();
        assert_eq!(cobs_decode(&wire), postcard);
        assert!(wire.len() <= encoded_len(postcard.len()));
    }
}

#[test]
fn block_boundaries_round_trip() {
    // Data lengths around the 254-byte COBS block, with and without zeros.
    for len in [
        0usize, 1, 250, 251, 252, 253, 254, 255, 506, 507, 508, 509, 1024,
    ] {
        for fill in [0u8, 0x5a] {
            let payload = std::vec![fill; len];
            let wire = enc("a", &payload);
            let got = decode_all::<MAX_FRAME>(&wire, wire.len());
            assert_eq!(
                got,
                std::vec![Ok((b"a".to_vec(), payload.clone()))],
                "len {len}"
            );
        }
    }
}

#[test]
fn any_chunking_gives_the_same_frames() {
    let mut stream = Vec::new();
    stream.extend(enc("a/b", b"one"));
    stream.extend(enc("c", &[0, 1, 0, 2]));
    stream.extend(enc("d/e/f", &[9u8; 400]));
    let whole = decode_all::<MAX_FRAME>(&stream, stream.len());
    assert_eq!(whole.len(), 3);
    for chunk in 1..40 {
        assert_eq!(
            decode_all::<MAX_FRAME>(&stream, chunk),
            whole,
            "chunk {chunk}"
        );
    }
}

#[test]
fn garbage_before_a_frame_costs_one_error_then_resyncs() {
    let mut stream = std::vec![0x13, 0x37, 0xff, 0x42, 0x00, 0x00];
    stream.extend(enc("t", b"ok"));
    let got = decode_all::<MAX_FRAME>(&stream, 3);
    assert_eq!(got.len(), 2);
    assert!(got[0].is_err());
    assert_eq!(got[1], Ok((b"t".to_vec(), b"ok".to_vec())));
}

#[test]
fn truncated_block_is_a_cobs_error() {
    // Code 5 promises four data bytes; the delimiter comes after two.
    let got = decode_all::<64>(&[5, 1, 2, 0], 4);
    assert_eq!(got, std::vec![Err(FrameError::Cobs)]);
}

#[test]
fn valid_cobs_without_a_tuple_is_malformed() {
    // Topic length 3 with one byte of topic.
    let got = decode_all::<64>(&[3, 3, b'a', 0], 4);
    assert_eq!(got, std::vec![Err(FrameError::Malformed)]);
    // A good tuple followed by one varint (an id needs two).
    let got = decode_all::<64>(&[6, 1, b'a', 1, b'b', b'x', 0], 8);
    assert_eq!(got, std::vec![Err(FrameError::Malformed)]);
    // ... or by three.
    let got = decode_all::<64>(&[8, 1, b'a', 1, b'b', 1, 2, 3, 0], 8);
    assert_eq!(got, std::vec![Err(FrameError::Malformed)]);
}

#[test]
fn a_tracked_frame_carries_its_id_after_the_tuple() {
    let id = Id { boot: 7, seq: 300 };
    let prev = Id { boot: 7, seq: 299 };
    let mut out = [0u8; 32];
    let mut dec = Decoder::<64>::new();
    // The same tuple as an untracked frame, then varint 7, varint 300,
    // and the one before: None, or Some(7, 299).
    let first = [1, b't', 2, 0, b'v', 7, 0xac, 0x02, 0];
    let next = [1, b't', 2, 0, b'v', 7, 0xac, 0x02, 1, 7, 0xab, 0x02];
    for (p, raw) in [(None, &first[..]), (Some(prev), &next[..])] {
        let n = encode_tracked("t", b"\x00v", id, p, &mut out).unwrap();
        assert_eq!(cobs_decode(&out[..n]), raw);
        match dec.push(&out[..n]) {
            Event::Frame(f, used) => {
                assert_eq!(
                    (f.topic, f.payload, f.tracked(), used),
                    (&b"t"[..], &b"\x00v"[..], Some(Tracked { id, prev: p }), n)
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let mut raw = first.to_vec();
    // An untracked frame has none.
    raw.truncate(5);
    let n = encode("t", b"\x00v", &mut out).unwrap();
    assert_eq!(cobs_decode(&out[..n]), raw);
    assert!(matches!(dec.push(&out[..n]), Event::Frame(f, _) if f.tracked().is_none()));
}

#[test]
fn oversized_frame_is_dropped_and_the_next_one_delivered() {
    let mut stream = enc("big", &[1u8; 100]);
    stream.extend(enc("s", b"x"));
    let got = decode_all::<32>(&stream, 7);
    assert_eq!(
        got,
        std::vec![
            Err(FrameError::Oversized),
            Ok((b"s".to_vec(), b"x".to_vec()))
        ]
    );
}

#[test]
fn too_small_output_is_an_error_at_every_length() {
    let full = enc("topic/x", &[0, 5, 0, 6, 7]);
    for len in 0..full.len() {
        let mut out = std::vec![0u8; len];
        assert_eq!(
            encode("topic/x", &[0, 5, 0, 6, 7], &mut out),
            Err(EncodeError::BufferTooSmall),
            "len {len}"
        );
    }
    let mut out = std::vec![0u8; full.len()];
    assert_eq!(
        encode("topic/x", &[0, 5, 0, 6, 7], &mut out),
        Ok(full.len())
    );
    assert_eq!(out, full);
}

#[test]
fn reset_drops_a_partial_frame() {
    let wire = enc("t", b"payload");
    let mut dec = Decoder::<64>::new();
    assert_eq!(dec.push(&wire[..4]), Event::NeedMore);
    dec.reset();
    assert!(
        matches!(dec.push(&wire), Event::Frame(f, n) if f.payload == b"payload" && n == wire.len())
    );
}

proptest! {
    #[test]
    fn a_frame_with_an_id_is_told_from_its_bytes(
        topic in "[a-z/]{0,300}",
        payload in proptest::collection::vec(any::<u8>(), 0..600),
        id in proptest::option::of((any::<u32>(), any::<u32>())),
        prev in proptest::option::of((any::<u32>(), any::<u32>())),
    ) {
        let mut out = std::vec![0u8; encoded_len(topic.len() + payload.len() + 32)];
        let prev = prev.map(|(boot, seq)| Id { boot, seq });
        let n = match id {
            None => encode(&topic, &payload, &mut out).unwrap(),
            Some((boot, seq)) => encode_tracked(&topic, &payload, Id { boot, seq }, prev, &mut out).unwrap(),
        };
        prop_assert_eq!(carries_id(&out[..n - 1]), id.is_some());
    }

    #[test]
    fn frames_survive_any_chunking(
        frames in proptest::collection::vec(("[a-z/]{0,20}", proptest::collection::vec(any::<u8>(), 0..600)), 1..6),
        chunk in 1usize..700,
    ) {
        let mut stream = Vec::new();
        for (t, p) in &frames {
            stream.extend(enc(t, p));
        }
        let want: Vec<_> = frames.iter().map(|(t, p)| Ok((t.as_bytes().to_vec(), p.clone()))).collect();
        prop_assert_eq!(decode_all::<MAX_FRAME>(&stream, chunk), want);
    }

    #[test]
    fn garbage_never_hides_the_next_frame(
        garbage in proptest::collection::vec(any::<u8>(), 0..2000),
        chunk in 1usize..100,
    ) {
        let mut stream = garbage.clone();
        stream.push(0);
        stream.extend(enc("after/garbage", b"\x00still here"));
        let got = decode_all::<256>(&stream, chunk);
        prop_assert_eq!(
            got.last().cloned(),
            Some(Ok((b"after/garbage".to_vec(), b"\x00still here".to_vec())))
        );
        // Every earlier event is one per delimiter in the garbage, at most.
        prop_assert!(got.len() <= garbage.iter().filter(|&&b| b == 0).count() + 2);
    }
}
