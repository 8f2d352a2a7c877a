//! The framed device's manifest on MQTT. The device is not an MQTT client,
//! so the gateway publishes for it what the MQTT device publishes itself:
//! each time the device link comes up (a new birth), the gateway asks the
//! device's responder for its table (`List`, then `Describe` per record)
//! and its connectors (`Stats`: which keep a durable backlog) through the
//! same pass-through as any remote client, and writes the
//! manifest JSON (`aimdb_core::remote::ManifestJson`'s shape) into
//! [`MANIFEST`], routed retained on `{prefix}/aimdb/manifest`.

use std::time::Duration;

use aimdb_core::presence::LinkState;
use aimdb_core::record::{Kind, Latest, Reader, Record, Ring};
use aimdb_core::remote::proto::{Body, Host, Info, Response};
use aimdb_core::remote::{Op, Request, RequestError};
use aimdb_core::sync::HostRawMutex;
use serde_json::{json, Value};

use crate::bridge::{Raw, REMOTE_REQ};

/// The largest manifest published.
pub const MANIFEST_MAX: usize = 4096;
/// A manifest as bytes (JSON).
pub type Text = heapless::Vec<u8, MANIFEST_MAX>;

/// The device's manifest, once read.
pub static MANIFEST: Record<HostRawMutex, Latest<Text>, 1> = Record::new("manifest");

/// How long one answer may take.
const ANSWER_WAIT: Duration = Duration::from_secs(3);
/// Attempts per birth.
const ATTEMPTS: u32 = 3;

/// Reads the device's table after each birth on `link` (a reader of the
/// device link's state) and writes [`MANIFEST`]; `answers` is a reader of
/// the device's remote-access answers.
pub async fn relay(
    mut link: Reader<'static, HostRawMutex, Latest<LinkState>, 2>,
    mut answers: Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
) {
    // Ids of our own, far from the tool's (which start at a random odd
    // number): answers to others are skipped by id.
    let mut id = 0x6a00_0000u32 | (std::process::id() & 0xffff) << 8;
    loop {
        let Ok(state) = link.recv().await else {
            continue;
        };
        if !state.is_online() {
            continue;
        }
        for attempt in 1..=ATTEMPTS {
            match read(&mut answers, &mut id).await {
                Ok(text) => {
                    MANIFEST.write(text);
                    break;
                }
                Err(e) => {
                    eprintln!("gateway: device manifest: {e} (attempt {attempt} of {ATTEMPTS})");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

/// One request through the pass-through: its answer's bytes (decode them
/// with [`body`]), once the answer is not `Busy`.
async fn call(
    answers: &mut Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
    id: &mut u32,
    op: Op<'_>,
) -> Result<Raw, String> {
    for _ in 0..10 {
        *id = id.wrapping_add(1);
        let bytes = postcard::to_stdvec(&Request {
            id: *id,
            op: op.clone(),
        })
        .map_err(|e| e.to_string())?;
        REMOTE_REQ.write(Raw::from_slice(&bytes).map_err(|_| "request too large")?);
        let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
        let (raw, result) = loop {
            let raw = match tokio::time::timeout_at(deadline, answers.recv()).await {
                Err(_) => return Err("no answer from the device".into()),
                // Lagged: read on (ours is among the newest).
                Ok(Err(_)) => continue,
                Ok(Ok(raw)) => raw,
            };
            match body_of(&raw) {
                Ok((rid, result)) if rid == *id => {
                    let result = result.map(|_| ());
                    break (raw, result);
                }
                _ => continue,
            }
        };
        match result {
            Err(RequestError::Busy) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => return Err(format!("device answered: {e}")),
            Ok(()) => return Ok(raw),
        }
    }
    Err("device busy".into())
}

/// An answer's id and result, borrowing from its bytes.
fn body_of(raw: &Raw) -> Result<(u32, Result<Body<'_, Host>, RequestError>), String> {
    let r: Response<Body<'_, Host>> = postcard::from_bytes(raw).map_err(|e| e.to_string())?;
    Ok((r.id, r.result))
}

/// The body of an answer [`call`] returned (not an error).
fn body(raw: &Raw) -> Result<Body<'_, Host>, String> {
    match body_of(raw)?.1 {
        Ok(b) => Ok(b),
        Err(e) => Err(format!("device answered: {e}")),
    }
}

/// The whole table, as manifest JSON.
async fn read(
    answers: &mut Reader<'static, HostRawMutex, Ring<Raw, 4>, 2>,
    id: &mut u32,
) -> Result<Text, String> {
    let mut names = Vec::new();
    loop {
        let from = u16::try_from(names.len()).unwrap_or(u16::MAX);
        let raw = call(answers, id, Op::List { from }).await?;
        match body(&raw)? {
            Body::List { total, entries, .. } => {
                let done = entries.is_empty() || names.len() + entries.len() >= usize::from(total);
                names.extend(entries.iter().map(|e| e.name.to_string()));
                if done {
                    break;
                }
            }
            other => return Err(format!("unexpected answer {other:?}")),
        }
    }
    let mut records = Vec::with_capacity(names.len());
    for name in &names {
        let raw = call(answers, id, Op::Describe { record: name }).await?;
        match body(&raw)? {
            Body::Describe(info) => records.push(entry(&info)),
            other => return Err(format!("unexpected answer {other:?}")),
        }
    }
    // The connectors with a durable backlog: the first `stats` page
    // carries every connector.
    let raw = call(answers, id, Op::Stats { from: 0 }).await?;
    let backlogs: Vec<&str> = match body(&raw)? {
        Body::Stats { connectors, .. } => connectors
            .iter()
            .filter(|c| c.backlog.is_some())
            .map(|c| c.name)
            .collect(),
        other => return Err(format!("unexpected answer {other:?}")),
    };
    let text = serde_json::to_vec(&json!({ "records": records, "backlogs": backlogs }))
        .map_err(|e| e.to_string())?;
    Text::from_slice(&text).map_err(|_| format!("manifest over {MANIFEST_MAX} bytes"))
}

/// One record as the manifest lists it.
fn entry(i: &Info<'_, Host>) -> Value {
    let kind = match i.kind {
        Kind::Latest => "latest",
        Kind::Ring => "ring",
        Kind::Mailbox => "mailbox",
    };
    let hash: String = i.schema_hash.iter().map(|b| format!("{b:02x}")).collect();
    let mut v = json!({
        "name": i.name,
        "kind": kind,
        "type": i.schema.name,
        "topics": i.topics,
        "schema_hash": hash,
    });
    if i.writable {
        v["writable"] = Value::Bool(true);
    }
    v
}
