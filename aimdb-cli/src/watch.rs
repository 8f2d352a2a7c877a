//! `aimdb watch`: a live table of records, fed by the node's watches
//! (`Op::Watch`), sampled once a second.
//!
//! Each record gets one watch with [`CREDIT`] updates, renewed (a new
//! `Watch` request, which the node answers `Renewed` and takes the new id
//! and credit from) when fewer than [`RENEW_BELOW`] remain or [`REFRESH`]
//! has passed, and started again if its stream ends unasked. A watch the
//! node runs already for another client is renewed too: its current
//! value is then read with one `get`. A record the node will not watch (`NotWatchable`, `Busy`, or
//! `Malformed` from a node that predates watches) is polled with `get`
//! once a second instead. On exit every watch is stopped with `Unwatch`.
//!
//! The node's request slot holds one request at a time, so requests go
//! one after another; updates that arrive while an answer is awaited are
//! taken as they come.

use std::io::IsTerminal;
use std::time::Duration;

use aimdb_core::remote::proto::Body;
use aimdb_core::remote::{Op, RequestError};
use serde::{Serialize, Serializer};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::query::{info, list_all, unexpected, RecordInfo};
use crate::transport::{Client, Reply, BUSY_PAUSE};
use crate::view::{clip, kind_name, one_decimal, one_decimal_opt, render, View};
use crate::{table, Cli, Fail};

/// Updates granted per watch request.
pub const CREDIT: u32 = 64;
/// A watch is renewed when fewer updates than this are left.
pub const RENEW_BELOW: u32 = 32;
/// A watch is renewed at least this often, so one the node ended without
/// a word (its link reconnected) is started again.
pub const REFRESH: Duration = Duration::from_secs(10);
/// After a renewal was refused `Busy`, wait this long before the next.
const RENEW_PAUSE: Duration = Duration::from_millis(250);

/// How a record's values reach us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A watch.
    Watch,
    /// `get` once a second: the node would not watch it.
    Poll,
}

/// What the values received say about a record's writes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The node's write count with the newest value (`None` before the
    /// first).
    pub writes: Option<u64>,
    /// Writes since the first value (a node restart does not undo them).
    pub delta: u64,
    /// Values received since the first that carried writes not seen
    /// before.
    pub seen: u64,
    /// The newest value (postcard).
    pub value: Option<Vec<u8>>,
}

impl Tally {
    /// Takes a value covering `writes` writes.
    pub fn take(&mut self, writes: u64, value: Option<Vec<u8>>) {
        match self.writes {
            // The first: the start, not a value "seen since".
            None => {}
            Some(w) if writes > w => {
                self.delta += writes - w;
                self.seen += 1;
            }
            // The same writes again (a poll with nothing new): nothing new
            // seen.
            Some(w) if writes == w => {}
            // Fewer: the node restarted and counts from 0 again. Its
            // counter is followed from here; delta and seen stay.
            Some(_) => {}
        }
        self.writes = Some(writes);
        self.value = value;
    }

    /// Writes not seen as values: every value covers at least one write,
    /// the others it covers were lost to sampling.
    pub fn lag(&self) -> u64 {
        self.delta.saturating_sub(self.seen)
    }
}

/// One watched record.
struct Rec {
    info: RecordInfo,
    mode: Mode,
    /// The id the node's updates carry (`None`: no watch running).
    id: Option<u32>,
    /// Updates left of the credit last granted, as counted here.
    credit: u32,
    /// When the credit was granted.
    granted: Instant,
    /// Its stream ended unasked: start it again.
    restart: bool,
    /// No renewal before this (one was refused `Busy`).
    hold: Option<Instant>,
    /// A `Watch` was sent for it: it may be running on the node, even if
    /// its answer never came.
    asked: bool,
    tally: Tally,
    /// `delta` and time at the previous sample.
    prev: Option<(u64, Instant)>,
}

impl Rec {
    fn due(&self, now: Instant) -> bool {
        if self.mode != Mode::Watch || self.hold.is_some_and(|h| now < h) {
            return false;
        }
        match self.id {
            None => self.restart,
            Some(_) => self.credit < RENEW_BELOW || now >= self.granted + REFRESH,
        }
    }
}

