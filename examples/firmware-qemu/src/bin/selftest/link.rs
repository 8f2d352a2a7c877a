//! `framed_link_state`: two framed connectors with the heartbeat over an
//! in-memory pipe. A task awaiting side A's `Latest<LinkState>` record
//! wakes when the link comes up (B's hello, with B's sequence) and again
//! when B stops: A hears nothing past the timeout and reports the link
//! offline, cause `Silent`.

use aimdb_connectors::framed::{Config, Counters, Error, Framed, Heartbeat};
use aimdb_connectors::loopback::Pair;
use aimdb_core::inbound::Dispatch;
use aimdb_core::presence::{Cause, LinkState};
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use core::time::Duration;
use cortex_m_semihosting::hprintln;
use embassy_futures::join::join;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use aimdb_connectors::clock::EmbassyClock;
use embassy_time::with_timeout;

static LINK: Record<Cs, Latest<LinkState>, 1> = Record::new("fw-link");
static PIPE: Pair<Cs, 128> = Pair::new();
static A_STATS: Counters = Counters::new();
static B_STATS: Counters = Counters::new();
static A_READY: Readiness<1> = Readiness::new();
static B_READY: Readiness<1> = Readiness::new();

pub async fn framed_link_state() -> bool {
    let Ok(mut reader) = LINK.subscribe() else {
        return false;
    };
    let mut config = Config::new();
    config.heartbeat = Some(Heartbeat::new(
        Duration::from_millis(50),
        Duration::from_millis(150),
    ));
    let mut a = Framed::<64, 64>::with_sizes(&A_STATS)
        .with_config(config)
        .with_link(&LINK);
    config.first_seq = 5;
    let mut b = Framed::<64, 64>::with_sizes(&B_STATS).with_config(config);
    let (Ok(mut a_in), Ok(mut b_in)) = (
        Dispatch::<1, 1>::builder().build(),
        Dispatch::<1, 1>::builder().build(),
    ) else {
        return false;
    };
    let (Ok(mut a_out), Ok(mut b_out)) = (
        Routes::<_, 1, 1>::builder(&A_READY, &mut []).build(),
        Routes::<_, 1, 1>::builder(&B_READY, &mut []).build(),
    ) else {
        return false;
    };
    let ((a_rx, a_tx), (b_rx, b_tx)) = (PIPE.a(), PIPE.b());

    let a_run = a.run_with_clock(a_rx, a_tx, EmbassyClock, &mut a_in, &mut a_out);
    // The task awaiting the link record (B runs until it saw the link up).
    let watch = async {
        let peer = b.run_with_clock(b_rx, b_tx, EmbassyClock, &mut b_in, &mut b_out);
        let up = match select(peer, reader.recv()).await {
            Either::First(_) => return None,
            Either::Second(s) => s.ok()?,
        };
        // B stopped (its run dropped, the pipe still open): A must hear
        // the silence.
        let down = reader.recv().await.ok()?;
        Some((up, down))
    };
    let Ok((end, seen)) = with_timeout(embassy_time::Duration::from_secs(5), join(a_run, watch)).await
    else {
        hprintln!("  link state: timed out");
        return false;
    };
    ensure!(seen == Some((LinkState::online(5), LinkState::offline(5, Cause::Silent))));
    ensure!(end == Error::PeerSilent);
    let s = A_STATS.snapshot();
    ensure!(s.peer_silent == 1 && s.heartbeats_received >= 1 && s.received == 0);
    ensure!(s.heartbeats_sent >= 1);
    true
}
