use std::string::String;
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use proptest::prelude::*;

use super::*;
use crate::codec::{Decode, DecodeError, Postcard};
use crate::record::{Keyed, Latest, Record, Ring, TryRecvError};

type Rec<T> = Record<NoopRawMutex, Latest<T>, 1>;

fn enc(v: u32) -> Vec<u8> {
    let mut buf = [0u8; 8];
    let n = crate::codec::Encode::encode(&Postcard, &v, &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn exact_routes_deliver_and_unknown_is_counted() {
    let a: Rec<u32> = Record::new("a");
    let b: Rec<u32> = Record::new("b");
    let (la, lb) = (Link::new(&a, Postcard), Link::new(&b, Postcard));
    let mut bld = LocalDispatch::<8, 4>::builder();
    bld.link("dev/a", &la).link("dev/b", &lb);
    let mut d = bld.build().unwrap();
    let (mut ra, mut rb) = (a.subscribe().unwrap(), b.subscribe().unwrap());
    assert_eq!(d.dispatch(b"dev/a", &enc(5)), Ok(1));
    assert_eq!(d.dispatch(b"dev/b", &enc(6)), Ok(1));
    assert_eq!((ra.try_recv(), rb.try_recv()), (Ok(5), Ok(6)));
    assert_eq!(
        d.dispatch(b"dev/c", &enc(7)),
        Err(DispatchError::UnknownTopic)
    );
    assert_eq!(d.stats().unknown_topic, 1);
    assert_eq!(d.stats().delivered, 2);
    assert_eq!(d.filters().collect::<Vec<_>>(), ["dev/a", "dev/b"]);
}

#[test]
fn many_exact_routes_each_reach_their_record() {
    let recs: Vec<Rec<u32>> = (0..300).map(|_| Record::new("r")).collect();
    let names: Vec<String> = (0..300).map(|i| std::format!("dev/{i}/value")).collect();
    let links: Vec<_> = recs.iter().map(|r| Link::new(r, Postcard)).collect();
    let mut bld = LocalDispatch::<300, 1>::builder();
    for (n, l) in names.iter().zip(&links) {
        bld.link(n, l);
    }
    let mut d = bld.build().unwrap();
    let mut readers: Vec<_> = recs.iter().map(|r| r.subscribe().unwrap()).collect();
    for (i, n) in names.iter().enumerate() {
        assert_eq!(d.dispatch(n.as_bytes(), &enc(i as u32)), Ok(1));
    }
    for (i, r) in readers.iter_mut().enumerate() {
        assert_eq!(r.try_recv(), Ok(i as u32));
    }
}

#[test]
fn overlapping_patterns_all_receive_like_a_broker() {
    let recs: Vec<Rec<u32>> = (0..5).map(|_| Record::new("r")).collect();
    let filters = [
        "sensors/+/temp",
        "sensors/#",
        "#",
        "sensors/kitchen/temp",
        "+/+/hum",
    ];
    let links: Vec<_> = recs.iter().map(|r| Link::new(r, Postcard)).collect();
    let mut bld = LocalDispatch::<8, 16>::builder();
    for (f, l) in filters.iter().zip(&links) {
        bld.link(f, l);
    }
    let mut d = bld.build().unwrap();
    let mut rs: Vec<_> = recs.iter().map(|r| r.subscribe().unwrap()).collect();
    assert_eq!(d.dispatch(b"sensors/kitchen/temp", &enc(1)), Ok(4));
    let got: Vec<_> = rs.iter_mut().map(|r| r.try_recv().ok()).collect();
    assert_eq!(got, [Some(1), Some(1), Some(1), Some(1), None]);
    assert_eq!(
        d.dispatch(b"sensors", &enc(2)),
        Ok(2),
        "`sensors/#` matches its parent"
    );
    let got: Vec<_> = rs.iter_mut().map(|r| r.try_recv().ok()).collect();
    assert_eq!(got, [None, Some(2), Some(2), None, None]);
}

/// Found by `fuzz/` (target `dispatch`): when one matching link rejects a
/// frame and another accepts it, the accepted write was made but was not
/// counted in `delivered`.
#[test]
fn partial_delivery_counts_the_writes_made() {
    let wide: Record<NoopRawMutex, Latest<u32>, 1> = Record::new("wide");
    let flag: Rec<bool> = Record::new("flag");
    let (lw, lf) = (Link::new(&wide, Postcard), Link::new(&flag, Postcard));
    let mut bld = LocalDispatch::<4, 8>::builder();
    bld.link("sensors/#", &lw).link("+/status", &lf);
    let mut d = bld.build().unwrap();
    let (mut rw, mut rf) = (wide.subscribe().unwrap(), flag.subscribe().unwrap());
    // A `u32` (85) but not a `bool`: one link writes, the other rejects.
    let got = d.dispatch(b"sensors/status", &[0xd5, 0]);
    assert_eq!(
        got,
        Err(DispatchError::MalformedPayload(DecodeError::Malformed))
    );
    assert_eq!(
        (rw.try_recv(), rf.try_recv()),
        (Ok(85), Err(TryRecvError::Empty))
    );
    let s = d.stats();
    assert_eq!(
        (s.delivered, s.malformed_payload, s.total_rejected()),
        (1, 1, 1)
    );
}

#[test]
fn system_topics_skip_leading_wildcards() {
    let all: Rec<u32> = Record::new("all");
    let plus: Rec<u32> = Record::new("plus");
    let sys: Rec<u32> = Record::new("sys");
    let (l1, l2, l3) = (
        Link::new(&all, Postcard),
        Link::new(&plus, Postcard),
        Link::new(&sys, Postcard),
    );
    let mut bld = LocalDispatch::<4, 16>::builder();
    bld.link("#", &l1)
        .link("+/monitor/Clients", &l2)
        .link("$SYS/#", &l3);
    let mut d = bld.build().unwrap();
    let (mut r1, mut r2, mut r3) = (
        all.subscribe().unwrap(),
        plus.subscribe().unwrap(),
        sys.subscribe().unwrap(),
    );
    assert_eq!(d.dispatch(b"$SYS/monitor/Clients", &enc(9)), Ok(1));
    assert_eq!(r1.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(r2.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(r3.try_recv(), Ok(9));
    assert_eq!(d.dispatch(b"x/monitor/Clients", &enc(3)), Ok(2));
}

#[test]
fn keyed_routes_claim_slots_until_full() {
    let table: Keyed<NoopRawMutex, Latest<u32>, 2, 1> = Keyed::new("temp");
    let link = KeyedLink::new(&table, Postcard);
    let mut bld = LocalDispatch::<2, 8>::builder();
    bld.link_keyed("sensors/+/temp", 1, &link);
    let mut d = bld.build().unwrap();
    assert_eq!(d.dispatch(b"sensors/a/temp", &enc(1)), Ok(1));
    assert_eq!(d.dispatch(b"sensors/b/temp", &enc(2)), Ok(1));
    assert_eq!(
        d.dispatch(b"sensors/a/temp", &enc(3)),
        Ok(1),
        "known key reuses its slot"
    );
    assert_eq!(
        d.dispatch(b"sensors/c/temp", &enc(4)),
        Err(DispatchError::KeyTableFull)
    );
    assert_eq!(d.stats().key_table_full, 1);
    assert_eq!(table.len(), 2);
    let mut ra = table.get("a").unwrap().subscribe().unwrap();
    assert_eq!(ra.try_recv(), Ok(3));
    assert!(table.get("c").is_none());
    // Still delivering after the rejection.
    assert_eq!(d.dispatch(b"sensors/b/temp", &enc(5)), Ok(1));
    let long = std::format!(
        "sensors/{}/temp",
        "k".repeat(crate::record::KEY_MAX_LEN + 1)
    );
    assert_eq!(
        d.dispatch(long.as_bytes(), &enc(1)),
        Err(DispatchError::KeyInvalid)
    );
    assert_eq!(
        d.dispatch(b"sensors//temp", &enc(1)),
        Err(DispatchError::KeyInvalid)
    );
    assert_eq!(d.stats().key_invalid, 2);
}

#[test]
fn malformed_payload_does_not_claim_a_key() {
    let table: Keyed<NoopRawMutex, Latest<u32>, 4, 1> = Keyed::new("t");
    let link = KeyedLink::new(&table, Postcard);
    let mut bld = LocalDispatch::<2, 8>::builder();
    bld.link_keyed("s/+", 1, &link);
    let mut d = bld.build().unwrap();
    assert!(matches!(
        d.dispatch(b"s/x", &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        Err(DispatchError::MalformedPayload(_))
    ));
    assert!(table.is_empty());
}

/// Every bad-input kind: the error, its counter, the record unchanged, and
/// the next good frame still delivered.
#[test]
fn every_bad_input_kind_is_typed_counted_and_harmless() {
    let rec: Record<NoopRawMutex, Ring<u32, 8>, 1> = Record::new("r");
    let link = Link::new(&rec, Postcard).with_max_payload(4);
    let table: Keyed<NoopRawMutex, Latest<u32>, 1, 1> = Keyed::new("k");
    let klink = KeyedLink::new(&table, Postcard);
    let mut bld = LocalDispatch::<4, 8>::builder();
    bld.link("good", &link).link_keyed("k/+", 1, &klink);
    let mut d = bld.build().unwrap();
    assert_eq!(d.dispatch(b"k/first", &enc(1)), Ok(1));
    let mut r = rec.subscribe().unwrap();
    let long_topic = "t".repeat(crate::topic::MAX_TOPIC_LEN + 1);
    let deep_topic = "a/".repeat(crate::topic::MAX_LEVELS) + "a";
    let cases: Vec<(&[u8], Vec<u8>, DispatchError)> = std::vec![
        (b"nope", enc(1), DispatchError::UnknownTopic),
        (b"go\xffod", enc(1), DispatchError::TopicNotUtf8),
        (b"", enc(1), DispatchError::InvalidTopic),
        (b"go\0od", enc(1), DispatchError::InvalidTopic),
        (b"good/+", enc(1), DispatchError::WildcardInTopic),
        (b"#", enc(1), DispatchError::WildcardInTopic),
        (long_topic.as_bytes(), enc(1), DispatchError::TopicTooLong),
        (deep_topic.as_bytes(), enc(1), DispatchError::TopicTooLong),
        (
            b"good",
            std::vec![0xff; 3],
            DispatchError::MalformedPayload(crate::codec::DecodeError::Truncated)
        ),
        (
            b"good",
            std::vec![1, 2],
            DispatchError::MalformedPayload(crate::codec::DecodeError::TrailingBytes)
        ),
        (b"good", std::vec![1; 5], DispatchError::PayloadTooLarge),
        (b"k/second", enc(1), DispatchError::KeyTableFull),
        (b"k/", enc(1), DispatchError::KeyInvalid),
    ];
    for (i, (topic, payload, want)) in cases.iter().enumerate() {
        let before = d.stats().rejected(*want);
        let writes = (rec.writes(), table.get("first").unwrap().writes());
        assert_eq!(d.dispatch(topic, payload), Err(*want), "case {i}");
        assert_eq!(d.stats().rejected(*want), before + 1, "case {i} counted");
        assert_eq!(
            r.try_recv(),
            Err(TryRecvError::Empty),
            "case {i}: record unchanged"
        );
        assert_eq!((rec.writes(), table.get("first").unwrap().writes()), writes);
        assert_eq!(
            d.dispatch(b"good", &enc(i as u32)),
            Ok(1),
            "next good frame after case {i}"
        );
        assert_eq!(r.try_recv(), Ok(i as u32));
    }
    assert_eq!(d.stats().total_rejected(), cases.len() as u32);
    assert_eq!(table.len(), 1);
    // The malformed-payload counter covers every decode failure kind.
    assert_eq!(d.stats().malformed_payload, 2);
}

#[test]
fn configuration_errors_are_all_reported() {
    let a: Rec<u32> = Record::new("a");
    let la = Link::new(&a, Postcard);
    let mut bld = LocalDispatch::<2, 4>::builder();
    bld.link("ok/1", &la)
        .link("ok/1", &la)
        .link("bad/#/x", &la)
        .link_keyed("k/+", 3, &la)
        .link_keyed("k/x", 1, &la)
        .link("ok/2", &la)
        .link("ok/3", &la);
    let errs = bld.build().unwrap_err();
    let got: Vec<_> = errs.issues.iter().map(|i| (i.index, i.error)).collect();
    assert_eq!(
        got,
        [
            (1, ConfigError::Duplicate),
            (2, ConfigError::InvalidFilter(TopicError::HashNotLast)),
            (3, ConfigError::KeyLevelOutOfRange),
            (4, ConfigError::KeyLevelNotWildcard),
            (6, ConfigError::TooManyRoutes),
        ]
    );
    assert_eq!(errs.total, 5);
}

#[test]
fn filters_are_listed_once_each() {
    let a: Rec<u32> = Record::new("a");
    let b: Rec<u32> = Record::new("b");
    let (la, lb) = (Link::new(&a, Postcard), Link::new(&b, Postcard));
    let mut bld = LocalDispatch::<8, 8>::builder();
    bld.link("x/+", &la)
        .link("x/+", &lb)
        .link("y", &la)
        .link("y", &lb)
        .link("z/#", &la);
    let d = bld.build().unwrap();
    assert_eq!(d.filters().collect::<Vec<_>>(), ["x/+", "y", "z/#"]);
}

#[test]
fn too_many_nodes_is_a_config_error() {
    let a: Rec<u32> = Record::new("a");
    let la = Link::new(&a, Postcard);
    let mut bld = LocalDispatch::<4, 3>::builder();
    bld.link("a/b/+", &la);
    assert_eq!(
        bld.build().unwrap_err().issues[0].error,
        ConfigError::TooManyNodes
    );
}

/// A target that records which filter index received each frame.
struct Probe {
    id: usize,
    hits: std::cell::RefCell<Vec<usize>>,
}
impl Route for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }
    fn max_payload(&self) -> usize {
        16
    }
    fn deliver(&self, _: Option<&str>, p: &[u8]) -> Result<(), DispatchError> {
        let _: u8 = Postcard
            .decode(p)
            .map_err(DispatchError::MalformedPayload)?;
        self.hits.borrow_mut().push(self.id);
        Ok(())
    }
}

fn level() -> impl Strategy<Value = String> {
    prop_oneof![Just("a"), Just("b"), Just(""), Just("$s"), Just("cc")].prop_map(String::from)
}
fn topic() -> impl Strategy<Value = String> {
    prop::collection::vec(level(), 1..5).prop_map(|v| v.join("/"))
}
fn filter() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop_oneof![level(), Just(String::from("+"))], 1..5),
        any::<bool>(),
    )
        .prop_map(|(v, hash)| {
            let mut f = v.join("/");
            if hash {
                f.push_str("/#");
            }
            f
        })
        .prop_filter("filters are non-empty", |f| !f.is_empty())
}

