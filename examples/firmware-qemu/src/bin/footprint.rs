//! Footprint probe: the framed-stream connector on UART0 with N outbound
//! and N inbound routes, or 2N of one kind (features `double-out`,
//! `double-in`). Records, topics and buffers are the same in every build,
//! so the static-RAM difference between builds is what N routes cost:
//! links, table slots, bitmap bits. `cargo xtask firmware footprint`
//! builds the three variants and writes `data/baselines/firmware_size.json`.
#![no_std]
#![no_main]

use aimdb_connectors::framed::{Framed, Counters};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use cortex_m_rt::exception;
use embassy_executor::Spawner;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use firmware_qemu::{fail, uart};

/// Routes of each kind in the base build.
const BASE: usize = 16;
const MAX: usize = 2 * BASE;
const OUT: usize = if cfg!(feature = "double-out") {
    MAX
} else {
    BASE
};
const IN: usize = if cfg!(feature = "double-in") {
    MAX
} else {
    BASE
};

type Rec = Record<Cs, Latest<u32>, 1>;
static OUT_RECS: [Rec; MAX] = [const { Record::new("out") }; MAX];
static IN_RECS: [Rec; MAX] = [const { Record::new("in") }; MAX];
static TOPICS: [&str; MAX] = [
    "f/0", "f/1", "f/2", "f/3", "f/4", "f/5", "f/6", "f/7", "f/8", "f/9", "f/10", "f/11", "f/12",
    "f/13", "f/14", "f/15", "f/16", "f/17", "f/18", "f/19", "f/20", "f/21", "f/22", "f/23", "f/24",
    "f/25", "f/26", "f/27", "f/28", "f/29", "f/30", "f/31",
];
/// One bitmap word serves up to 32 routes: the same in every build.
static READY: Readiness<1> = Readiness::new();
static STATS: Counters = Counters::new();

#[embassy_executor::main]
async fn main(_spawner: Spawner) {
    let Some((mut rx, mut tx)) = uart::take() else {
        fail()
    };
    let mut out: [_; OUT] = core::array::from_fn(|i| {
        let Ok(reader) = OUT_RECS[i].subscribe() else {
            fail()
        };
        outbound::Link::new(reader, TOPICS[i], Postcard)
    });
    let mut payload = [0u8; 16];
    // Builders in their own blocks: a builder that is only moved from
    // would otherwise keep its slot in the task's state across the awaits
    // below (rustc lays out async state by scope, not by last use), which
    // doubles the per-route cost.
    let mut routes = {
        let mut b = Routes::<_, 1, OUT>::builder(&READY, &mut payload);
        for l in &mut out {
            b.link(l);
        }
        let Ok(routes) = b.build() else { fail() };
        routes
    };
    let links: [_; IN] = core::array::from_fn(|i| inbound::Link::new(&IN_RECS[i], Postcard));
    let mut dispatch = {
        let mut b = Dispatch::<IN, 2>::builder();
        for (t, l) in TOPICS.iter().zip(&links) {
            b.link(t, l);
        }
        let Ok(dispatch) = b.build() else { fail() };
        dispatch
    };
    let mut framed = Framed::<64, 128>::with_sizes(&STATS);
    loop {
        framed
            .run(&mut rx, &mut tx, &mut dispatch, &mut routes)
            .await;
    }
}

#[exception]
unsafe fn DefaultHandler(irqn: i16) {
    firmware_qemu::on_interrupt(irqn);
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    fail()
}