struct Watcher<'c> {
    c: &'c mut Client,
    recs: Vec<Rec>,
    timeout: Duration,
    /// Unwatching: the streams' ends are asked for.
    stopping: bool,
}

impl Watcher<'_> {
    /// A value or end under a watch's id.
    fn handle(&mut self, r: Reply) {
        let Some(rec) = self
            .recs
            .iter_mut()
            .find(|x| x.mode == Mode::Watch && x.id == Some(r.id))
        else {
            // An earlier watch's id (renewed since), or not ours.
            return;
        };
        match r.body() {
            Ok(Body::Value { writes, value }) => {
                rec.credit = rec.credit.saturating_sub(1);
                rec.tally.take(writes, value.map(<[u8]>::to_vec));
            }
            Ok(Body::Ended) => {
                rec.id = None;
                rec.restart = !self.stopping;
            }
            // Nothing else comes under a watch's id.
            _ => {}
        }
    }

    /// Sends `op` and waits for its answer until `deadline`, taking the
    /// updates that arrive meanwhile; asks once more if the node was busy.
    /// `None` if no answer came in time.
    async fn request(&mut self, op: Op<'_>, deadline: Instant) -> Result<Option<Reply>, Fail> {
        let mut retried = false;
        loop {
            let id = self.c.send(op.clone()).await?;
            let reply = loop {
                match self.c.recv(deadline).await? {
                    None => return Ok(None),
                    Some(r) if r.id == id => break r,
                    Some(r) => self.handle(r),
                }
            };
            if !retried && matches!(reply.body(), Err(Fail::Node(RequestError::Busy))) {
                retried = true;
                self.pause(BUSY_PAUSE.min(deadline.saturating_duration_since(Instant::now())))
                    .await?;
                continue;
            }
            return Ok(Some(reply));
        }
    }

    /// Waits `d`, taking updates meanwhile.
    async fn pause(&mut self, d: Duration) -> Result<(), Fail> {
        let until = Instant::now() + d;
        while let Some(r) = self.c.recv(until).await? {
            self.handle(r);
        }
        Ok(())
    }

    fn no_answer(&self) -> Fail {
        Fail::Timeout(format!("no answer within {:?}", self.timeout))
    }

    /// Starts or renews record `i`'s watch; falls back to polling if the
    /// node will not watch it.
    async fn watch(&mut self, i: usize) -> Result<(), Fail> {
        let name = self.recs[i].info.name.clone();
        self.recs[i].asked = true;
        let deadline = Instant::now() + self.timeout;
        let op = Op::Watch {
            record: &name,
            credit: CREDIT,
        };
        let Some(reply) = self.request(op, deadline).await? else {
            return Err(self.no_answer());
        };
        let rec = &mut self.recs[i];
        let body = reply.body();
        if let Ok(Body::Value { .. } | Body::Renewed) = body {
            rec.id = Some(reply.id);
            rec.credit = CREDIT;
            rec.granted = Instant::now();
            rec.restart = false;
            rec.hold = None;
        }
        match body {
            Ok(Body::Value { writes, value }) => {
                rec.tally.take(writes, value.map(<[u8]>::to_vec));
                Ok(())
            }
            // The watch ran already: it runs on with the new id and
            // credit. Its values came here, unless it was another
            // client's: then the current value is read once.
            Ok(Body::Renewed) if rec.tally.writes.is_some() => Ok(()),
            Ok(Body::Renewed) => self.poll(i).await,
            // A renewal of a running watch: it runs on; ask again later.
            Err(Fail::Node(RequestError::Busy)) if rec.id.is_some() => {
                rec.hold = Some(Instant::now() + RENEW_PAUSE);
                Ok(())
            }
            // Malformed: a node older than watches cannot decode the op.
            Err(Fail::Node(
                e @ (RequestError::Busy | RequestError::NotWatchable | RequestError::Malformed),
            )) => {
                rec.mode = Mode::Poll;
                rec.id = None;
                rec.asked = false;
                let why = if e == RequestError::Malformed {
                    "the node does not take watch requests".to_string()
                } else {
                    e.to_string()
                };
                eprintln!("aimdb: watch {name}: {why}; polling it once a second instead");
                Ok(())
            }
            Err(e) => Err(e),
            Ok(b) => Err(unexpected(&b)),
        }
    }

    /// One `get` of a polled record.
    async fn poll(&mut self, i: usize) -> Result<(), Fail> {
        let name = self.recs[i].info.name.clone();
        let deadline = Instant::now() + self.timeout;
        let Some(reply) = self.request(Op::Get { record: &name }, deadline).await? else {
            return Err(self.no_answer());
        };
        match reply.body()? {
            Body::Value { writes, value } => {
                self.recs[i].tally.take(writes, value.map(<[u8]>::to_vec));
                Ok(())
            }
            b => Err(unexpected(&b)),
        }
    }

    /// Renewals and restarts that are due.
    async fn maintain(&mut self) -> Result<(), Fail> {
        for i in 0..self.recs.len() {
            if self.recs[i].due(Instant::now()) {
                self.watch(i).await?;
            }
        }
        Ok(())
    }

    /// Stops every watch, waiting for each answer until the timeout (all
    /// of them together).
    async fn unwatch_all(&mut self) -> Result<(), Fail> {
        self.stopping = true;
        let deadline = Instant::now() + self.timeout;
        for i in 0..self.recs.len() {
            // Every watch asked for, answered or not (one whose stream
            // ended is answered `Ended` at once).
            if self.recs[i].mode != Mode::Watch || !self.recs[i].asked {
                continue;
            }
            let name = self.recs[i].info.name.clone();
            let reply = self
                .request(Op::Unwatch { record: &name }, deadline)
                .await?;
            match reply.as_ref().map(Reply::body) {
                Some(Ok(Body::Ended)) => self.recs[i].id = None,
                Some(Err(e)) => eprintln!("aimdb: watch: unwatch {name}: {e}"),
                Some(Ok(b)) => eprintln!("aimdb: watch: unwatch {name}: {}", unexpected(&b)),
                None => {
                    eprintln!(
                        "aimdb: watch: unwatch {name}: no answer within {:?}",
                        self.timeout
                    );
                    break;
                }
            }
        }
        Ok(())
    }

    /// One sample: the table or a JSON line.
    fn sample(&mut self, cli: &Cli, tty: bool, t: f64) -> Result<(), Fail> {
        let now = Instant::now();
        let mut records = Vec::with_capacity(self.recs.len());
        for r in &mut self.recs {
            let tally = &r.tally;
            let rate = r.prev.map(|(d, at)| {
                let dt = now.duration_since(at).as_secs_f64();
                if dt > 0.0 {
                    tally.delta.saturating_sub(d) as f64 / dt
                } else {
                    0.0
                }
            });
            r.prev = Some((tally.delta, now));
            records.push(Row {
                name: r.info.name.clone(),
                kind: kind_name(r.info.kind),
                writes: tally.writes,
                rate,
                lag: tally.lag(),
                value: tally
                    .value
                    .as_deref()
                    .map(|b| r.info.decode(b))
                    .transpose()?,
            });
        }
        let text = render(&Sample { t, records }, cli.json)?;
        if !cli.json && tty {
            // Home and clear, then the fresh table.
            print!("\x1b[H\x1b[2J");
        }
        print!("{text}");
        if !cli.json && !tty {
            println!();
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        Ok(())
    }

    /// Starts the watches, then samples once a second until `seconds`
    /// have passed or `stop` fires.
    async fn run(
        &mut self,
        cli: &Cli,
        seconds: Option<u64>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Result<(), Fail> {
        let start = Instant::now();
        for i in 0..self.recs.len() {
            if stop.try_recv().is_ok() {
                return Ok(());
            }
            self.watch(i).await?;
        }
        let tty = std::io::stdout().is_terminal();
        let mut tick = 0u64;
        loop {
            for i in 0..self.recs.len() {
                if self.recs[i].mode == Mode::Poll {
                    self.poll(i).await?;
                }
            }
            self.sample(cli, tty, start.elapsed().as_secs_f64())?;
            tick += 1;
            if seconds.is_some_and(|s| tick > s) {
                return Ok(());
            }
            let next = start + Duration::from_secs(tick);
            loop {
                self.maintain().await?;
                let got = tokio::select! {
                    biased;
                    _ = &mut *stop => return Ok(()),
                    r = self.c.recv(next) => r?,
                };
                match got {
                    Some(r) => self.handle(r),
                    None => break,
                }
            }
        }
    }
}

/// One sample of every watched record.
#[derive(Serialize)]
struct Sample {
    /// Seconds since the start.
    #[serde(serialize_with = "one_decimal")]
    t: f64,
    /// By name in JSON; in watch order in the table.
    #[serde(serialize_with = "by_name")]
    records: Vec<Row>,
}

/// One record in a [`Sample`].
#[derive(Serialize)]
struct Row {
    #[serde(skip)]
    name: String,
    kind: String,
    writes: Option<u64>,
    /// Writes per second since the previous sample.
    #[serde(serialize_with = "one_decimal_opt")]
    rate: Option<f64>,
    lag: u64,
    value: Option<Value>,
}

fn by_name<S: Serializer>(rows: &[Row], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(rows.iter().map(|r| (&r.name, r)))
}

impl View for Sample {
    fn text(&self) -> String {
        table::of(
            &["RECORD", "KIND", "WRITES", "WRITES/S", "LAG", "VALUE"],
            &self.records,
            |r| {
                vec![
                    r.name.clone(),
                    r.kind.clone(),
                    r.writes.map_or("-".into(), |w| w.to_string()),
                    r.rate.map_or("-".into(), |r| format!("{r:.1}")),
                    r.lag.to_string(),
                    r.value
                        .as_ref()
                        .map_or("-".into(), |v| clip(v.to_string(), 60)),
                ]
            },
        )
    }
}

/// `aimdb watch`.
pub async fn watch(
    cli: &Cli,
    c: &mut Client,
    records: &[String],
    seconds: Option<u64>,
) -> Result<(), Fail> {
    // Ctrl-C stops the loop, so the watches are stopped before exit.
    let (tx, mut stop) = oneshot::channel();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(());
        } else {
            // No handler: never fire (the default action stays).
            std::future::pending::<()>().await;
        }
    });

    let names: Vec<String> = if records.is_empty() {
        list_all(c).await?
    } else {
        records.to_vec()
    };
    let mut recs = Vec::with_capacity(names.len());
    for n in &names {
        recs.push(Rec {
            info: info(c, n).await?,
            mode: Mode::Watch,
            id: None,
            credit: 0,
            granted: Instant::now(),
            restart: false,
            hold: None,
            asked: false,
            tally: Tally::default(),
            prev: None,
        });
    }
    let timeout = cli.timeout()?;
    let mut w = Watcher {
        c,
        recs,
        timeout,
        stopping: false,
    };
    let r = w.run(cli, seconds, &mut stop).await;
    ctrl_c.abort();
    // Stop the watches whatever ended the loop, unless the link is gone.
    if matches!(r, Err(Fail::Unreachable(_))) {
        return r;
    }
    let u = w.unwatch_all().await;
    r.and(u)
}

