//! A fixed inbound route table over records of every buffer kind, and a
//! reference model of what `Dispatch::dispatch` must do to them.
//!
//! The table has exact routes (one filter linked twice), overlapping
//! patterns, a `$`-topic filter, a size-limited route and two keyed tables.
//! [`Harness::step`] dispatches one frame and checks, against the model:
//!
//! - the result: `Ok(n)` exactly when the topic is valid, some route
//!   matches and none rejects, with `n` the routes matched; otherwise an
//!   error one of the broken rules explains;
//! - the counters: on `Err`, exactly one rejection counter moves, by one,
//!   and it is the returned error's; `delivered` moves by the record writes
//!   made, on `Ok` and `Err` alike;
//! - every record: written exactly by the routes the model says accept
//!   the frame, holding exactly the decoded value; everything else
//!   unchanged (write counts, reader contents, keyed tables).

use std::collections::BTreeMap;

use aimdb_core::codec::Postcard;
use aimdb_core::connector::{DispatchError, InboundStats};
use aimdb_core::inbound::{KeyedLink, Link, LocalDispatch, Route};
use aimdb_core::record::{Keyed, Latest, Reader, Record, Ring, TryRecvError, KEY_MAX_LEN};
use embassy_sync::blocking_mutex::raw::NoopRawMutex as M;

use crate::reference;

/// The record each route writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tgt {
    Led,
    Level,
    LevelLog,
    Temp,
    Sensors,
    Status,
    Sys,
    Deep,
    Devices,
    Cfg,
}

/// One declared link.
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec {
    pub filter: &'static str,
    pub key_level: Option<usize>,
    pub max_payload: usize,
    pub target: Tgt,
}

const fn r(filter: &'static str, target: Tgt) -> RouteSpec {
    RouteSpec {
        filter,
        key_level: None,
        max_payload: aimdb_core::inbound::DEFAULT_MAX_PAYLOAD,
        target,
    }
}

/// Largest payload the `sensors/#` route takes (a `u32` varint may need 5).
pub const SENSORS_MAX: usize = 3;
/// Slots in the `devices` and `cfg` keyed tables.
pub const DEVICES_K: usize = 3;
pub const CFG_K: usize = 2;

/// The route table, in declaration order.
pub const ROUTES: &[RouteSpec] = &[
    r("cmd/led", Tgt::Led),
    r("cmd/level", Tgt::Level),
    // Same filter, second record: both receive.
    r("cmd/level", Tgt::LevelLog),
    r("sensors/+/temp", Tgt::Temp),
    // Overlaps the one above; smaller payload limit.
    RouteSpec {
        max_payload: SENSORS_MAX,
        ..r("sensors/#", Tgt::Sensors)
    },
    r("+/status", Tgt::Status),
    r("$SYS/#", Tgt::Sys),
    r("a/+/+/#", Tgt::Deep),
    RouteSpec {
        key_level: Some(1),
        ..r("dev/+/value", Tgt::Devices)
    },
    RouteSpec {
        key_level: Some(0),
        ..r("+/+/cfg", Tgt::Cfg)
    },
];

/// Topic pieces worth combining (the fuzz inputs index into this).
pub const PIECES: &[&str] = &[
    "cmd",
    "led",
    "level",
    "sensors",
    "temp",
    "status",
    "$SYS",
    "a",
    "dev",
    "value",
    "cfg",
    "",
    "+",
    "#",
    "$x",
    "k1",
    "k2",
    "k3",
    "k4",
    "0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef!",
];

/// A decoded value, for comparing records with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Val {
    Bool(bool),
    U8(u8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    Cfg(u8, bool),
}

fn whole<T: serde::de::DeserializeOwned>(p: &[u8]) -> Option<T> {
    match postcard::take_from_bytes::<T>(p) {
        Ok((v, [])) => Some(v),
        _ => None,
    }
}

