//! The remote-access `Responder` as a device runs it: linked on two request
//! topics of an inbound `Dispatch` (beside a command link into one of the
//! described records), its answers pulled through an outbound `Routes`
//! table into a payload buffer of arbitrary size (4..=259 bytes).
//!
//! Input: a sequence of steps: raw bytes or well-formed requests (built
//! from arbitrary fields, then optionally cut, extended or bit-flipped) on
//! a request topic (plain or retained), the command topic or the response
//! topic; pulls of answers; application writes to the described records;
//! the command consumer taking its command; a reconnect (routes replayed).
//!
//! The table: nine described records of all three kinds, three of them
//! writable, one whose only reader slot an application reader holds (not
//! watchable), more than a page of them; one record that is not
//! described. A reference model of the responder (its request slot, busy
//! id, watches and ended-watch queue, counters) and of every record runs
//! beside it. Invariants, checked after every step:
//!
//! 1. no heap allocation inside `Dispatch::dispatch` or `Routes::poll_next`
//!    (which runs the request and encodes its answer): a counting global
//!    allocator, per thread;
//! 2. counters: every frame on a request topic moves exactly one of
//!    `requests`, `busy` (responder), `payload_too_large`,
//!    `retained_ignored` (dispatch) by one, and `delivered` by
//!    `requests + busy`; `answered == sent + encode_errors` of the answer
//!    route; every responder, dispatch and route counter equals the
//!    model's;
//! 3. records: a frame on a request topic changes no record (requests run
//!    on the answer side); a pull changes only the records that an
//!    accepted `set` among the jobs it ran targets, each by one write
//!    holding exactly the value the project's own codec (`Postcard`:
//!    whole payload, no trailing bytes) decodes; so a refused request
//!    (unknown or read-only record, malformed request or value, busy)
//!    changes nothing. Every record's writes, replaced writes and newest
//!    value equal the model's after every step;
//! 4. every answer decodes as `proto::Response<proto::Body<Host>>` (the host's
//!    decoding), its id is the id of a request that was sent (the first
//!    varint of the frame, 0 if none reads), and its bytes are exactly the
//!    model's answer (so pages, values, `stats` counters and watch
//!    updates are checked too); a pull finds an answer exactly when the
//!    model has one due.
//!
//! At the end everything due is pulled and a good request still gets its
//! answer.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::hint::black_box;
use std::task::{Context, Poll, Waker};

use aimdb_core::codec::{Decode, Postcard};
use aimdb_core::connector::{DispatchError, InboundStats};
use aimdb_core::inbound::{self, Dispatch};
use aimdb_core::presence::LinkState;
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Buffer, Kind, Latest, Mailbox, Reader, Record, Ring, TryRecvError};
use aimdb_core::remote::proto::{self, ConnectorStats, Entry, Host, RecordStats, Response, PAGE};
use aimdb_core::remote::{
    schema_hash, Codec, Connector, Counted, Description, LinkCounters, NamedType, Op, Request,
    RequestError, Responder, ResponderStats, Schema, WATCHES,
};
use aimdb_core::sync::Readiness;
use arbitrary::Arbitrary;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;

// ------------------------------------------------- allocation counting

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `realloc`.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread so far.
fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

// ------------------------------------------------------------ the node

/// The largest request the responder takes.
const REQ_MAX: usize = 64;
/// The request topics (a framed link's and an MQTT node's).
const REQ_TOPICS: [&str; 2] = [proto::REQUEST, aimdb_core::remote_topic!("dev", request)];
const RSP: &str = proto::RESPONSE;

/// An answer as a host decodes it.
type Body<'a> = proto::Body<'a, Host>;
type Info<'a> = proto::Info<'a, Host>;
/// The command record's ordinary inbound link.
const CMD_TOPIC: &str = "dev/cmd";
/// The link state `stats` reports for the one connector.
const LINK: LinkState = LinkState::online(7);

const READINGS_TOPICS: &[&str] = &["dev/readings"];
const LED_TOPICS: &[&str] = &["dev/led"];
const CMD_TOPICS: &[&str] = &[CMD_TOPIC];

/// Described records, in table order; then the undescribed one.
const NAMES: [&str; 10] = [
    "readings", "led", "cmd", "level", "config", "f0", "f1", "f2", "f3", "secret",
];
const DESCRIBED: usize = 9;
const SECRET: usize = 9;
/// Names requests use besides those: near misses.
const OTHER_NAMES: [&str; 6] = ["", "le", "ledd", "f4", "LED", "readings\0"];

/// The dispatch's counters, as the connector `stats` reports.
struct Inbound(inbound::Counters);

impl Counted for Inbound {
    fn link_counters(&self) -> LinkCounters {
        link_counters(&self.0.snapshot())
    }
}

fn link_counters(s: &InboundStats) -> LinkCounters {
    LinkCounters {
        received: s.delivered,
        rejected: s.total_rejected(),
        ..LinkCounters::default()
    }
}

