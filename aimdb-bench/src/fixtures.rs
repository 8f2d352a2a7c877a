//! Fixtures shared by b0, b1 and b2: tables of N routes over `Latest<u32>`
//! records with postcard payloads. Everything is leaked to `'static` (a
//! bench builds a handful of fixtures once), so fixtures can move into
//! spawned tasks.

use aimdb_core::codec::{Encode, Postcard};
use aimdb_core::inbound;
use aimdb_core::inbound::{Dispatch, KeyedLink};
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Keyed, Latest, Reader, Record};
use aimdb_core::sync::HostRawMutex;
use aimdb_core::sync::Readiness;

/// The mutex every fixture uses: the per-record host lock, as a threaded
/// host would (aimdb-core's "Threading model"). Before it, the fixtures
/// used `CriticalSectionRawMutex`, i.e. `critical-section`'s one global
/// std lock; `b1_outbound_wakeup`'s `host_lock` rows compare the two.
pub type Mx = HostRawMutex;
/// The record type every fixture uses.
pub type Rec = Record<Mx, Latest<u32>, 1>;
/// Route capacity of every fixture table, whatever its route count, so
/// only the route count varies between rows.
pub const CAP: usize = 4096;
/// Trie node capacity.
pub const NODES: usize = 3 * CAP + 2;
/// Readiness words for [`CAP`] routes.
pub const WORDS: usize = CAP / 32;
/// The inbound table type.
pub type InTable = Dispatch<'static, CAP, NODES>;
/// The outbound table type.
pub type OutTable = Routes<'static, &'static Readiness<WORDS>, WORDS, CAP>;
/// A static-topic, borrowed-encoder outbound link over [`Rec`].
pub type StaticLink = outbound::Link<Reader<'static, Mx, Latest<u32>, 1>, &'static str, Postcard>;

/// Leaks `v` for the rest of the process.
pub fn leak<T>(v: T) -> &'static mut T {
    Box::leak(Box::new(v))
}

/// `n` fresh records.
pub fn records(n: usize) -> &'static [Rec] {
    Box::leak(
        (0..n)
            .map(|_| Record::new("bench"))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// The postcard encoding of `v` (a non-zero payload).
pub fn payload(v: u32) -> Vec<u8> {
    let mut buf = [0u8; 8];
    let n = Postcard.encode(&v, &mut buf).expect("u32 fits");
    buf[..n].to_vec()
}

/// An inbound table and the topics that hit its routes.
pub struct Inbound {
    /// The table.
    pub dispatch: Box<InTable>,
    /// One topic per route, as a transport would hand it over.
    pub topics: Vec<Vec<u8>>,
    /// The records written (exact and pattern fixtures).
    pub records: &'static [Rec],
}

fn leak_str(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn build(b: aimdb_core::inbound::Builder<'static, CAP, NODES>) -> Box<InTable> {
    Box::new(b.build().unwrap_or_else(|e| panic!("fixture config: {e}")))
}

/// Route `i`'s topic level: `i` zero-padded to four digits, so every topic
/// of every fixture has the same length at every route count (1 to 4096
/// routes) and a comparison across route counts measures the table, not
/// the topic length (hashing and validation are linear in it).
fn id(i: usize) -> String {
    format!("{i:04}")
}

/// `n` exact routes `dev/{id}/value` (14 bytes each: the route number zero-padded to four digits).
pub fn inbound_exact(n: usize) -> Inbound {
    let records = records(n);
    let mut b = InTable::builder();
    let mut topics = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let t = leak_str(format!("dev/{}/value", id(i)));
        b.link(t, leak(inbound::Link::new(r, Postcard)));
        topics.push(t.as_bytes().to_vec());
    }
    Inbound {
        dispatch: build(b),
        topics,
        records,
    }
}

/// `n` pattern routes `site/{id}/+/temp`; topic `i` is `site/{id}/room/temp`
/// (each topic matches exactly one route).
pub fn inbound_pattern(n: usize) -> Inbound {
    let records = records(n);
    let mut b = InTable::builder();
    let mut topics = Vec::new();
    for (i, r) in records.iter().enumerate() {
        b.link(
            leak_str(format!("site/{}/+/temp", id(i))),
            leak(inbound::Link::new(r, Postcard)),
        );
        topics.push(format!("site/{}/room/temp", id(i)).into_bytes());
    }
    Inbound {
        dispatch: build(b),
        topics,
        records,
    }
}

/// A fixed-capacity keyed table.
pub type KeyTable<const K: usize> = Keyed<Mx, Latest<u32>, K, 1>;

/// `n` keyed routes `fleet/{id}/+/v` (key level 2), each into its own table
/// with room for `keys` keys; topic `i` uses key `dev1`, claimed by a first
/// dispatch so it is known.
pub fn inbound_keyed_known(n: usize) -> Inbound {
    let mut b = InTable::builder();
    let mut topics = Vec::new();
    for i in 0..n {
        let table: &'static KeyTable<4> = leak(Keyed::new("fleet"));
        b.link_keyed(
            leak_str(format!("fleet/{}/+/v", id(i))),
            2,
            leak(KeyedLink::new(table, Postcard)),
        );
        topics.push(format!("fleet/{}/dev1/v", id(i)).into_bytes());
    }
    let mut inbound = Inbound {
        dispatch: build(b),
        topics,
        records: &[],
    };
    let p = payload(1);
    for t in &inbound.topics {
        inbound
            .dispatch
            .dispatch(t, &p)
            .expect("claim the known key");
    }
    inbound
}

/// An outbound table over `n` [`Rec`] records with static topics
/// `out/{i}` and the shared scratch.
pub struct Outbound {
    /// The table.
    pub routes: Box<OutTable>,
    /// The records, route `i` reading record `i`.
    pub records: &'static [Rec],
}

/// `n` static-topic routes.
pub fn outbound_static(n: usize) -> Outbound {
    outbound_with(n, 0)
}

/// `n` static-topic routes, route 0 urgent (`Builder::link_urgent`).
pub fn outbound_urgent(n: usize) -> Outbound {
    outbound_with(n, 1)
}

/// `n` static-topic routes, the first `urgent` of them urgent.
fn outbound_with(n: usize, urgent: usize) -> Outbound {
    let records = records(n);
    let ready: &'static Readiness<WORDS> = leak(Readiness::new());
    let payload: &'static mut [u8] = leak([0x5au8; 64]);
    let topic: &'static mut [u8] = leak([0x5au8; 64]);
    let mut b = OutTable::builder(ready, payload).written_topics(topic);
    for (i, r) in records.iter().enumerate() {
        let link: &'static mut StaticLink = leak(outbound::Link::new(
            r.subscribe().expect("one reader"),
            leak_str(format!("out/{i}")),
            Postcard,
        ));
        if i < urgent {
            b.link_urgent(link);
        } else {
            b.link(link);
        }
    }
    let mut routes = Box::new(b.build().unwrap_or_else(|e| panic!("fixture config: {e}")));
    drain(&mut routes);
    Outbound { routes, records }
}

/// The static topics `out/{i}` of [`outbound_static`], for benches that
/// route the same records without a [`Routes`] table.
pub fn out_topics(n: usize) -> &'static [&'static str] {
    Box::leak(
        (0..n)
            .map(|i| leak_str(format!("out/{i}")))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// Pulls until nothing is ready (the build marks every route ready once).
pub fn drain(routes: &mut OutTable) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while routes.poll_next(&mut cx).is_ready() {}
}