/// What the record behind `t` would hold after decoding `p`, if it decodes.
pub fn decode(t: Tgt, p: &[u8]) -> Option<Val> {
    Some(match t {
        Tgt::Led | Tgt::Status => Val::Bool(whole(p)?),
        Tgt::Level | Tgt::Sys => Val::U8(whole(p)?),
        Tgt::LevelLog | Tgt::Devices => Val::U16(whole(p)?),
        Tgt::Temp => Val::I16(whole(p)?),
        Tgt::Sensors => Val::U32(whole(p)?),
        Tgt::Deep => Val::I32(whole(p)?),
        Tgt::Cfg => {
            let (a, b) = whole::<(u8, bool)>(p)?;
            Val::Cfg(a, b)
        }
    })
}

/// The records.
pub struct Records {
    pub led: Record<M, Latest<bool>, 1>,
    pub level: Record<M, Latest<u8>, 1>,
    pub level_log: Record<M, Ring<u16, 4>, 1>,
    pub temp: Record<M, Ring<i16, 4>, 1>,
    pub sensors: Record<M, Ring<u32, 4>, 1>,
    pub status: Record<M, Latest<bool>, 1>,
    pub sys: Record<M, Latest<u8>, 1>,
    pub deep: Record<M, Latest<i32>, 1>,
    pub devices: Keyed<M, Latest<u16>, DEVICES_K, 1>,
    pub cfg: Keyed<M, Latest<(u8, bool)>, CFG_K, 1>,
    /// Linked nowhere: must never be written.
    pub unlinked: Record<M, Latest<u8>, 1>,
}

impl Records {
    pub const fn new() -> Self {
        Self {
            led: Record::new("led"),
            level: Record::new("level"),
            level_log: Record::new("level_log"),
            temp: Record::new("temp"),
            sensors: Record::new("sensors"),
            status: Record::new("status"),
            sys: Record::new("sys"),
            deep: Record::new("deep"),
            devices: Keyed::new("devices"),
            cfg: Keyed::new("cfg"),
            unlinked: Record::new("unlinked"),
        }
    }
}

impl Default for Records {
    fn default() -> Self {
        Self::new()
    }
}

type L<'r, B, T> = Link<'r, Record<M, B, 1>, Postcard, T>;
type K<'r, B, const N: usize, T> = KeyedLink<'r, Keyed<M, B, N, 1>, Postcard, T>;

/// The links, one per [`ROUTES`] entry.
pub struct Links<'r> {
    led: L<'r, Latest<bool>, bool>,
    level: L<'r, Latest<u8>, u8>,
    level_log: L<'r, Ring<u16, 4>, u16>,
    temp: L<'r, Ring<i16, 4>, i16>,
    sensors: L<'r, Ring<u32, 4>, u32>,
    status: L<'r, Latest<bool>, bool>,
    sys: L<'r, Latest<u8>, u8>,
    deep: L<'r, Latest<i32>, i32>,
    devices: K<'r, Latest<u16>, DEVICES_K, u16>,
    cfg: K<'r, Latest<(u8, bool)>, CFG_K, (u8, bool)>,
}

/// Route capacity and trie nodes of the table.
/// Over `NoopRawMutex` records: the local flavour.
pub type Table<'a> = LocalDispatch<'a, 16, 32>;

impl<'r> Links<'r> {
    pub fn new(r: &'r Records) -> Self {
        Self {
            led: Link::new(&r.led, Postcard),
            level: Link::new(&r.level, Postcard),
            level_log: Link::new(&r.level_log, Postcard),
            temp: Link::new(&r.temp, Postcard),
            sensors: Link::new(&r.sensors, Postcard).with_max_payload(SENSORS_MAX),
            status: Link::new(&r.status, Postcard),
            sys: Link::new(&r.sys, Postcard),
            deep: Link::new(&r.deep, Postcard),
            devices: KeyedLink::new(&r.devices, Postcard),
            cfg: KeyedLink::new(&r.cfg, Postcard),
        }
    }

    fn target(&self, t: Tgt) -> &dyn Route {
        match t {
            Tgt::Led => &self.led,
            Tgt::Level => &self.level,
            Tgt::LevelLog => &self.level_log,
            Tgt::Temp => &self.temp,
            Tgt::Sensors => &self.sensors,
            Tgt::Status => &self.status,
            Tgt::Sys => &self.sys,
            Tgt::Deep => &self.deep,
            Tgt::Devices => &self.devices,
            Tgt::Cfg => &self.cfg,
        }
    }

