//! b5: what a durable backlog costs its flash, counted (deterministic):
//! the bytes written per message, pages erased per million messages
//! (write amplification: with a page's erase cycles, a flash's life) and
//! messages a KiB of flash holds (sizing), for the readings the demo
//! device stores and for a larger message, on flash with 1 KiB pages
//! (a Cortex-M's internal flash) and 4 KiB pages (SPI NOR, a file).
//!
//! The backlog is the library's (`aimdb_connectors::backlog`, its
//! `Metered` counters) over NOR flash in RAM. Steady state: the backlog
//! half full, then each message stored, handed out and acknowledged
//! (removed), 100,000 times, so every page turns over many times.
//!
//! The counts depend only on the code, so they gate exactly:
//! `data/baselines/b5_backlog.json` must match (regenerate with
//! `B5_WRITE_BASELINE=1` and commit with the reason).

use std::process::ExitCode;

use aimdb_connectors::backlog::{page_cache, Backlog, Counters, Error, Full};
use aimdb_connectors::clock::Instant;
use aimdb_core::connector::{Message, QoS};
use embedded_storage_async::nor_flash::{
    ErrorType, MultiwriteNorFlash, NorFlash, NorFlashErrorKind, ReadNorFlash,
};
use futures::executor::block_on;
use serde_json::{json, Value};

const BASELINE: &str = "data/baselines/b5_backlog.json";
/// Messages through the backlog in steady state.
const CYCLES: u32 = 100_000;
/// The flash range: 64 KiB.
const RANGE_BYTES: usize = 64 * 1024;
const PAGES_MAX: usize = 64;

/// NOR flash in RAM with `P`-byte pages, 4-byte words, multiwrite.
struct RamFlash<const P: usize> {
    mem: Vec<u8>,
}

impl<const P: usize> ErrorType for RamFlash<P> {
    type Error = NorFlashErrorKind;
}

impl<const P: usize> ReadNorFlash for RamFlash<P> {
    const READ_SIZE: usize = 1;
    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let o = offset as usize;
        let src = self
            .mem
            .get(o..o + bytes.len())
            .ok_or(NorFlashErrorKind::OutOfBounds)?;
        bytes.copy_from_slice(src);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.mem.len()
    }
}

impl<const P: usize> NorFlash for RamFlash<P> {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = P;
    async fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let range = self
            .mem
            .get_mut(from as usize..to as usize)
            .ok_or(NorFlashErrorKind::OutOfBounds)?;
        range.fill(0xff);
        Ok(())
    }
    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        let o = offset as usize;
        let dst = self
            .mem
            .get_mut(o..o + bytes.len())
            .ok_or(NorFlashErrorKind::OutOfBounds)?;
        for (d, b) in dst.iter_mut().zip(bytes) {
            *d &= b;
        }
        Ok(())
    }
}

impl<const P: usize> MultiwriteNorFlash for RamFlash<P> {}

/// One row's figures.
struct Figures {
    entry_bytes: usize,
    per_kib: f64,
    bytes_per_msg: f64,
    erases_per_million: f64,
}

fn message(payload: &[u8]) -> Message<'_> {
    Message {
        route: 0,
        topic: "dev/readings",
        payload,
        lagged: 0,
        qos: QoS::AtLeastOnce,
        retain: false,
        urgent: false,
    }
}