/// The naive reference: MQTT §4.7 straight from the spec text.
fn reference(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let f: Vec<&str> = filter.split('/').collect();
    let t: Vec<&str> = topic.split('/').collect();
    for (i, fl) in f.iter().enumerate() {
        if *fl == "#" {
            return true;
        }
        match t.get(i) {
            Some(tl) if *fl == "+" || fl == tl => {}
            _ => return false,
        }
    }
    f.len() == t.len()
}

proptest! {
    #[test]
    fn dispatch_agrees_with_reference(
        filters in prop::collection::vec(prop_oneof![filter(), Just(String::from("#"))], 1..12),
        topics in prop::collection::vec(topic(), 1..12),
    ) {
        let mut uniq: Vec<String> = Vec::new();
        for f in filters {
            if !uniq.contains(&f) {
                uniq.push(f);
            }
        }
        let probes: Vec<Probe> = (0..uniq.len())
            .map(|id| Probe { id, hits: Default::default() })
            .collect();
        let mut bld = LocalDispatch::<16, 64>::builder();
        for (f, p) in uniq.iter().zip(&probes) {
            bld.link(f, p);
        }
        let mut d = bld.build().unwrap();
        for t in &topics {
            let want: Vec<usize> = (0..uniq.len())
                .filter(|&i| !t.is_empty() && reference(&uniq[i], t))
                .collect();
            for p in &probes {
                p.hits.borrow_mut().clear();
            }
            let r = d.dispatch(t.as_bytes(), &[7]);
            let mut got: Vec<usize> = probes.iter().flat_map(|p| p.hits.borrow().clone()).collect();
            got.sort();
            prop_assert_eq!(&got, &want, "topic {:?} filters {:?}", t, uniq);
            if t.is_empty() {
                prop_assert_eq!(r, Err(DispatchError::InvalidTopic));
            } else if want.is_empty() {
                prop_assert_eq!(r, Err(DispatchError::UnknownTopic));
            } else {
                prop_assert_eq!(r, Ok(want.len()));
            }
        }
    }
}

