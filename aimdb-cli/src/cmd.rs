//! The commands.

use std::collections::BTreeMap;
use std::time::Duration;

use aimdb_core::presence::{LinkState, Status};
use aimdb_core::remote::proto::{Body, ConnectorStats, Entry, Info};
use aimdb_core::remote::{Op, ResponderStats};
use serde_json::{json, Value};

use crate::link::{self, Client, MqttArgs};
use crate::{table, Cli, Command, Fail};

/// Runs the command; returns what it was (for error messages) and how it
/// went.
pub async fn run(cli: &Cli) -> (String, Result<(), Fail>) {
    let context = match &cli.command {
        Command::Nodes => "nodes".to_string(),
        Command::Ls => "ls".to_string(),
        Command::Stats => "stats".to_string(),
        Command::Watch { .. } => "watch".to_string(),
        Command::Describe { record } => format!("describe {record}"),
        Command::Get { record } => format!("get {record}"),
        Command::Set { record, .. } => format!("set {record}"),
    };
    (context, run_inner(cli).await)
}

async fn run_inner(cli: &Cli) -> Result<(), Fail> {
    let timeout = cli.timeout()?;
    if let Command::Nodes = cli.command {
        return nodes(cli, timeout).await;
    }
    let mut c = connect(cli, timeout).await?;
    match &cli.command {
        Command::Nodes => unreachable!(),
        Command::Ls => ls(cli, &mut c).await,
        Command::Describe { record } => describe(cli, &mut c, record).await,
        Command::Get { record } => get(cli, &mut c, record).await,
        Command::Set { record, value } => set(cli, &mut c, record, value).await,
        Command::Watch { records, seconds } => {
            crate::watch::watch(cli, &mut c, records, *seconds).await
        }
        Command::Stats => stats(cli, &mut c).await,
    }
}

fn mqtt_args<'a>(cli: &'a Cli, url: &'a str) -> MqttArgs<'a> {
    MqttArgs {
        url,
        username: cli.username.as_deref(),
        password: cli.password.as_deref(),
        tls_ca: cli.tls_ca.as_deref(),
    }
}

async fn connect(cli: &Cli, timeout: Duration) -> Result<Client, Fail> {
    if let Some(url) = &cli.mqtt {
        let node = cli
            .node
            .as_deref()
            .ok_or_else(|| Fail::Usage("--mqtt needs --node PREFIX (see `aimdb nodes`)".into()))?
            .trim_end_matches('/');
        let (req, rsp) = (format!("{node}/aimdb/req"), format!("{node}/aimdb/rsp"));
        let conn = link::mqtt(&mqtt_args(cli, url), std::slice::from_ref(&rsp), timeout).await?;
        return Ok(Client::new(conn, req, rsp, timeout));
    }
    let conn = if let Some(addr) = &cli.tcp {
        link::tcp(addr, timeout).await?
    } else if let Some(path) = &cli.serial {
        link::serial(&path.to_string_lossy()).await?
    } else {
        return Err(Fail::Usage(
            "say where the node is: --mqtt URL --node PREFIX, --tcp HOST:PORT or --serial PATH"
                .into(),
        ));
    };
    Ok(Client::new(
        conn,
        link::FRAMED_REQ.into(),
        link::FRAMED_RSP.into(),
        timeout,
    ))
}

pub(crate) fn unexpected(body: &Body) -> Fail {
    Fail::Other(format!("unexpected answer: {body:?}"))
}

pub(crate) fn kind_name(k: aimdb_core::record::Kind) -> String {
    format!("{k:?}").to_lowercase()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) async fn list_all(c: &mut Client) -> Result<Vec<Entry>, Fail> {
    let mut all = Vec::new();
    loop {
        let from = u16::try_from(all.len()).unwrap_or(u16::MAX);
        match c.call(Op::List { from }).await? {
            Body::List {
                total,
                from,
                entries,
            } => {
                let next = usize::from(from) + entries.len();
                let done = entries.is_empty() || next >= usize::from(total);
                all.truncate(usize::from(from));
                all.extend(entries);
                if done {
                    return Ok(all);
                }
            }
            b => return Err(unexpected(&b)),
        }
    }
}

/// Every stats page: the records' counters, and the connectors' (from
/// the first page).
/// Every record's counters, the connectors', and the responder's.
type AllStats = (Vec<(String, u64, u64)>, Vec<ConnectorStats>, ResponderStats);