    /// The dispatch table of [`ROUTES`].
    pub fn table(&self) -> Table<'_> {
        let mut b = Table::builder();
        for spec in ROUTES {
            let t = self.target(spec.target);
            match spec.key_level {
                Some(k) => b.link_keyed(spec.filter, k, t),
                None => b.link(spec.filter, t),
            };
        }
        b.build().expect("the fixture's table is valid")
    }
}

/// The error kinds, without `MalformedPayload`'s detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    UnknownTopic,
    TopicNotUtf8,
    InvalidTopic,
    WildcardInTopic,
    TopicTooLong,
    Malformed,
    PayloadTooLarge,
    KeyTableFull,
    KeyInvalid,
}

pub fn kind(e: DispatchError) -> Kind {
    match e {
        DispatchError::UnknownTopic => Kind::UnknownTopic,
        DispatchError::TopicNotUtf8 => Kind::TopicNotUtf8,
        DispatchError::InvalidTopic => Kind::InvalidTopic,
        DispatchError::WildcardInTopic => Kind::WildcardInTopic,
        DispatchError::TopicTooLong => Kind::TopicTooLong,
        DispatchError::MalformedPayload(_) => Kind::Malformed,
        DispatchError::PayloadTooLarge => Kind::PayloadTooLarge,
        DispatchError::KeyTableFull => Kind::KeyTableFull,
        DispatchError::KeyInvalid => Kind::KeyInvalid,
        _ => panic!("a DispatchError variant the fuzz model does not know: {e:?}"),
    }
}

fn topic_kind(e: aimdb_core::topic::TopicError) -> Kind {
    use aimdb_core::topic::TopicError;
    match e {
        TopicError::NotUtf8 => Kind::TopicNotUtf8,
        TopicError::TooLong | TopicError::TooManyLevels => Kind::TopicTooLong,
        TopicError::WildcardInName => Kind::WildcardInTopic,
        _ => Kind::InvalidTopic,
    }
}

/// One record write the model expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub target: Tgt,
    pub key: Option<String>,
    pub value: Val,
}

/// What one dispatch must do.
#[derive(Debug)]
pub struct Expect {
    pub matched: usize,
    /// Every error some rejecting route (or the topic) can explain; empty
    /// when the frame must be accepted.
    pub errors: Vec<Kind>,
    pub writes: Vec<Write>,
}

/// The model: each record's writes and newest value; the keyed tables.
#[derive(Debug, Default)]
pub struct Model {
    writes: BTreeMap<Tgt, u64>,
    /// Per keyed table: (key, writes, newest value), in claim order.
    keys: BTreeMap<Tgt, Vec<(String, u64, Val)>>,
}

impl Model {
    /// What dispatching (`topic`, `payload`) must do, given the state.
    pub fn expect(&self, topic: &[u8], payload: &[u8]) -> Expect {
        let broken = reference::topic_violations(topic);
        if !broken.is_empty() {
            return Expect {
                matched: 0,
                errors: broken.into_iter().map(topic_kind).collect(),
                writes: Vec::new(),
            };
        }
        let topic = core::str::from_utf8(topic).expect("valid topics are UTF-8");
        let mut out = Expect {
            matched: 0,
            errors: Vec::new(),
            writes: Vec::new(),
        };
        for spec in ROUTES {
            if !reference::matches(spec.filter, topic) {
                continue;
            }
            out.matched += 1;
            let mut broken = Vec::new();
            if payload.len() > spec.max_payload {
                broken.push(Kind::PayloadTooLarge);
            }
            let value = decode(spec.target, payload);
            if value.is_none() {
                broken.push(Kind::Malformed);
            }
            let key = spec
                .key_level
                .map(|k| topic.split('/').nth(k).expect("matched").to_owned());
            if let Some(key) = &key {
                if key.is_empty() || key.len() > KEY_MAX_LEN {
                    broken.push(Kind::KeyInvalid);
                }
                let table = self.keys.get(&spec.target).map_or(&[][..], Vec::as_slice);
                let cap = if spec.target == Tgt::Devices {
                    DEVICES_K
                } else {
                    CFG_K
                };
                if !table.iter().any(|(k, ..)| k == key) && table.len() == cap {
                    broken.push(Kind::KeyTableFull);
                }
            }
            match (broken.is_empty(), value) {
                (true, Some(value)) => out.writes.push(Write {
                    target: spec.target,
                    key,
                    value,
                }),
                _ => out.errors.extend(broken),
            }
        }
        if out.matched == 0 {
            out.errors.push(Kind::UnknownTopic);
        }
        out
    }