#[cfg(feature = "alloc")]
#[test]
fn growable_keyed_table_claims_on_first_sighting() {
    use crate::record::KeyedVec;
    let table: KeyedVec<NoopRawMutex, Latest<u32>, 1> = KeyedVec::with_capacity("t", 4);
    let link = KeyedLink::new(&table, Postcard);
    let mut bld = LocalDispatch::<2, 8>::builder();
    bld.link_keyed("dev/+/v", 1, &link);
    let mut d = bld.build().unwrap();
    for (i, k) in ["a", "b", "a", "c", "b"].iter().enumerate() {
        let t = std::format!("dev/{k}/v");
        assert_eq!(d.dispatch(t.as_bytes(), &enc(i as u32)), Ok(1));
    }
    assert_eq!(table.len(), 3);
    let b = table.get("b").unwrap();
    assert_eq!(b.key(), "b");
    assert_eq!(b.record().subscribe().unwrap().try_recv(), Ok(4));
}

#[test]
fn retained_messages_skip_mailbox_links_unless_told_otherwise() {
    use crate::record::Mailbox;
    let state: Rec<u32> = Record::new("state");
    let cmd: Record<NoopRawMutex, Mailbox<u32>, 1> = Record::new("cmd");
    let forced: Record<NoopRawMutex, Mailbox<u32>, 1> = Record::new("forced");
    let (ls, lc) = (Link::new(&state, Postcard), Link::new(&cmd, Postcard));
    let lf = Link::new(&forced, Postcard).with_retained(true);
    assert!(Route::apply_retained(&ls));
    assert!(!Route::apply_retained(&lc));
    assert!(Route::apply_retained(&lf));
    let mut bld = LocalDispatch::<8, 8>::builder();
    bld.link("dev/state", &ls)
        .link("dev/cmd", &lc)
        .link("dev/+", &lc)
        .link("forced/cmd", &lf);
    let mut d = bld.build().unwrap();
    assert!(d.wants_retained("dev/state"));
    assert!(!d.wants_retained("dev/cmd"));
    assert!(d.wants_retained("forced/cmd"));
    let (mut rs, mut rc, mut rf) = (
        state.subscribe().unwrap(),
        cmd.subscribe().unwrap(),
        forced.subscribe().unwrap(),
    );
    assert_eq!(d.dispatch_retained(b"dev/state", &enc(1)), Ok(1));
    assert_eq!(rs.try_recv(), Ok(1), "state applies retained messages");
    assert_eq!(d.dispatch_retained(b"dev/cmd", &enc(2)), Ok(0));
    assert_eq!(
        rc.try_recv(),
        Err(TryRecvError::Empty),
        "an old command is not run"
    );
    // `dev/+` matched both topics: 1 skip for dev/state, 2 for dev/cmd.
    assert_eq!(d.stats().retained_ignored, 3);
    assert_eq!(d.stats().total_rejected(), 0, "skipping is not rejecting");
    assert_eq!(d.dispatch_retained(b"forced/cmd", &enc(3)), Ok(1));
    assert_eq!(rf.try_recv(), Ok(3));
    // Not retained: delivered as always.
    assert_eq!(d.dispatch(b"dev/cmd", &enc(4)), Ok(2));
    assert_eq!(rc.try_recv(), Ok(4));
    // dev/state matches `dev/+` too: the state link takes it, the command
    // link skips it.
    assert_eq!(d.dispatch_retained(b"dev/state", &enc(5)), Ok(1));
    assert_eq!(rs.try_recv(), Ok(5));
    assert_eq!(rc.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn counters_mirror_the_table_for_other_readers() {
    static SHARED: Counters = Counters::new();
    let a: Rec<u32> = Record::new("a");
    let la = Link::new(&a, Postcard).with_max_payload(4);
    let mut bld = LocalDispatch::<4, 4>::builder();
    bld.link("dev/a", &la).counters(&SHARED);
    let mut d = bld.build().unwrap();
    assert_eq!(d.dispatch(b"dev/a", &enc(5)), Ok(1));
    assert!(d.dispatch(b"dev/b", &enc(5)).is_err());
    assert!(d.dispatch(b"dev/a", &[0xff; 8]).is_err());
    assert!(d.dispatch(b"dev/a", &[0xff, 0xff, 0xff]).is_err());
    assert_eq!(SHARED.snapshot(), *d.stats());
    let s = SHARED.snapshot();
    assert_eq!(
        (
            s.delivered,
            s.unknown_topic,
            s.payload_too_large,
            s.malformed_payload
        ),
        (1, 1, 1, 1)
    );
}

#[test]
fn next_filter_enumerates_each_filter_once_in_order() {
    use crate::connector::FrameSink;
    let a: Rec<u32> = Record::new("a");
    let b: Rec<u32> = Record::new("b");
    let (la, lb) = (Link::new(&a, Postcard), Link::new(&b, Postcard));
    let mut bld = LocalDispatch::<8, 8>::builder();
    bld.link("dev/a", &la)
        .link("dev/+", &la)
        .link("dev/a", &lb) // the same filter again: enumerated once
        .link("logs/#", &lb);
    let d = bld.build().unwrap();
    let mut got = Vec::new();
    let mut from = 0;
    while let Some((next, f)) = d.next_filter(from) {
        assert!(next > from, "always moves forward");
        got.push(f);
        from = next;
    }
    assert_eq!(got, ["dev/a", "dev/+", "logs/#"]);
    assert_eq!(got, d.filters().collect::<Vec<_>>());
}

#[test]
fn configuration_errors_display_their_reasons() {
    let a: Rec<u32> = Record::new("a");
    let la = Link::new(&a, Postcard);
    let mut bld = LocalDispatch::<1, 2>::builder();
    bld.link("bad/#/filter", &la)
        .link("x/y", &la)
        .link("z", &la);
    let e = bld.build().unwrap_err();
    let text = std::format!("{e}");
    // The bad filter takes no slot: the third link is the one too many.
    assert!(text.starts_with("2 configuration error(s)"), "{text}");
    assert!(
        text.contains("link 0 `bad/#/filter`: invalid filter"),
        "{text}"
    );
    assert!(text.contains("more routes than the table's N"), "{text}");
    assert!(!text.contains("InvalidFilter"), "no Debug names: {text}");
}

#[test]
fn nodes_for_sizes_a_table_that_builds_and_one_less_does_not() {
    const FILTERS: [&str; 3] = ["a/+/b", "c/#", "exact/topic"];
    const NODES: usize = nodes_for(&FILTERS);
    assert_eq!(NODES, 1 + 3 + 2, "the root, three levels, two levels");
    let a: Rec<u32> = Record::new("a");
    let la = Link::new(&a, Postcard);
    let mut ok = LocalDispatch::<3, NODES>::builder();
    let mut short = LocalDispatch::<3, { NODES - 1 }>::builder();
    for f in FILTERS {
        ok.link(f, &la);
        short.link(f, &la);
    }
    assert!(ok.build().is_ok());
    let e = short.build().unwrap_err();
    assert_eq!(e.issues[0].error, ConfigError::TooManyNodes);
}