async fn stats_all(c: &mut Client) -> Result<AllStats, Fail> {
    let mut all = Vec::new();
    let mut conns = Vec::new();
    loop {
        let from = u16::try_from(all.len()).unwrap_or(u16::MAX);
        match c.call(Op::Stats { from }).await? {
            Body::Stats {
                total,
                from,
                entries,
                connectors,
                responder,
            } => {
                if from == 0 {
                    conns = connectors;
                }
                let next = usize::from(from) + entries.len();
                let done = entries.is_empty() || next >= usize::from(total);
                all.truncate(usize::from(from));
                all.extend(entries);
                if done {
                    return Ok((all, conns, responder));
                }
            }
            b => return Err(unexpected(&b)),
        }
    }
}

pub(crate) async fn info(c: &mut Client, record: &str) -> Result<Info, Fail> {
    match c.call(Op::Describe { record }).await? {
        Body::Describe(i) => Ok(i),
        b => Err(unexpected(&b)),
    }
}

async fn value(c: &mut Client, record: &str) -> Result<(u64, Option<Vec<u8>>), Fail> {
    match c.call(Op::Get { record }).await? {
        Body::Value { writes, value } => Ok((writes, value)),
        b => Err(unexpected(&b)),
    }
}

/// The value decoded with the record's schema.
pub(crate) fn decode(info: &Info, bytes: &[u8]) -> Result<Value, Fail> {
    postcard_dyn::from_slice_dyn(&info.schema, bytes).map_err(|e| {
        Fail::Schema(format!(
            "value does not decode with the schema of `{}` ({}): {e:?}",
            info.name, info.schema.name
        ))
    })
}

pub(crate) fn print_json(v: &Value) {
    println!("{v}");
}

async fn ls(cli: &Cli, c: &mut Client) -> Result<(), Fail> {
    let entries = list_all(c).await?;
    let mut infos = Vec::with_capacity(entries.len());
    for e in &entries {
        infos.push(info(c, &e.name).await?);
    }
    if cli.json {
        let v: Vec<Value> = infos
            .iter()
            .map(|i| {
                json!({
                    "name": i.name,
                    "kind": kind_name(i.kind),
                    "capacity": i.capacity,
                    "writable": i.writable,
                    "type": i.schema.name,
                    "codec": format!("{:?}", i.codec).to_lowercase(),
                    "topics": i.topics,
                    "schema_hash": hex(&i.schema_hash),
                })
            })
            .collect();
        print_json(&Value::Array(v));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = infos
        .iter()
        .map(|i| {
            vec![
                i.name.clone(),
                kind_name(i.kind),
                i.capacity.to_string(),
                if i.writable { "yes" } else { "no" }.into(),
                i.schema.name.clone(),
                i.topics.join(","),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(
            &["RECORD", "KIND", "CAP", "WRITABLE", "TYPE", "TOPICS"],
            &rows
        )
    );
    Ok(())
}

/// The schema as Rust-like text: the type, then the named types it uses.
fn schema_text(info: &Info) -> String {
    let mut s = info.schema.to_pseudocode();
    let mut used: Vec<_> = info
        .schema
        .all_used_types()
        .into_iter()
        .filter(|t| t != &info.schema)
        .map(|t| t.to_pseudocode())
        .filter(|t| t.contains('{') || t.contains('('))
        .collect();
    used.sort();
    for u in used {
        s.push('\n');
        s.push_str(&u);
    }
    s
}

async fn describe(cli: &Cli, c: &mut Client, record: &str) -> Result<(), Fail> {
    let i = info(c, record).await?;
    if cli.json {
        let schema = serde_json::to_value(&i.schema).map_err(|e| Fail::Other(e.to_string()))?;
        print_json(&json!({
            "name": i.name,
            "kind": kind_name(i.kind),
            "capacity": i.capacity,
            "writable": i.writable,
            "codec": format!("{:?}", i.codec).to_lowercase(),
            "topics": i.topics,
            "schema_hash": hex(&i.schema_hash),
            "type": i.schema.name,
            "schema": schema,
            "schema_text": schema_text(&i),
        }));
        return Ok(());
    }
    println!("record:      {}", i.name);
    println!("kind:        {}", kind_name(i.kind));
    println!("capacity:    {}", i.capacity);
    println!("writable:    {}", if i.writable { "yes" } else { "no" });
    println!("codec:       {}", format!("{:?}", i.codec).to_lowercase());
    println!("topics:      {}", i.topics.join(", "));
    println!("schema hash: {}", hex(&i.schema_hash));
    println!("type:        {}", i.schema.name);
    println!("schema:");
    for line in schema_text(&i).lines() {
        println!("  {line}");
    }
    Ok(())
}

async fn get(cli: &Cli, c: &mut Client, record: &str) -> Result<(), Fail> {
    let i = info(c, record).await?;
    let (writes, bytes) = value(c, record).await?;
    let v = match &bytes {
        Some(b) => Some(decode(&i, b)?),
        None => None,
    };
    if cli.json {
        print_json(&json!({ "record": record, "writes": writes, "value": v }));
        return Ok(());
    }
    match v {
        Some(v) => println!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
        ),
        None => println!("(no value yet)"),
    }
    println!("writes: {writes}");
    Ok(())
}

async fn set(cli: &Cli, c: &mut Client, record: &str, text: &str) -> Result<(), Fail> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| Fail::Schema(format!("not JSON: {e}")))?;
    let i = info(c, record).await?;
    let bytes = postcard_dyn::to_stdvec_dyn(&i.schema, &v).map_err(|e| {
        Fail::Schema(format!(
            "{v} does not fit the schema of `{record}`: {e:?}; expected {}",
            schema_text(&i).replace('\n', "; ")
        ))
    })?;
    match c
        .call(Op::Set {
            record,
            value: &bytes,
        })
        .await?
    {
        Body::Written => {}
        b => return Err(unexpected(&b)),
    }
    if cli.json {
        print_json(&json!({ "record": record, "ok": true }));
    } else {
        println!("ok");
    }
    Ok(())
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Connecting => "connecting",
        Status::Online => "online",
        Status::Offline => "offline",
    }
}