fn measure<const P: usize>(payload_len: usize) -> Result<Figures, Error> {
    let payload: Vec<u8> = (0..payload_len).map(|i| i as u8 | 1).collect();
    let m = message(&payload);
    let t = Instant::from_micros(0);
    let mut buf = vec![0u8; 256];
    let cache = || page_cache::<PAGES_MAX>();
    let flash = RamFlash::<P> {
        mem: vec![0xff; RANGE_BYTES],
    };
    let range = 0..RANGE_BYTES as u32;
    let counters = Counters::new();
    block_on(async {
        // Capacity: store until refused.
        let mut b = Backlog::open(
            flash,
            range.clone(),
            cache(),
            0,
            Full::RefuseNewest,
            &counters,
            &mut buf,
        )
        .await?;
        let mut stored = 0u32;
        while b.push(&m, t, &mut buf).await.is_ok() {
            stored += 1;
        }
        let flash = b.into_flash();
        // Steady state, half full, from a fresh count.
        let steady = Counters::new();
        let mut b = Backlog::open(
            flash,
            range,
            cache(),
            1,
            Full::RefuseNewest,
            &steady,
            &mut buf,
        )
        .await?;
        let n = b.depth();
        let half = stored / 2;
        for _ in 0..n.saturating_sub(half) {
            b.next(&mut buf).await?;
            b.sent();
        }
        b.delivered(n.saturating_sub(half), t, &mut buf).await?;
        let before = steady.snapshot();
        for _ in 0..CYCLES {
            b.push(&m, t, &mut buf).await?;
            b.next(&mut buf).await?;
            b.sent();
            b.delivered(1, t, &mut buf).await?;
        }
        let after = steady.snapshot();
        let bytes = after.flash_bytes.wrapping_sub(before.flash_bytes);
        let erases = after.erases - before.erases;
        Ok(Figures {
            entry_bytes: aimdb_connectors::backlog::HEAD + m.topic.len() + payload_len,
            per_kib: f64::from(stored) / (RANGE_BYTES as f64 / 1024.0),
            bytes_per_msg: f64::from(bytes) / f64::from(CYCLES),
            erases_per_million: f64::from(erases) * 1e6 / f64::from(CYCLES),
        })
    })
}

fn rows() -> Result<Vec<(String, Figures)>, Error> {
    Ok(vec![
        // The demo device's reading: 2 varints of postcard.
        ("page_1k/reading_4b".into(), measure::<1024>(4)?),
        ("page_1k/payload_64b".into(), measure::<1024>(64)?),
        ("page_4k/reading_4b".into(), measure::<4096>(4)?),
        ("page_4k/payload_64b".into(), measure::<4096>(64)?),
    ])
}

fn to_json(rows: &[(String, Figures)]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|(name, f)| {
            json!({
                "row": name,
                "entry_bytes": f.entry_bytes,
                "messages_per_kib": (f.per_kib * 100.0).round() / 100.0,
                "flash_bytes_per_message": (f.bytes_per_msg * 100.0).round() / 100.0,
                "erases_per_million_messages": (f.erases_per_million * 100.0).round() / 100.0,
            })
        })
        .collect();
    json!({
        "bench": "b5_backlog",
        "range_bytes": RANGE_BYTES,
        "cycles": CYCLES,
        "rows": rows,
    })
}

fn main() -> ExitCode {
    let rows = match rows() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("b5_backlog: the backlog failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("b5_backlog: a 64 KiB backlog, {CYCLES} messages in steady state (counted)");
    println!(
        "{:<22} {:>7} {:>10} {:>12} {:>14}",
        "row", "entry B", "msgs/KiB", "B written/msg", "erases/1M msgs"
    );
    for (name, f) in &rows {
        println!(
            "{:<22} {:>7} {:>10.2} {:>12.2} {:>14.2}",
            name, f.entry_bytes, f.per_kib, f.bytes_per_msg, f.erases_per_million
        );
    }
    let measured = to_json(&rows);
    if let Err(e) = aimdb_bench::write_json("b5_backlog", &measured) {
        eprintln!("b5_backlog: writing the results: {e}");
        return ExitCode::FAILURE;
    }
    let path = aimdb_bench::workspace_root().join(BASELINE);
    if std::env::var_os("B5_WRITE_BASELINE").is_some() {
        let text = serde_json::to_string_pretty(&measured).unwrap_or_default() + "\n";
        return match std::fs::write(&path, text) {
            Ok(()) => {
                println!("wrote {BASELINE}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{BASELINE}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let baseline: Option<Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    match baseline {
        Some(b) if b == measured => {
            println!("b5_backlog: every count matches {BASELINE}");
            ExitCode::SUCCESS
        }
        Some(b) => {
            eprintln!(
                "b5_backlog: counts differ from {BASELINE} (regenerate with B5_WRITE_BASELINE=1 and say why):\nbaseline {b}\nmeasured {measured}"
            );
            ExitCode::FAILURE
        }
        None => {
            eprintln!("b5_backlog: no readable {BASELINE}");
            ExitCode::FAILURE
        }
    }
}