#[cfg(test)]
mod tests {
    use super::Tally;

    #[test]
    fn lag_counts_writes_no_value_showed() {
        let mut t = Tally::default();
        t.take(10, Some(vec![1]));
        assert_eq!((t.delta, t.seen, t.lag()), (0, 0, 0));
        // A ring written faster than updates go: 5 writes, one value.
        t.take(15, Some(vec![2]));
        t.take(20, Some(vec![3]));
        assert_eq!((t.delta, t.seen, t.lag()), (10, 2, 8));
        // Every write seen: no lag added.
        t.take(21, Some(vec![4]));
        assert_eq!(t.lag(), 8);
        // The newest value again (a poll with nothing new): nothing new.
        t.take(21, Some(vec![4]));
        assert_eq!((t.delta, t.seen), (11, 3));
        assert_eq!(t.value, Some(vec![4]));
    }

    #[test]
    fn a_node_restart_does_not_undo_counts() {
        let mut t = Tally::default();
        t.take(100, None);
        t.take(104, Some(vec![1]));
        t.take(2, Some(vec![2]));
        assert_eq!((t.delta, t.seen, t.writes), (4, 1, Some(2)));
        t.take(5, Some(vec![3]));
        assert_eq!((t.delta, t.seen, t.lag()), (7, 2, 5));
    }
}
