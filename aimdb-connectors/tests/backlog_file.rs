//! A host backlog over a file survives SIGKILL of its process: a child
//! process stores and removes values as fast as it can and is killed
//! mid-stream, three times over the same file; after each kill the file
//! holds one unbroken, ordered run of values that starts no later than
//! the child last reported removing and ends no earlier than it last
//! reported storing.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use aimdb_connectors::backlog::{page_cache, Backlog, Counters, Error, FileFlash, Full, PageCache};
use aimdb_connectors::clock::Instant;
use aimdb_core::connector::{Message, QoS};
use futures::executor::block_on;

const PAGES: u32 = 16;

/// What a host keeps in RAM to make each call cheap: the state of every
/// page and where its items are.
type Cached = PageCache<16>;
const RANGE: core::ops::Range<u32> = 0..PAGES * <FileFlash>::PAGE as u32;

fn msg(payload: &[u8]) -> Message<'_> {
    Message {
        route: 0,
        topic: "plant/line-1/temp",
        payload,
        lagged: 0,
        qos: QoS::AtLeastOnce,
        retain: false,
        urgent: false,
    }
}

fn open<'c>(path: &str, boot: u32, counters: &'c Counters) -> Backlog<'c, FileFlash, Cached> {
    let flash = FileFlash::open(path, PAGES).expect("open the backlog file");
    let mut buf = [0u8; 128];
    block_on(Backlog::open(
        flash,
        RANGE,
        page_cache(),
        boot,
        Full::RefuseNewest,
        counters,
        &mut buf,
    ))
    .expect("open the backlog")
}

/// Hands out and removes the `n` oldest values; how many went.
async fn remove<C: aimdb_connectors::backlog::cache::CacheImpl<()>>(
    b: &mut Backlog<'_, FileFlash, C>,
    n: u32,
    buf: &mut [u8],
) -> u32 {
    let mut k = 0;
    while k < n && b.next(buf).await.unwrap().is_some() {
        b.sent();
        k += 1;
    }
    b.delivered(k, Instant::from_micros(0), buf).await.unwrap();
    k
}

/// The child: stores values from `BACKLOG_START` on, removing a few
/// every seventh value and a batch whenever the file is full, printing
/// `oldest next` (the oldest value left, the next to store) after each
/// step, until it is killed (bounded: 200,000 values).
#[test]
#[ignore = "the child process of a_file_backlog_survives_sigkill, started by it"]
fn backlog_child() {
    let path = std::env::var("BACKLOG_FILE").unwrap();
    let start: u32 = std::env::var("BACKLOG_START").unwrap().parse().unwrap();
    let boot: u32 = std::env::var("BACKLOG_BOOT").unwrap().parse().unwrap();
    let counters = Counters::new();
    let mut b = open(&path, boot, &counters);
    let mut out = std::io::stdout().lock();
    let mut buf = [0u8; 128];
    // What an earlier child left is still to go: its oldest first.
    let mut oldest = start - b.depth();
    block_on(async {
        for v in start..start + 200_000 {
            loop {
                match b
                    .push(&msg(&v.to_le_bytes()), Instant::from_micros(0), &mut buf)
                    .await
                {
                    Ok(_) => break,
                    Err(Error::Full) => oldest += remove(&mut b, 50, &mut buf).await,
                    Err(e) => panic!("store {v}: {e}"),
                }
            }
            if v % 7 == 0 {
                oldest += remove(&mut b, 3, &mut buf).await;
            }
            writeln!(out, "{oldest} {}", v + 1).unwrap();
            out.flush().unwrap();
        }
    });
}

fn child(path: &str, start: u32, boot: u32) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "backlog_child",
            "--nocapture",
            "--quiet",
        ])
        .env("BACKLOG_FILE", path)
        .env("BACKLOG_START", start.to_string())
        .env("BACKLOG_BOOT", boot.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child")
}

/// Everything in the file, oldest first.
fn values(path: &str, boot: u32) -> Vec<u32> {
    let counters = Counters::new();
    let mut b = open(path, boot, &counters);
    assert_eq!(counters.snapshot().malformed, 0);
    let mut buf = [0u8; 128];
    let mut out = Vec::new();
    while let Some(e) = block_on(b.next(&mut buf)).unwrap() {
        assert_eq!(e.topic, "plant/line-1/temp");
        out.push(u32::from_le_bytes(e.payload.try_into().unwrap()));
        b.sent();
    }
    out
}

#[test]
fn a_file_backlog_survives_sigkill() {
    let dir = std::env::temp_dir().join(format!("aimdb-backlog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("backlog.bin");
    let path = file.to_str().unwrap();
    let mut next = 0u32;
    for boot in 1..=3u32 {
        let mut c = child(path, next, boot);
        let lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let mut last = (0, 0);
        // Past more than one turn of the file (16 pages hold ~1,800 values).
        for line in lines {
            let line = line.expect("read the child's report");
            // The test harness's own lines are not reports.
            let Some((a, b)) = line.split_once(' ') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (a.parse(), b.parse()) else {
                continue;
            };
            last = (a, b);
            if last.1 >= next + 2_000 {
                break;
            }
        }
        c.kill().expect("SIGKILL the child");
        c.wait().expect("reap the child");
        let (oldest, stored) = last;
        assert!(stored >= next + 2_000, "the child stopped early: {last:?}");
        let v = values(path, boot + 100);
        let (first, end) = (v[0], *v.last().unwrap() + 1);
        assert!(
            first >= oldest,
            "boot {boot}: {first} was reported removed ({last:?})"
        );
        assert!(
            end >= stored,
            "boot {boot}: {stored} was reported stored, {end} found"
        );
        assert_eq!(
            v,
            (first..end).collect::<Vec<_>>(),
            "boot {boot}: a gap or a repeat"
        );
        next = end;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