/// Everything the descriptions borrow for `'static`.
struct Records {
    /// Read-only stream; watchable (no other reader).
    readings: Record<Cs, Ring<(u32, i32), 4>, 1>,
    /// Writable state; watchable.
    led: Record<Cs, Latest<bool>, 1>,
    /// Writable command, also written by its inbound link; one slot is its
    /// consumer's, one is free for a watch.
    cmd: Record<Cs, Mailbox<u8>, 2>,
    /// Read-only state whose one slot an application reader holds.
    level: Record<Cs, Latest<u16>, 1>,
    /// Writable stream (described as JSON-routed).
    config: Record<Cs, Ring<(u8, bool), 2>, 1>,
    /// Fillers: more records than a page and than `WATCHES`.
    fill: [Record<Cs, Latest<i16>, 1>; 4],
    /// Not described: no request may reach it.
    secret: Record<Cs, Latest<u8>, 1>,
    link: Record<Cs, Latest<LinkState>, 1>,
    inbound: Inbound,
    /// Last: the records' stored wakers point at it.
    ready: Readiness<1>,
}

impl Records {
    fn new() -> Self {
        Self {
            readings: Record::new(NAMES[0]),
            led: Record::new(NAMES[1]),
            cmd: Record::new(NAMES[2]),
            level: Record::new(NAMES[3]),
            config: Record::new(NAMES[4]),
            fill: [
                Record::new(NAMES[5]),
                Record::new(NAMES[6]),
                Record::new(NAMES[7]),
                Record::new(NAMES[8]),
            ],
            secret: Record::new(NAMES[SECRET]),
            link: Record::new("link"),
            inbound: Inbound(inbound::Counters::new()),
            ready: Readiness::new(),
        }
    }

    /// Every record the model follows, in [`NAMES`] order.
    fn probes(&self) -> [&dyn Probe; 10] {
        let [f0, f1, f2, f3] = &self.fill;
        [
            &self.readings,
            &self.led,
            &self.cmd,
            &self.level,
            &self.config,
            f0,
            f1,
            f2,
            f3,
            &self.secret,
        ]
    }
}

/// The described table and the connectors `stats` reports.
struct Table {
    descriptions: [Description; DESCRIBED],
    connectors: [Connector; 1],
}

impl Table {
    fn new(r: &'static Records) -> Self {
        let [f0, f1, f2, f3] = &r.fill;
        Self {
            descriptions: [
                Description::of(&r.readings).topics(READINGS_TOPICS),
                Description::of(&r.led).topics(LED_TOPICS).writable(),
                Description::of(&r.cmd).topics(CMD_TOPICS).writable(),
                Description::of(&r.level),
                Description::of(&r.config).codec(Codec::Json).writable(),
                Description::of(f0),
                Description::of(f1),
                Description::of(f2),
                Description::of(f3),
            ],
            connectors: [Connector::new("inbound", &r.inbound).link(&r.link)],
        }
    }
}

/// What the model knows of a described record, stated independently of
/// `Description::of`.
struct Spec {
    name: &'static str,
    kind: Kind,
    capacity: u16,
    writable: bool,
    codec: Codec,
    topics: &'static [&'static str],
    schema: &'static NamedType,
    hash: [u8; 8],
}

fn spec<T: Schema>(
    name: &'static str,
    kind: Kind,
    capacity: u16,
    writable: bool,
    codec: Codec,
    topics: &'static [&'static str],
) -> Spec {
    Spec {
        name,
        kind,
        capacity,
        writable,
        codec,
        topics,
        schema: T::SCHEMA,
        hash: schema_hash::<T>(),
    }
}

fn specs() -> [Spec; DESCRIBED] {
    use Codec::{Json, Postcard as Pc};
    let fill = |i| spec::<i16>(NAMES[i], Kind::Latest, 1, false, Pc, &[]);
    [
        spec::<(u32, i32)>(NAMES[0], Kind::Ring, 4, false, Pc, READINGS_TOPICS),
        spec::<bool>(NAMES[1], Kind::Latest, 1, true, Pc, LED_TOPICS),
        spec::<u8>(NAMES[2], Kind::Mailbox, 1, true, Pc, CMD_TOPICS),
        spec::<u16>(NAMES[3], Kind::Latest, 1, false, Pc, &[]),
        spec::<(u8, bool)>(NAMES[4], Kind::Ring, 2, true, Json, &[]),
        fill(5),
        fill(6),
        fill(7),
        fill(8),
    ]
}

/// A value as the project's codec decodes it (the whole payload, no
/// trailing bytes), re-encoded: what the record must hold after a write.
fn strict<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Option<Vec<u8>> {
    let v: T = Postcard.decode(bytes).ok()?;
    Some(postcard::to_allocvec(&v).expect("encodes"))
}

/// Decodes a record's value as a write would hold it (see [`strict`]).
type Decoder = fn(&[u8]) -> Option<Vec<u8>>;

/// Decoders of the records' value types, in [`NAMES`] order.
const DECODE: [Decoder; 10] = [
    strict::<(u32, i32)>,
    strict::<bool>,
    strict::<u8>,
    strict::<u16>,
    strict::<(u8, bool)>,
    strict::<i16>,
    strict::<i16>,
    strict::<i16>,
    strict::<i16>,
    strict::<u8>,
];

/// Reader slots (`R`) of each record.
const SLOTS: [u32; 10] = [1, 1, 2, 1, 1, 1, 1, 1, 1, 1];

/// A record's observable state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    writes: u64,
    replaced: u64,
    /// The newest value held, postcard.
    newest: Option<Vec<u8>>,
}

trait Probe {
    fn state(&self) -> State;
}