    fn apply(&mut self, writes: &[Write]) {
        for w in writes {
            match &w.key {
                None => *self.writes.entry(w.target).or_default() += 1,
                Some(key) => {
                    let table = self.keys.entry(w.target).or_default();
                    match table.iter_mut().find(|(k, ..)| k == key) {
                        Some(slot) => {
                            slot.1 += 1;
                            slot.2 = w.value;
                        }
                        None => table.push((key.clone(), 1, w.value)),
                    }
                }
            }
        }
    }

    /// Writes of a plain record so far.
    pub fn writes(&self, t: Tgt) -> u64 {
        self.writes.get(&t).copied().unwrap_or(0)
    }

    /// Claimed keys of a keyed table: (key, writes, newest value).
    pub fn keys(&self, t: Tgt) -> &[(String, u64, Val)] {
        self.keys.get(&t).map_or(&[], Vec::as_slice)
    }
}

/// One reader per plain record, drained after every step.
pub struct Readers<'r> {
    led: Reader<'r, M, Latest<bool>, 1>,
    level: Reader<'r, M, Latest<u8>, 1>,
    level_log: Reader<'r, M, Ring<u16, 4>, 1>,
    temp: Reader<'r, M, Ring<i16, 4>, 1>,
    sensors: Reader<'r, M, Ring<u32, 4>, 1>,
    status: Reader<'r, M, Latest<bool>, 1>,
    sys: Reader<'r, M, Latest<u8>, 1>,
    deep: Reader<'r, M, Latest<i32>, 1>,
    unlinked: Reader<'r, M, Latest<u8>, 1>,
}

impl<'r> Readers<'r> {
    pub fn new(r: &'r Records) -> Self {
        Self {
            led: r.led.subscribe().unwrap(),
            level: r.level.subscribe().unwrap(),
            level_log: r.level_log.subscribe().unwrap(),
            temp: r.temp.subscribe().unwrap(),
            sensors: r.sensors.subscribe().unwrap(),
            status: r.status.subscribe().unwrap(),
            sys: r.sys.subscribe().unwrap(),
            deep: r.deep.subscribe().unwrap(),
            unlinked: r.unlinked.subscribe().unwrap(),
        }
    }

    /// The next value of `t`'s reader (plain records only).
    fn next(&mut self, t: Tgt) -> Result<Val, TryRecvError> {
        match t {
            Tgt::Led => self.led.try_recv().map(Val::Bool),
            Tgt::Level => self.level.try_recv().map(Val::U8),
            Tgt::LevelLog => self.level_log.try_recv().map(Val::U16),
            Tgt::Temp => self.temp.try_recv().map(Val::I16),
            Tgt::Sensors => self.sensors.try_recv().map(Val::U32),
            Tgt::Status => self.status.try_recv().map(Val::Bool),
            Tgt::Sys => self.sys.try_recv().map(Val::U8),
            Tgt::Deep => self.deep.try_recv().map(Val::I32),
            Tgt::Devices | Tgt::Cfg => unreachable!("keyed"),
        }
    }
}

const PLAIN: [Tgt; 8] = [
    Tgt::Led,
    Tgt::Level,
    Tgt::LevelLog,
    Tgt::Temp,
    Tgt::Sensors,
    Tgt::Status,
    Tgt::Sys,
    Tgt::Deep,
];

fn plain_writes(r: &Records, t: Tgt) -> u64 {
    match t {
        Tgt::Led => r.led.writes(),
        Tgt::Level => r.level.writes(),
        Tgt::LevelLog => r.level_log.writes(),
        Tgt::Temp => r.temp.writes(),
        Tgt::Sensors => r.sensors.writes(),
        Tgt::Status => r.status.writes(),
        Tgt::Sys => r.sys.writes(),
        Tgt::Deep => r.deep.writes(),
        Tgt::Devices | Tgt::Cfg => unreachable!("keyed"),
    }
}