/// A link state as the connectors table shows it: `online #3`,
/// `offline #3 (lost)`.
fn link_text(l: &LinkState) -> String {
    let mut t = format!("{} #{}", status_name(l.status), l.seq);
    if let Some(c) = l.cause {
        t.push_str(&format!(" ({c})"));
    }
    t
}

async fn stats(cli: &Cli, c: &mut Client) -> Result<(), Fail> {
    let (all, conns, own) = stats_all(c).await?;
    if cli.json {
        let records: Vec<Value> = all
            .iter()
            .map(|(n, w, r)| json!({ "record": n, "writes": w, "replaced": r }))
            .collect();
        let connectors: Vec<Value> = conns
            .iter()
            .map(|k| {
                let n = &k.counters;
                json!({
                    "name": k.name,
                    "sent": n.sent,
                    "received": n.received,
                    "rejected": n.rejected,
                    "dropped": n.dropped,
                    "lagged": n.lagged,
                    "reconnects": n.reconnects,
                    "link": k.link.map(|l| json!({
                        "status": status_name(l.status),
                        "seq": l.seq,
                        "cause": l.cause.map(|c| c.as_str()),
                    })),
                })
            })
            .collect();
        let responder = json!({
            "requests": own.requests,
            "answered": own.answered,
            "malformed": own.malformed,
            "busy": own.busy,
            "denied": own.denied,
            "updates": own.updates,
        });
        print_json(
            &json!({ "records": records, "connectors": connectors, "responder": responder }),
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|(n, w, r)| vec![n.clone(), w.to_string(), r.to_string()])
        .collect();
    print!(
        "{}",
        table::render(&["RECORD", "WRITES", "REPLACED"], &rows)
    );
    let rows: Vec<Vec<String>> = conns
        .iter()
        .map(|k| {
            let n = &k.counters;
            vec![
                k.name.clone(),
                k.link.as_ref().map_or("-".into(), link_text),
                n.sent.to_string(),
                n.received.to_string(),
                n.rejected.to_string(),
                n.dropped.to_string(),
                n.lagged.to_string(),
                n.reconnects.to_string(),
            ]
        })
        .collect();
    println!(
        "\nresponder: {} requests, {} answers, {} malformed, {} busy, {} refused writes, {} watch updates",
        own.requests, own.answered, own.malformed, own.busy, own.denied, own.updates
    );
    if !rows.is_empty() {
        println!();
        print!(
            "{}",
            table::render(
                &[
                    "CONNECTOR",
                    "LINK",
                    "SENT",
                    "RECEIVED",
                    "REJECTED",
                    "DROPPED",
                    "LAGGED",
                    "RECONNECTS"
                ],
                &rows
            )
        );
    }
    Ok(())
}

/// Cuts `s` to `max` characters.
pub(crate) fn clip(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// What the broker keeps about one node prefix: its presence and its
/// manifest (retained), and whether it answers.
#[derive(Default)]
struct Seen {
    /// Status and seq from `<prefix>/presence`.
    presence: Option<(String, Option<u64>)>,
    /// `<prefix>/aimdb/manifest`, parsed (null if it is not JSON).
    manifest: Option<Value>,
    answers: Option<bool>,
}

impl Seen {
    /// The manifest's record names, comma-separated.
    fn records(&self) -> Option<String> {
        let records = self.manifest.as_ref()?.get("records")?.as_array()?;
        let names: Vec<&str> = records
            .iter()
            .filter_map(|r| r.get("name")?.as_str())
            .collect();
        Some(names.join(","))
    }
}

async fn nodes(cli: &Cli, timeout: Duration) -> Result<(), Fail> {
    let Some(url) = &cli.mqtt else {
        return Err(Fail::Usage(
            "nodes needs --mqtt URL (it reads the broker's presence messages)".into(),
        ));
    };
    let mut conn = link::mqtt(&mqtt_args(cli, url), &["#".to_string()], timeout).await?;
    // Retained messages arrive right after the subscription.
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let listen = Duration::from_secs(1).min(timeout);
    let deadline = tokio::time::Instant::now() + listen;
    while let Ok(Some((topic, payload))) = tokio::time::timeout_at(deadline, conn.inc.recv()).await
    {
        let (prefix, presence) = if let Some(p) = topic.strip_suffix("/presence") {
            (p, true)
        } else if let Some(p) = topic.strip_suffix("/aimdb/manifest") {
            (p, false)
        } else {
            continue;
        };
        let v = (!payload.is_empty())
            .then(|| serde_json::from_slice::<Value>(&payload).unwrap_or(Value::Null));
        let entry = seen.entry(prefix.to_string()).or_default();
        if presence {
            // An empty payload is a cleared retained message.
            entry.presence = v.map(|v| {
                (
                    v["status"].as_str().unwrap_or("?").to_string(),
                    v["seq"].as_u64(),
                )
            });
        } else {
            entry.manifest = v;
        }
        if entry.presence.is_none() && entry.manifest.is_none() {
            seen.remove(prefix);
        }
    }

    // Does each node answer? One `list` request each, all at once.
    let mut asked: BTreeMap<String, u32> = BTreeMap::new();
    // Fresh ids for this run (as `Client` makes them).
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16);
    for (n, (prefix, _)) in seen.iter().enumerate() {
        if prefix.ends_with("/gateway") {
            continue;
        }
        let id = base.wrapping_add(n as u32);
        let req = postcard::to_stdvec(&aimdb_core::remote::Request {
            id,
            op: Op::List { from: 0 },
        })
        .expect("encode");
        if conn
            .out
            .send((format!("{prefix}/aimdb/req"), req))
            .await
            .is_err()
        {
            return Err(Fail::Unreachable("connection closed".into()));
        }
        asked.insert(format!("{prefix}/aimdb/rsp"), id);
    }
    for p in seen.values_mut() {
        p.answers = Some(false);
    }
    let deadline = tokio::time::Instant::now() + listen;
    let mut pending = asked.len();
    while pending > 0 {
        let Ok(Some((topic, payload))) = tokio::time::timeout_at(deadline, conn.inc.recv()).await
        else {
            break;
        };
        let Some(&id) = asked.get(&topic) else {
            continue;
        };
        let ok = postcard::from_bytes::<aimdb_core::remote::proto::Response<Body>>(&payload)
            .is_ok_and(|r| r.id == id);
        let prefix = topic.trim_end_matches("/aimdb/rsp");
        if let Some(p) = seen.get_mut(prefix) {
            if ok && p.answers != Some(true) {
                p.answers = Some(true);
                pending -= 1;
            }
        }
    }

    let role = |prefix: &str| {
        if prefix.ends_with("/gateway") {
            "gateway"
        } else {
            "node"
        }
    };
    let status = |p: &Seen| {
        p.presence
            .as_ref()
            .map_or("unknown".to_string(), |(s, _)| s.clone())
    };
    let seq = |p: &Seen| p.presence.as_ref().and_then(|(_, q)| *q);
    if cli.json {
        let v: Vec<Value> = seen
            .iter()
            .map(|(prefix, p)| {
                json!({
                    "node": prefix.trim_end_matches("/gateway"),
                    "role": role(prefix),
                    "status": status(p),
                    "seq": seq(p),
                    "answers": if role(prefix) == "node" { p.answers } else { None },
                    "manifest": p.manifest.clone().unwrap_or(Value::Null),
                })
            })
            .collect();
        print_json(&Value::Array(v));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = seen
        .iter()
        .map(|(prefix, p)| {
            vec![
                prefix.trim_end_matches("/gateway").to_string(),
                role(prefix).into(),
                status(p),
                seq(p).map_or("-".into(), |s| s.to_string()),
                match (role(prefix), p.answers) {
                    ("node", Some(true)) => "yes".into(),
                    ("node", _) => "no".into(),
                    _ => "-".into(),
                },
                p.records().map_or("-".into(), |r| clip(r, 48)),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(
            &["NODE", "ROLE", "STATUS", "SEQ", "ANSWERS", "RECORDS"],
            &rows
        )
    );
    Ok(())
}