impl<B: Buffer, const R: usize> Probe for Record<Cs, B, R>
where
    B::Item: Serialize,
{
    fn state(&self) -> State {
        State {
            writes: self.writes(),
            replaced: self.replaced(),
            newest: self.with_newest(|v| v.map(|v| postcard::to_allocvec(v).expect("encodes"))),
        }
    }
}

// ------------------------------------------------------------ the input

#[derive(Arbitrary, Debug, Clone, Copy)]
enum To {
    Framed,
    Mqtt,
    /// A request topic, as a broker's retained message.
    Retained,
    Cmd,
    CmdRetained,
    /// The answer topic, linked nowhere inbound.
    Response,
}

/// An application value for one of the records.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum AppValue {
    Readings(u32, i32),
    Led(bool),
    Cmd(u8),
    Level(u16),
    Config(u8, bool),
    Fill(u8, i16),
}

impl AppValue {
    /// The record it is for, and its postcard bytes.
    fn encode(self) -> (usize, Vec<u8>) {
        let e = |v: &dyn erased::Ser| v.bytes();
        match self {
            Self::Readings(a, b) => (0, e(&(a, b))),
            Self::Led(v) => (1, e(&v)),
            Self::Cmd(v) => (2, e(&v)),
            Self::Level(v) => (3, e(&v)),
            Self::Config(a, b) => (4, e(&(a, b))),
            Self::Fill(k, v) => (5 + usize::from(k % 4), e(&v)),
        }
    }
}