/// Records, their readers and the model, checked together.
pub struct Harness<'r> {
    pub records: &'r Records,
    pub readers: Readers<'r>,
    pub model: Model,
}

impl<'r> Harness<'r> {
    pub fn new(records: &'r Records) -> Self {
        Self {
            records,
            readers: Readers::new(records),
            model: Model::default(),
        }
    }

    /// Dispatches one frame through `table` and checks everything.
    pub fn step(
        &mut self,
        table: &mut Table<'_>,
        topic: &[u8],
        payload: &[u8],
    ) -> Result<usize, DispatchError> {
        let before = *table.stats();
        let expect = self.model.expect(topic, payload);
        let got = table.dispatch(topic, payload);
        self.check(&expect, got, &before, table.stats(), topic, payload);
        got
    }

    fn check(
        &mut self,
        expect: &Expect,
        got: Result<usize, DispatchError>,
        before: &InboundStats,
        after: &InboundStats,
        topic: &[u8],
        payload: &[u8],
    ) {
        let ctx = || {
            format!(
                "topic {:?} payload {payload:?}",
                String::from_utf8_lossy(topic)
            )
        };
        match got {
            Ok(n) => {
                assert!(
                    expect.errors.is_empty(),
                    "accepted, model {expect:?}; {}",
                    ctx()
                );
                assert_eq!(n, expect.matched, "routes written; {}", ctx());
                assert_eq!(after.total_rejected(), before.total_rejected(), "{}", ctx());
            }
            Err(e) => {
                assert!(
                    expect.errors.contains(&kind(e)),
                    "rejected with {e:?}, model {expect:?}; {}",
                    ctx()
                );
                assert_eq!(
                    after.rejected(e),
                    before.rejected(e).wrapping_add(1),
                    "{e:?} counted; {}",
                    ctx()
                );
                assert_eq!(
                    after.total_rejected(),
                    before.total_rejected().wrapping_add(1),
                    "exactly one rejection counter moves; {}",
                    ctx()
                );
            }
        }
        assert_eq!(
            after.delivered,
            before.delivered.wrapping_add(expect.writes.len() as u32),
            "`delivered` counts the record writes made (result {got:?}); {}",
            ctx()
        );
        self.model.apply(&expect.writes);
        self.check_records(&expect.writes, &ctx());
    }

    /// Every record against the model; `writes` are this step's.
    fn check_records(&mut self, writes: &[Write], ctx: &str) {
        let r = self.records;
        for t in PLAIN {
            assert_eq!(
                plain_writes(r, t),
                self.model.writes(t),
                "{t:?} writes; {ctx}"
            );
            for w in writes.iter().filter(|w| w.target == t) {
                assert_eq!(self.readers.next(t), Ok(w.value), "{t:?} value; {ctx}");
            }
            assert_eq!(
                self.readers.next(t),
                Err(TryRecvError::Empty),
                "{t:?} nothing more; {ctx}"
            );
        }
        assert_eq!(r.unlinked.writes(), 0);
        assert_eq!(self.readers.unlinked.try_recv(), Err(TryRecvError::Empty));

        let keys = self.model.keys(Tgt::Devices);
        assert_eq!(r.devices.len(), keys.len(), "devices keys; {ctx}");
        for (key, n, v) in keys {
            let slot = r.devices.get(key).expect("claimed key");
            assert_eq!(slot.writes(), *n, "devices/{key} writes; {ctx}");
            let got = slot.subscribe().unwrap().try_recv().map(Val::U16);
            assert_eq!(got, Ok(*v), "devices/{key} value; {ctx}");
        }
        let keys = self.model.keys(Tgt::Cfg);
        assert_eq!(r.cfg.len(), keys.len(), "cfg keys; {ctx}");
        for (key, n, v) in keys {
            let slot = r.cfg.get(key).expect("claimed key");
            assert_eq!(slot.writes(), *n, "cfg/{key} writes; {ctx}");
            let got = slot
                .subscribe()
                .unwrap()
                .try_recv()
                .map(|(a, b)| Val::Cfg(a, b));
            assert_eq!(got, Ok(*v), "cfg/{key} value; {ctx}");
        }
    }
}
