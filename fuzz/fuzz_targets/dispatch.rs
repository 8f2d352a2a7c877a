//! `InboundDispatch::dispatch` over a fixed route table (exact, pattern,
//! overlapping, `$`, size-limited and keyed routes) with arbitrary topic and
//! payload bytes, frame after frame.
//!
//! Invariants (see `aimdb_fuzz::fixture`): the result matches the reference
//! model; a rejection bumps exactly its own counter by one; `delivered`
//! counts the writes made; no record changes unless a route accepted the
//! frame, and then it holds exactly the decoded value; keyed tables claim
//! exactly the keys the model claims; a good frame after bad ones lands.
#![no_main]

use aimdb_fuzz::fixture::{Harness, Links, Records};
use aimdb_fuzz::TopicIn;
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Frame {
    topic: TopicIn,
    payload: Vec<u8>,
}

fuzz_target!(|frames: Vec<Frame>| {
    let records = Records::new();
    let links = Links::new(&records);
    let mut table = links.table();
    let mut h = Harness::new(&records);
    for f in frames.iter().take(64) {
        let _ = h.step(&mut table, &f.topic.bytes(), &f.payload);
    }
    // Whatever came before, a good frame is still delivered.
    assert_eq!(h.step(&mut table, b"cmd/led", &[1]), Ok(1));
});