mod erased {
    pub trait Ser {
        fn bytes(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn bytes(&self) -> Vec<u8> {
            postcard::to_allocvec(self).expect("encodes")
        }
    }
}

#[derive(Arbitrary, Debug)]
enum NameIn {
    Known(u8),
    Raw(String),
}

impl NameIn {
    fn get(&self) -> String {
        match self {
            Self::Known(k) => {
                let k = usize::from(*k) % (NAMES.len() + OTHER_NAMES.len());
                NAMES
                    .get(k)
                    .unwrap_or_else(|| &OTHER_NAMES[k - NAMES.len()])
                    .to_string()
            }
            Self::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum ValueIn {
    /// A value of some record's type (not necessarily the target's).
    Of(AppValue),
    Raw(Vec<u8>),
}

impl ValueIn {
    fn get(&self) -> Vec<u8> {
        match self {
            Self::Of(v) => v.encode().1,
            Self::Raw(b) => b.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum OpIn {
    List(u16),
    Describe(NameIn),
    Get(NameIn),
    Set(NameIn, ValueIn),
    Stats(u16),
    Watch(NameIn, u32),
    Unwatch(NameIn),
}

/// What is done to a well-formed request's bytes.
#[derive(Arbitrary, Debug)]
enum Edit {
    None,
    Append(Vec<u8>),
    Truncate(u8),
    Flip(u8, u8),
}

#[derive(Arbitrary, Debug)]
enum Step {
    Request {
        to: To,
        id: u32,
        op: OpIn,
        edit: Edit,
    },
    Raw {
        to: To,
        payload: Vec<u8>,
    },
    /// Pull up to 1 + n % 4 answers.
    Pull(u8),
    Write(AppValue),
    /// The command consumer takes its command.
    Take,
    /// The transport reconnected.
    Replay,
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Answer buffer: 4 + this many bytes.
    buf: u8,
    steps: Vec<Step>,
}

fn request_bytes(id: u32, op: &OpIn, edit: &Edit) -> Vec<u8> {
    let (name, value);
    let op = match op {
        OpIn::List(from) => Op::List { from: *from },
        OpIn::Stats(from) => Op::Stats { from: *from },
        OpIn::Describe(n) => {
            name = n.get();
            Op::Describe { record: &name }
        }
        OpIn::Get(n) => {
            name = n.get();
            Op::Get { record: &name }
        }
        OpIn::Set(n, v) => {
            (name, value) = (n.get(), v.get());
            Op::Set {
                record: &name,
                value: &value,
            }
        }
        OpIn::Watch(n, credit) => {
            name = n.get();
            Op::Watch {
                record: &name,
                credit: *credit,
            }
        }
        OpIn::Unwatch(n) => {
            name = n.get();
            Op::Unwatch { record: &name }
        }
    };
    let mut b = postcard::to_allocvec(&Request { id, op }).expect("encodes");
    match edit {
        Edit::None => {}
        Edit::Append(more) => b.extend_from_slice(more),
        Edit::Truncate(n) => b.truncate(b.len().saturating_sub(usize::from(*n))),
        Edit::Flip(at, x) => {
            let n = b.len();
            b[usize::from(*at) % n] ^= x;
        }
    }
    b
}

// ------------------------------------------------------------ the model

/// Room a `get` keeps in front of the value for the response header
/// (id, three tags, writes, length), sized for this id and write count
/// and a value as long as the whole buffer: the value is encoded straight
/// into the answer buffer behind it, so a value that does not fit behind
/// it is `TooLarge`.
fn get_room(id: u32, writes: u64, buf: usize) -> usize {
    let varint = |v: u64| postcard::to_allocvec(&v).expect("encodes").len();
    varint(u64::from(id)) + 3 + varint(writes) + varint(buf as u64)
}

#[derive(Debug, Clone)]
struct MRecord {
    state: State,
    /// Reader slots held (application readers and watches).
    held: u32,
    slots: u32,
    kind: Kind,
}

impl MRecord {
    /// An application or `set` write. Only `Ring`s keep unread values;
    /// the readers here never take a `Latest` value, so a `Latest` or
    /// `Mailbox` value present at a write is replaced unseen whenever a
    /// reader is subscribed.
    fn write(&mut self, value: Vec<u8>) {
        if self.kind != Kind::Ring && self.state.newest.is_some() && self.held > 0 {
            self.state.replaced += 1;
        }
        self.state.writes += 1;
        self.state.newest = Some(value);
    }
}

#[derive(Debug, Clone, Copy)]
struct MWatch {
    rec: usize,
    id: u32,
    credit: u32,
    seen: u64,
}

#[derive(Debug, Clone)]
enum Job {
    Busy(u32),
    Request(Vec<u8>),
    Ended(u32),
    Update(usize),
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct MCounters {
    requests: u32,
    answered: u32,
    malformed: u32,
    busy: u32,
    denied: u32,
    updates: u32,
}

impl MCounters {
    fn of(s: &ResponderStats) -> Self {
        Self {
            requests: s.requests,
            answered: s.answered,
            malformed: s.malformed,
            busy: s.busy,
            denied: s.denied,
            updates: s.updates,
        }
    }

    fn stats(&self) -> ResponderStats {
        let mut s = ResponderStats::default();
        s.requests = self.requests;
        s.answered = self.answered;
        s.malformed = self.malformed;
        s.busy = self.busy;
        s.denied = self.denied;
        s.updates = self.updates;
        s
    }
}

fn inc(c: &mut u32) {
    *c = c.wrapping_add(1);
}

fn enc(r: &Response<Body<'_>>) -> Vec<u8> {
    postcard::to_allocvec(r).expect("encodes")
}

/// What one pull ran: the accepted `set`s (record, value), in order.
type Sets = Vec<(usize, Vec<u8>)>;

struct Model {
    specs: [Spec; DESCRIBED],
    recs: Vec<MRecord>,
    c: MCounters,
    pending: Option<Vec<u8>>,
    busy: Option<u32>,
    watches: [Option<MWatch>; WATCHES],
    ended: [Option<u32>; WATCHES],
    next: usize,
    inbound: InboundStats,
    sent: u32,
    encode_errors: u32,
    buf: usize,
}

impl Model {
    fn new(buf: usize) -> Self {
        let recs = (0..NAMES.len())
            .map(|i| MRecord {
                state: State {
                    writes: 0,
                    replaced: 0,
                    newest: None,
                },
                held: 0,
                slots: SLOTS[i],
                kind: [
                    Kind::Ring,
                    Kind::Latest,
                    Kind::Mailbox,
                    Kind::Latest,
                    Kind::Ring,
                ]
                .get(i)
                .copied()
                .unwrap_or(Kind::Latest),
            })
            .collect();
        Self {
            specs: specs(),
            recs,
            c: MCounters::default(),
            pending: None,
            busy: None,
            watches: [None; WATCHES],
            ended: [None; WATCHES],
            next: 0,
            inbound: InboundStats::default(),
            sent: 0,
            encode_errors: 0,
            buf,
        }
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.specs.iter().position(|s| s.name == name)
    }

    /// A frame on a request topic: the dispatch result.
    fn request_frame(&mut self, payload: &[u8], retained: bool) -> Result<usize, DispatchError> {
        if retained {
            inc(&mut self.inbound.retained_ignored);
            return Ok(0);
        }
        if payload.len() > REQ_MAX {
            inc(&mut self.inbound.payload_too_large);
            return Err(DispatchError::PayloadTooLarge);
        }
        inc(&mut self.inbound.delivered);
        if self.pending.is_some() {
            inc(&mut self.c.busy);
            self.busy = Some(claimed_id(payload));
        } else {
            inc(&mut self.c.requests);
            self.pending = Some(payload.to_vec());
        }
        Ok(1)
    }

    /// A frame on the command topic (a postcard `u8` into `cmd`).
    fn cmd_frame(&mut self, payload: &[u8], retained: bool) -> Result<usize, DispatchError> {
        if retained {
            // A `Mailbox` link applies no retained message.
            inc(&mut self.inbound.retained_ignored);
            return Ok(0);
        }
        if payload.len() > inbound::DEFAULT_MAX_PAYLOAD {
            inc(&mut self.inbound.payload_too_large);
            return Err(DispatchError::PayloadTooLarge);
        }
        match DECODE[2](payload) {
            Some(v) => {
                inc(&mut self.inbound.delivered);
                self.recs[2].write(v);
                Ok(1)
            }
            None => {
                inc(&mut self.inbound.malformed_payload);
                Err(DispatchError::MalformedPayload(
                    aimdb_core::codec::DecodeError::Malformed,
                ))
            }
        }
    }

    fn next_job(&mut self) -> Option<Job> {
        if let Some(id) = self.busy.take() {
            return Some(Job::Busy(id));
        }
        // End notices before the next request.
        if let Some(id) = self.ended.iter_mut().find_map(Option::take) {
            return Some(Job::Ended(id));
        }
        if let Some(b) = self.pending.take() {
            return Some(Job::Request(b));
        }
        for n in 0..WATCHES {
            let k = (self.next + n) % WATCHES;
            if let Some(w) = self.watches[k] {
                if self.recs[w.rec].state.writes != w.seen {
                    self.next = (k + 1) % WATCHES;
                    return Some(Job::Update(k));
                }
            }
        }
        None
    }

    /// One pull: the jobs run until one's answer fits the buffer (those
    /// that do not are dropped and counted). The answer, the jobs run and
    /// the accepted `set`s among them.
    fn pull(&mut self) -> (Option<Vec<u8>>, Vec<Job>, Sets) {
        let mut jobs = Vec::new();
        let mut sets = Vec::new();
        while let Some(job) = self.next_job() {
            jobs.push(job.clone());
            inc(&mut self.c.answered);
            match self.answer(job, &mut sets) {
                Some(bytes) => {
                    inc(&mut self.sent);
                    return (Some(bytes), jobs, sets);
                }
                None => inc(&mut self.encode_errors),
            }
        }
        (None, jobs, sets)
    }

    /// The response if it fits, else `TooLarge` if that fits, else `None`.
    fn respond(&self, id: u32, result: Result<Body<'_>, RequestError>) -> Option<Vec<u8>> {
        let b = enc(&Response { id, result });
        if b.len() <= self.buf {
            return Some(b);
        }
        self.too_large(id)
    }

    fn too_large(&self, id: u32) -> Option<Vec<u8>> {
        let b = enc(&Response {
            id,
            result: Err(RequestError::TooLarge),
        });
        (b.len() <= self.buf).then_some(b)
    }

    /// The largest page (at most `PAGE` entries) that fits; `TooLarge` if
    /// not even one does.
    fn page<'a>(&self, id: u32, body: impl Fn(usize) -> Body<'a>) -> Option<Vec<u8>> {
        for n in (1..=PAGE).rev() {
            let b = enc(&Response {
                id,
                result: Ok(body(n)),
            });
            if b.len() <= self.buf {
                return Some(b);
            }
        }
        self.too_large(id)
    }

    fn get(&self, id: u32, i: usize) -> Option<Vec<u8>> {
        let s = &self.recs[i].state;
        let room = get_room(id, s.writes, self.buf);
        if self.buf < room {
            return self.too_large(id);
        }
        match &s.newest {
            Some(v) if v.len() > self.buf - room => self.too_large(id),
            v => self.respond(
                id,
                Ok(Body::Value {
                    writes: s.writes,
                    value: v.as_deref(),
                }),
            ),
        }
    }

    fn end(&mut self, id: u32) {
        // End notices go before anything that queues one: none is lost.
        let e = self.ended.iter_mut().find(|e| e.is_none());
        *e.expect("room for every end notice") = Some(id);
    }

    fn answer(&mut self, job: Job, sets: &mut Sets) -> Option<Vec<u8>> {
        let bytes = match job {
            Job::Busy(id) => return self.respond(id, Err(RequestError::Busy)),
            Job::Ended(id) => return self.respond(id, Ok(Body::Ended)),
            Job::Update(k) => return self.update(k),
            Job::Request(b) => b,
        };
        // The whole payload: bytes left over are malformed.
        let Ok((request, [])) = postcard::take_from_bytes::<Request<'_>>(&bytes) else {
            inc(&mut self.c.malformed);
            return self.respond(claimed_id(&bytes), Err(RequestError::Malformed));
        };
        let id = request.id;
        let total = DESCRIBED as u16;
        match request.op {
            Op::List { from } => {
                let from = usize::from(from).min(DESCRIBED);
                self.page(id, |n| Body::List {
                    total,
                    from: from as u16,
                    entries: self.specs[from..(from + n).min(DESCRIBED)]
                        .iter()
                        .map(|s| Entry {
                            name: s.name.into(),
                            kind: s.kind,
                            capacity: s.capacity,
                            writable: s.writable,
                            schema_hash: s.hash,
                        })
                        .collect(),
                })
            }
            Op::Stats { from } => {
                let from = usize::from(from).min(DESCRIBED);
                let connectors = if from == 0 {
                    vec![ConnectorStats {
                        name: "inbound".into(),
                        counters: link_counters(&self.inbound),
                        link: Some(LINK),
                        backlog: None,
                    }]
                } else {
                    Vec::new()
                };
                self.page(id, |n| Body::Stats {
                    total,
                    from: from as u16,
                    entries: (from..(from + n).min(DESCRIBED))
                        .map(|i| {
                            let s = &self.recs[i].state;
                            RecordStats {
                                name: NAMES[i],
                                writes: s.writes,
                                replaced: s.replaced,
                            }
                        })
                        .collect(),
                    connectors: connectors.clone(),
                    responder: self.c.stats(),
                })
            }
            Op::Describe { record } => match self.find(record) {
                Some(i) => {
                    let s = &self.specs[i];
                    let info = Info {
                        name: s.name.into(),
                        kind: s.kind,
                        capacity: s.capacity,
                        writable: s.writable,
                        codec: s.codec,
                        topics: s.topics.to_vec(),
                        schema_hash: s.hash,
                        schema: s.schema.into(),
                    };
                    self.respond(id, Ok(Body::Describe(info)))
                }
                None => self.respond(id, Err(RequestError::UnknownRecord)),
            },
            Op::Get { record } => match self.find(record) {
                Some(i) => self.get(id, i),
                None => self.respond(id, Err(RequestError::UnknownRecord)),
            },
            Op::Set { record, value } => {
                let r = match self.find(record) {
                    None => Err(RequestError::UnknownRecord),
                    Some(i) if !self.specs[i].writable => {
                        inc(&mut self.c.denied);
                        Err(RequestError::NotWritable)
                    }
                    Some(i) => match DECODE[i](value) {
                        None => Err(RequestError::Malformed),
                        Some(v) => {
                            sets.push((i, v.clone()));
                            self.recs[i].write(v);
                            Ok(Body::Written)
                        }
                    },
                };
                self.respond(id, r)
            }
            Op::Watch { record, credit } => match self.find(record) {
                None => self.respond(id, Err(RequestError::UnknownRecord)),
                Some(i) if credit == 0 => self.unwatch(id, i),
                Some(i) => self.watch(id, i, credit),
            },
            Op::Unwatch { record } => match self.find(record) {
                None => self.respond(id, Err(RequestError::UnknownRecord)),
                Some(i) => self.unwatch(id, i),
            },
        }
    }

    fn watch(&mut self, id: u32, i: usize, credit: u32) -> Option<Vec<u8>> {
        if let Some(w) = self.watches.iter_mut().flatten().find(|w| w.rec == i) {
            // Renewed: its values are not sent again.
            w.id = id;
            w.credit = credit;
            return self.respond(id, Ok(Body::Renewed));
        } else {
            let Some(k) = self.watches.iter().position(Option::is_none) else {
                return self.respond(id, Err(RequestError::Busy));
            };
            let r = &mut self.recs[i];
            if r.held >= r.slots {
                return self.respond(id, Err(RequestError::NotWatchable));
            }
            r.held += 1;
            self.watches[k] = Some(MWatch {
                rec: i,
                id,
                credit,
                seen: r.state.writes,
            });
        }
        self.get(id, i)
    }

    fn unwatch(&mut self, id: u32, i: usize) -> Option<Vec<u8>> {
        if let Some(k) = self
            .watches
            .iter()
            .position(|w| w.is_some_and(|w| w.rec == i))
        {
            let w = self.watches[k].take().expect("found");
            self.recs[i].held -= 1;
            if w.id != id {
                self.end(w.id);
            }
        }
        self.respond(id, Ok(Body::Ended))
    }

    fn update(&mut self, k: usize) -> Option<Vec<u8>> {
        let w = self.watches[k].expect("a due watch");
        inc(&mut self.c.updates);
        let writes = self.recs[w.rec].state.writes;
        if w.credit <= 1 {
            self.watches[k] = None;
            self.end(w.id);
            self.recs[w.rec].held -= 1;
        } else {
            let x = self.watches[k].as_mut().expect("a due watch");
            x.credit -= 1;
            x.seen = writes;
        }
        self.get(w.id, w.rec)
    }

    /// The link went: every watch ends without a word.
    fn replay(&mut self) {
        for w in self.watches.iter_mut().filter_map(Option::take) {
            self.recs[w.rec].held -= 1;
        }
        self.ended = [None; WATCHES];
    }

    fn watching(&self) -> usize {
        self.watches.iter().flatten().count()
    }
}

/// The id a request frame claims: its first varint, 0 if none reads (the
/// responder answers a malformed request under it).
fn claimed_id(payload: &[u8]) -> u32 {
    postcard::take_from_bytes::<u32>(payload).map_or(0, |(id, _)| id)
}

// ------------------------------------------------------------ the harness

struct Harness<'w, 'r> {
    records: &'w Records,
    responder: &'r Responder<Cs, REQ_MAX>,
    model: Model,
    /// Ids of every request frame the responder took (slot or busy).
    sent_ids: BTreeSet<u32>,
    consumer: Reader<'w, Cs, Mailbox<u8>, 2>,
}

impl Harness<'_, '_> {
    fn states(&self) -> Vec<State> {
        self.records.probes().iter().map(|p| p.state()).collect()
    }

    /// Model and node agree on everything observable.
    fn check(
        &self,
        dispatch: &inbound::Dispatch<'_, 4, 8>,
        routes: &Routes<'_, &'static Readiness<1>, 1, 1>,
        ctx: &dyn Fn() -> String,
    ) {
        let m = &self.model;
        let got = MCounters::of(&self.responder.stats());
        assert_eq!(got, m.c, "responder counters; {}", ctx());
        let out = routes.stats();
        assert_eq!(
            (out.sent, out.encode_errors),
            (m.sent, m.encode_errors),
            "answer route counters; {}",
            ctx()
        );
        // Every job answered is sent or dropped for its size, once.
        assert_eq!(
            got.answered,
            out.sent.wrapping_add(out.encode_errors),
            "answered == sent + encode_errors; {}",
            ctx()
        );
        assert_eq!(*dispatch.stats(), m.inbound, "dispatch counters; {}", ctx());
        assert_eq!(
            self.records.inbound.0.snapshot(),
            m.inbound,
            "shared counters; {}",
            ctx()
        );
        assert_eq!(
            self.responder.watching(),
            m.watching(),
            "watches; {}",
            ctx()
        );
        let states = self.states();
        for (i, (got, want)) in states.iter().zip(&m.recs).enumerate() {
            assert_eq!(*got, want.state, "record {}; {}", NAMES[i], ctx());
        }
        assert_eq!(states[SECRET].writes, 0, "undescribed record written");
    }

    /// One frame, dispatched with allocations counted.
    fn frame(
        &mut self,
        dispatch: &mut inbound::Dispatch<'_, 4, 8>,
        routes: &Routes<'_, &'static Readiness<1>, 1, 1>,
        to: To,
        payload: &[u8],
    ) {
        let ctx = || format!("frame to {to:?}: {payload:02x?}");
        let before = self.states();
        let (stats0, resp0) = (*dispatch.stats(), self.responder.stats());
        let (topic, want) = match to {
            To::Framed | To::Mqtt | To::Retained => {
                let retained = matches!(to, To::Retained);
                let want = self.model.request_frame(payload, retained);
                (REQ_TOPICS[matches!(to, To::Mqtt) as usize], want)
            }
            To::Cmd | To::CmdRetained => {
                let want = self.model.cmd_frame(payload, matches!(to, To::CmdRetained));
                (CMD_TOPIC, want)
            }
            To::Response => {
                inc(&mut self.model.inbound.unknown_topic);
                (RSP, Err(DispatchError::UnknownTopic))
            }
        };
        let retained = matches!(to, To::Retained | To::CmdRetained);
        let a = allocs();
        let got = if retained {
            dispatch.dispatch_retained(topic.as_bytes(), payload)
        } else {
            dispatch.dispatch(topic.as_bytes(), payload)
        };
        assert_eq!(allocs() - a, 0, "allocated while dispatching; {}", ctx());
        match (got, want) {
            (Err(DispatchError::MalformedPayload(_)), Err(DispatchError::MalformedPayload(_))) => {}
            (got, want) => assert_eq!(got, want, "dispatch result; {}", ctx()),
        }

        let (stats1, resp1) = (*dispatch.stats(), self.responder.stats());
        if matches!(to, To::Framed | To::Mqtt | To::Retained) {
            // Each request frame is counted exactly once: taken, busy,
            // too large, or a retained one skipped.
            let d = |a: u32, b: u32| b.wrapping_sub(a);
            let taken = d(resp0.requests, resp1.requests);
            let busy = d(resp0.busy, resp1.busy);
            let too_large = d(stats0.payload_too_large, stats1.payload_too_large);
            let skipped = d(stats0.retained_ignored, stats1.retained_ignored);
            assert_eq!(
                taken + busy + too_large + skipped,
                1,
                "a request frame counted once; {}",
                ctx()
            );
            assert_eq!(
                d(stats0.total_rejected(), stats1.total_rejected()),
                too_large,
                "{}",
                ctx()
            );
            assert_eq!(
                d(stats0.delivered, stats1.delivered),
                taken + busy,
                "delivered == taken + busy; {}",
                ctx()
            );
            if taken + busy == 1 {
                self.sent_ids.insert(claimed_id(payload));
            }
            // Requests run on the answer side, never in the dispatch.
            assert_eq!(self.states(), before, "a request frame wrote; {}", ctx());
        }
        self.check(dispatch, routes, &ctx);
    }

    /// Up to `n` pulls; each must find an answer exactly when the model
    /// has one due.
    fn pull(
        &mut self,
        dispatch: &inbound::Dispatch<'_, 4, 8>,
        routes: &mut Routes<'_, &'static Readiness<1>, 1, 1>,
        n: usize,
    ) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        for k in 0..n {
            let before = self.states();
            let a = allocs();
            let got = match routes.poll_next(&mut cx) {
                Poll::Ready(m) => {
                    let used = allocs() - a;
                    Some((used, m.topic == RSP, m.payload.to_vec()))
                }
                Poll::Pending => {
                    let used = allocs() - a;
                    assert_eq!(used, 0, "allocated while pulling (none due)");
                    None
                }
            };
            let (want, jobs, sets) = self.model.pull();
            let ctx = || format!("pull: jobs {jobs:02x?}; buffer {}", self.model.buf);
            let Some((used, on_rsp, bytes)) = got else {
                assert_eq!(want, None, "no answer, model has one due; {}", ctx());
                self.check(dispatch, routes, &ctx);
                return k;
            };
            assert_eq!(used, 0, "allocated while answering; {}", ctx());
            assert!(on_rsp, "answer on the answer topic; {}", ctx());
            let r: Response<Body> = postcard::from_bytes(&bytes)
                .unwrap_or_else(|e| panic!("answer {bytes:02x?} does not decode ({e}); {}", ctx()));
            assert!(
                self.sent_ids.contains(&r.id),
                "answer {r:?} under an id never sent; {}",
                ctx()
            );
            let Some(want) = want else {
                panic!("answer {r:?}, model has none due; {}", ctx());
            };
            if bytes != want {
                let w: Response<Body> = postcard::from_bytes(&want).expect("model decodes");
                panic!("answer\n  {r:?}\nmodel\n  {w:?}\n{}", ctx());
            }
            // Only accepted `set`s write, each its target, exactly once,
            // with the decoded value.
            let after = self.states();
            for (i, (b, a)) in before.iter().zip(&after).enumerate() {
                let mine: Vec<_> = sets.iter().filter(|(t, _)| *t == i).collect();
                match mine.last() {
                    None => assert_eq!(a, b, "{} changed; {}", NAMES[i], ctx()),
                    Some((_, v)) => {
                        assert!(i < DESCRIBED && self.model.specs[i].writable);
                        assert_eq!(a.writes, b.writes + mine.len() as u64, "{}", ctx());
                        assert_eq!(a.newest.as_ref(), Some(v), "{} value; {}", NAMES[i], ctx());
                    }
                }
            }
            self.check(dispatch, routes, &ctx);
        }
        n
    }

    fn app_write(&mut self, v: AppValue) {
        let r = self.records;
        match v {
            AppValue::Readings(a, b) => r.readings.write((a, b)),
            AppValue::Led(x) => r.led.write(x),
            AppValue::Cmd(x) => r.cmd.write(x),
            AppValue::Level(x) => r.level.write(x),
            AppValue::Config(a, b) => r.config.write((a, b)),
            AppValue::Fill(k, x) => r.fill[usize::from(k % 4)].write(x),
        }
        let (i, bytes) = v.encode();
        self.model.recs[i].write(bytes);
    }

    fn take(&mut self) {
        let got = self.consumer.try_recv();
        let want = self.model.recs[2].state.newest.take();
        match want {
            Some(v) => assert_eq!(got.map(|x| vec![x]), Ok(v), "the command taken"),
            None => assert_eq!(got, Err(TryRecvError::Empty), "no command"),
        }
    }
}

/// One input over records nothing else borrows once it returns.
fn run(input: &Input, records: &'static Records, table: &'static Table) {
    let buf = 4 + usize::from(input.buf);
    let responder: Responder<Cs, REQ_MAX> =
        Responder::new(&table.descriptions).with_connectors(&table.connectors);
    let cmd_in = inbound::Link::new(&records.cmd, Postcard);
    let mut b = Dispatch::<4, 8>::builder();
    b.link(REQ_TOPICS[0], &responder)
        .link(REQ_TOPICS[1], &responder)
        .link(CMD_TOPIC, &cmd_in)
        .counters(&records.inbound.0);
    let mut dispatch = b.build().expect("the table is valid");
    let mut answers = outbound::Link::new(responder.requests(), RSP, responder.answers());
    let mut payload = vec![0u8; buf];
    let mut b = Routes::<_, 1, 1>::builder(&records.ready, &mut payload);
    b.link(&mut answers);
    let mut routes = b.build().expect("the routes are valid");

    let mut h = Harness {
        records,
        responder: &responder,
        model: Model::new(buf),
        sent_ids: BTreeSet::new(),
        consumer: records.cmd.subscribe().expect("a free slot"),
    };
    let _level_reader = records.level.subscribe().expect("a free slot");
    h.model.recs[2].held = 1;
    h.model.recs[3].held = 1;
    records.link.write(LINK);
    h.app_write(AppValue::Readings(1, -5));
    h.app_write(AppValue::Level(300));
    h.check(&dispatch, &routes, &|| "start".into());

    for step in input.steps.iter().take(48) {
        match step {
            Step::Request { to, id, op, edit } => {
                let bytes = request_bytes(*id, op, edit);
                h.frame(&mut dispatch, &routes, *to, &bytes);
            }
            Step::Raw { to, payload } => h.frame(&mut dispatch, &routes, *to, payload),
            Step::Pull(n) => {
                h.pull(&dispatch, &mut routes, 1 + usize::from(n % 4));
            }
            Step::Write(v) => {
                h.app_write(*v);
                h.check(&dispatch, &routes, &|| format!("write {v:?}"));
            }
            Step::Take => {
                h.take();
                h.check(&dispatch, &routes, &|| "take".into());
            }
            Step::Replay => {
                routes.replay_latest();
                h.model.replay();
                h.check(&dispatch, &routes, &|| "replay".into());
            }
        }
    }

    // Everything due is answered (each pull runs at least one job or
    // finds none: a bounded queue).
    let mut left = 64;
    while h.pull(&dispatch, &mut routes, 1) == 1 {
        left -= 1;
        assert!(left > 0, "answers never run out");
    }
    assert!(h.model.pending.is_none() && h.model.busy.is_none());
    // Whatever came before, a good request is still answered.
    let good = request_bytes(0xA1DB, &OpIn::Get(NameIn::Known(1)), &Edit::None);
    h.frame(&mut dispatch, &routes, To::Framed, &good);
    let answered = h.pull(&dispatch, &mut routes, 1) == 1;
    // Below the room a `get` keeps for its header it is `TooLarge`, and
    // below that answer's 5 bytes it is dropped (counted); the model
    // checked which.
    assert!(answered || buf < 5, "the good request answered");
    assert_eq!(h.model.c.requests, h.responder.stats().requests);
}

fuzz_target!(|input: Input| {
    // Positive control: a broken counter must not pass silently.
    let a = allocs();
    black_box(Vec::<u8>::with_capacity(black_box(8)));
    assert!(allocs() > a, "the allocation counter counts");

    // The descriptions need `'static` records; each input gets fresh ones
    // (records cannot be reset), freed after the input.
    let records: &'static Records = Box::leak(Box::new(Records::new()));
    let table: &'static Table = Box::leak(Box::new(Table::new(records)));
    run(&input, records, table);
    // SAFETY: both came from `Box::leak` above. `run` returns nothing that
    // borrows them, and every value it made from them (responder, tables,
    // readers) was dropped before it returned; the only pointers left to
    // them are the table's into the records, and the records' stored
    // wakers into their own `Readiness`, all freed here with their
    // targets, table first.
    unsafe {
        drop(Box::from_raw(table as *const Table as *mut Table));
        drop(Box::from_raw(records as *const Records as *mut Records));
    }
});
