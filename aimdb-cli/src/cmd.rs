//! The commands: each asks the node, builds one view and shows it (see
//! [`crate::view`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use aimdb_core::presence::{LinkState, Status};
use aimdb_core::remote::proto::{self, Body};
use aimdb_core::remote::{Op, ResponderStats};
use postcard_schema::schema::owned::OwnedNamedType;
use serde::Serialize;
use serde_json::Value;

use crate::query::{info, list_all, unexpected, RecordInfo};
use crate::transport::{self, Client, MqttArgs, Reply};
use crate::view::{clip, hex, kind_name, show, yes_no, View};
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
        let mut c = broker(cli, timeout).await?;
        return show(&nodes(&mut c, timeout).await?, cli.json);
    }
    let mut c = connect(cli, timeout).await?;
    match &cli.command {
        Command::Nodes => unreachable!(),
        Command::Ls => show(&ls(&mut c).await?, cli.json),
        Command::Describe { record } => show(&describe(&mut c, record).await?, cli.json),
        Command::Get { record } => show(&get(&mut c, record).await?, cli.json),
        Command::Set { record, value } => show(&set(&mut c, record, value).await?, cli.json),
        Command::Watch { records, seconds } => {
            crate::watch::watch(cli, &mut c, records, *seconds).await
        }
        Command::Stats => show(&stats(&mut c).await?, cli.json),
    }
}

fn mqtt_args<'a>(cli: &'a Cli, url: &'a str) -> MqttArgs<'a> {
    MqttArgs {
        url,
        username: cli.username.as_deref(),
        password: cli.password.as_deref(),
        tls_ca: cli.tls_ca.as_deref(),
        tls_cert: cli.tls_cert.as_deref(),
        tls_key: cli.tls_key.as_deref(),
    }
}

/// A client of the node the arguments name.
async fn connect(cli: &Cli, timeout: Duration) -> Result<Client, Fail> {
    if let Some(url) = &cli.mqtt {
        let node = cli
            .node
            .as_deref()
            .ok_or_else(|| Fail::Usage("--mqtt needs --node PREFIX (see `aimdb nodes`)".into()))?
            .trim_end_matches('/');
        let rsp = proto::topic(node, proto::RESPONSE);
        let conn =
            transport::mqtt(&mqtt_args(cli, url), std::slice::from_ref(&rsp), timeout).await?;
        return Ok(Client::new(conn, Some(node), timeout));
    }
    let conn = if let Some(addr) = &cli.tcp {
        transport::tcp(addr, timeout).await?
    } else if let Some(path) = &cli.serial {
        transport::serial(&path.to_string_lossy()).await?
    } else {
        return Err(Fail::Usage(
            "say where the node is: --mqtt URL --node PREFIX, --tcp HOST:PORT or --serial PATH"
                .into(),
        ));
    };
    Ok(Client::new(conn, None, timeout))
}

/// A client on the broker that hears every topic (`nodes`).
async fn broker(cli: &Cli, timeout: Duration) -> Result<Client, Fail> {
    let Some(url) = &cli.mqtt else {
        return Err(Fail::Usage(
            "nodes needs --mqtt URL (it reads the broker's presence messages)".into(),
        ));
    };
    let conn = transport::mqtt(&mqtt_args(cli, url), &["#".to_string()], timeout).await?;
    Ok(Client::new(conn, None, timeout))
}

/// One record as `ls` lists it and `describe` starts.
#[derive(Serialize)]
struct RecordView {
    name: String,
    kind: String,
    capacity: u16,
    writable: bool,
    #[serde(rename = "type")]
    type_name: String,
    codec: String,
    topics: Vec<String>,
    schema_hash: String,
}

impl From<&RecordInfo> for RecordView {
    fn from(i: &RecordInfo) -> Self {
        Self {
            name: i.name.clone(),
            kind: kind_name(i.kind),
            capacity: i.capacity,
            writable: i.writable,
            type_name: i.schema.name.clone(),
            codec: format!("{:?}", i.codec).to_lowercase(),
            topics: i.topics.clone(),
            schema_hash: hex(&i.schema_hash),
        }
    }
}

/// `ls`.
#[derive(Serialize)]
#[serde(transparent)]
struct LsView(Vec<RecordView>);

impl View for LsView {
    fn text(&self) -> String {
        table::of(
            &["RECORD", "KIND", "CAP", "WRITABLE", "TYPE", "TOPICS"],
            &self.0,
            |r| {
                vec![
                    r.name.clone(),
                    r.kind.clone(),
                    r.capacity.to_string(),
                    yes_no(r.writable).into(),
                    r.type_name.clone(),
                    r.topics.join(","),
                ]
            },
        )
    }
}

async fn ls(c: &mut Client) -> Result<LsView, Fail> {
    let names = list_all(c).await?;
    let mut records = Vec::with_capacity(names.len());
    for n in &names {
        records.push(RecordView::from(&info(c, n).await?));
    }
    Ok(LsView(records))
}

/// `describe`.
#[derive(Serialize)]
struct DescribeView {
    #[serde(flatten)]
    record: RecordView,
    schema: OwnedNamedType,
    schema_text: String,
}

impl View for DescribeView {
    fn text(&self) -> String {
        let r = &self.record;
        let mut t = String::new();
        let _ = writeln!(t, "record:      {}", r.name);
        let _ = writeln!(t, "kind:        {}", r.kind);
        let _ = writeln!(t, "capacity:    {}", r.capacity);
        let _ = writeln!(t, "writable:    {}", yes_no(r.writable));
        let _ = writeln!(t, "codec:       {}", r.codec);
        let _ = writeln!(t, "topics:      {}", r.topics.join(", "));
        let _ = writeln!(t, "schema hash: {}", r.schema_hash);
        let _ = writeln!(t, "type:        {}", r.type_name);
        t.push_str("schema:\n");
        for line in self.schema_text.lines() {
            let _ = writeln!(t, "  {line}");
        }
        t
    }
}

async fn describe(c: &mut Client, record: &str) -> Result<DescribeView, Fail> {
    let i = info(c, record).await?;
    Ok(DescribeView {
        record: RecordView::from(&i),
        schema_text: i.schema_text(),
        schema: i.schema,
    })
}

/// `get`.
#[derive(Serialize)]
struct GetView {
    record: String,
    writes: u64,
    value: Option<Value>,
}

impl View for GetView {
    fn text(&self) -> String {
        let mut t = match &self.value {
            Some(v) => serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()),
            None => "(no value yet)".into(),
        };
        let _ = write!(t, "\nwrites: {}\n", self.writes);
        t
    }
}

async fn get(c: &mut Client, record: &str) -> Result<GetView, Fail> {
    let i = info(c, record).await?;
    let reply = c.call(Op::Get { record }).await?;
    let (writes, value) = match reply.body()? {
        Body::Value { writes, value } => (writes, value.map(|b| i.decode(b)).transpose()?),
        b => return Err(unexpected(&b)),
    };
    Ok(GetView {
        record: record.into(),
        writes,
        value,
    })
}

/// `set`.
#[derive(Serialize)]
struct SetView {
    record: String,
    ok: bool,
}

impl View for SetView {
    fn text(&self) -> String {
        "ok\n".into()
    }
}

async fn set(c: &mut Client, record: &str, text: &str) -> Result<SetView, Fail> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| Fail::Schema(format!("not JSON: {e}")))?;
    let i = info(c, record).await?;
    let bytes = postcard_dyn::to_stdvec_dyn(&i.schema, &v).map_err(|e| {
        Fail::Schema(format!(
            "{v} does not fit the schema of `{record}`: {e:?}; expected {}",
            i.schema_text().replace('\n', "; ")
        ))
    })?;
    let reply = c
        .call(Op::Set {
            record,
            value: &bytes,
        })
        .await?;
    match reply.body()? {
        Body::Written => Ok(SetView {
            record: record.into(),
            ok: true,
        }),
        b => Err(unexpected(&b)),
    }
}

/// One record's counters in `stats`.
#[derive(Serialize)]
struct RecordCounters {
    record: String,
    writes: u64,
    replaced: u64,
}

/// A connector's link state in `stats`.
#[derive(Serialize)]
struct LinkView {
    status: &'static str,
    seq: u64,
    cause: Option<&'static str>,
}

impl From<LinkState> for LinkView {
    fn from(l: LinkState) -> Self {
        Self {
            status: match l.status {
                Status::Connecting => "connecting",
                Status::Online => "online",
                Status::Offline => "offline",
            },
            seq: l.seq,
            cause: l.cause.map(|c| c.as_str()),
        }
    }
}

impl LinkView {
    /// As the connectors table shows it: `online #3`, `offline #3 (lost)`.
    fn text(&self) -> String {
        let mut t = format!("{} #{}", self.status, self.seq);
        if let Some(c) = self.cause {
            let _ = write!(t, " ({c})");
        }
        t
    }
}

/// One connector's counters in `stats`.
#[derive(Serialize)]
struct ConnectorView {
    name: String,
    sent: u32,
    received: u32,
    rejected: u32,
    dropped: u32,
    lagged: u32,
    reconnects: u32,
    link: Option<LinkView>,
    /// Its durable backlog, if it has one.
    backlog: Option<BacklogView>,
}

/// A connector's durable backlog in `stats`.
#[derive(Serialize)]
struct BacklogView {
    depth: u32,
    bytes: u32,
    behind_ms: u32,
    dropped: u32,
    erases: u32,
    flash_errors: u32,
}

impl From<aimdb_core::remote::BacklogCounters> for BacklogView {
    fn from(b: aimdb_core::remote::BacklogCounters) -> Self {
        Self {
            depth: b.depth,
            bytes: b.bytes,
            behind_ms: b.behind_ms,
            dropped: b.dropped,
            erases: b.erases,
            flash_errors: b.flash_errors,
        }
    }
}

/// Milliseconds as an operator reads a delay: `850 ms`, `42 s`, `12 min`,
/// `3 h`.
fn behind(ms: u32) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=119_999 => format!("{} s", ms / 1_000),
        120_000..=7_199_999 => format!("{} min", ms / 60_000),
        _ => format!("{} h", ms / 3_600_000),
    }
}

/// The responder's counters in `stats`.
#[derive(Serialize)]
struct ResponderView {
    requests: u32,
    answered: u32,
    malformed: u32,
    busy: u32,
    denied: u32,
    updates: u32,
}

impl From<ResponderStats> for ResponderView {
    fn from(s: ResponderStats) -> Self {
        Self {
            requests: s.requests,
            answered: s.answered,
            malformed: s.malformed,
            busy: s.busy,
            denied: s.denied,
            updates: s.updates,
        }
    }
}

/// `stats`.
#[derive(Serialize)]
struct StatsView {
    records: Vec<RecordCounters>,
    connectors: Vec<ConnectorView>,
    responder: ResponderView,
}

impl View for StatsView {
    fn text(&self) -> String {
        let mut t = table::of(&["RECORD", "WRITES", "REPLACED"], &self.records, |r| {
            vec![
                r.record.clone(),
                r.writes.to_string(),
                r.replaced.to_string(),
            ]
        });
        let own = &self.responder;
        let _ = writeln!(
            t,
            "\nresponder: {} requests, {} answers, {} malformed, {} busy, {} refused writes, {} watch updates",
            own.requests, own.answered, own.malformed, own.busy, own.denied, own.updates
        );
        if self.connectors.is_empty() {
            return t;
        }
        t.push('\n');
        t.push_str(&table::of(
            &[
                "CONNECTOR",
                "LINK",
                "SENT",
                "RECEIVED",
                "REJECTED",
                "DROPPED",
                "LAGGED",
                "RECONNECTS",
            ],
            &self.connectors,
            |k| {
                vec![
                    k.name.clone(),
                    k.link.as_ref().map_or("-".into(), LinkView::text),
                    k.sent.to_string(),
                    k.received.to_string(),
                    k.rejected.to_string(),
                    k.dropped.to_string(),
                    k.lagged.to_string(),
                    k.reconnects.to_string(),
                ]
            },
        ));
        let backlogs: Vec<(&str, &BacklogView)> = self
            .connectors
            .iter()
            .filter_map(|k| Some((k.name.as_str(), k.backlog.as_ref()?)))
            .collect();
        if !backlogs.is_empty() {
            t.push('\n');
            t.push_str(&table::of(
                &[
                    "BACKLOG",
                    "STORED",
                    "BYTES",
                    "IN FLIGHT",
                    "BEHIND",
                    "DROPPED",
                    "REFUSED",
                    "ERASES",
                    "FLASH ERRORS",
                ],
                &backlogs,
                |(name, b)| {
                    vec![
                        (*name).into(),
                        b.depth.to_string(),
                        b.bytes.to_string(),
                        behind(b.behind_ms),
                        b.dropped.to_string(),
                        b.erases.to_string(),
                        b.flash_errors.to_string(),
                    ]
                },
            ));
        }
        t
    }
}

/// Every stats page: the records' counters, the connectors' (from the
/// first page) and the responder's (from the last).
async fn stats(c: &mut Client) -> Result<StatsView, Fail> {
    let mut records = Vec::new();
    let mut connectors = Vec::new();
    loop {
        let from = u16::try_from(records.len()).unwrap_or(u16::MAX);
        let reply = c.call(Op::Stats { from }).await?;
        match reply.body()? {
            Body::Stats {
                total,
                from,
                entries,
                connectors: conns,
                responder,
            } => {
                if from == 0 {
                    connectors = conns
                        .iter()
                        .map(|k| ConnectorView {
                            name: k.name.into(),
                            sent: k.counters.sent,
                            received: k.counters.received,
                            rejected: k.counters.rejected,
                            dropped: k.counters.dropped,
                            lagged: k.counters.lagged,
                            reconnects: k.counters.reconnects,
                            link: k.link.map(LinkView::from),
                            backlog: k.backlog.map(BacklogView::from),
                        })
                        .collect();
                }
                let next = usize::from(from) + entries.len();
                let done = entries.is_empty() || next >= usize::from(total);
                records.truncate(usize::from(from));
                records.extend(entries.iter().map(|e| RecordCounters {
                    record: e.name.into(),
                    writes: e.writes,
                    replaced: e.replaced,
                }));
                if done {
                    return Ok(StatsView {
                        records,
                        connectors,
                        responder: responder.into(),
                    });
                }
            }
            b => return Err(unexpected(&b)),
        }
    }
}

/// One node prefix in `nodes`: its presence and manifest (retained on the
/// broker), and whether it answers.
#[derive(Serialize)]
struct NodeView {
    node: String,
    role: &'static str,
    status: String,
    seq: Option<u64>,
    /// Whether a node answered a `list` (a gateway is not asked).
    answers: Option<bool>,
    /// `<prefix>/aimdb/manifest`, parsed (null if none, or not JSON).
    manifest: Value,
}

impl NodeView {
    /// The manifest's record names, comma-separated.
    fn records(&self) -> Option<String> {
        let records = self.manifest.get("records")?.as_array()?;
        let names: Vec<&str> = records
            .iter()
            .filter_map(|r| r.get("name")?.as_str())
            .collect();
        Some(names.join(","))
    }

    /// The connectors the manifest says keep a durable backlog,
    /// comma-separated (`None`: none, or a manifest that does not say).
    fn backlogs(&self) -> Option<String> {
        let names: Vec<&str> = self
            .manifest
            .get("backlogs")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        (!names.is_empty()).then(|| names.join(","))
    }
}

/// `nodes`.
#[derive(Serialize)]
#[serde(transparent)]
struct NodesView(Vec<NodeView>);

impl View for NodesView {
    fn text(&self) -> String {
        table::of(
            &[
                "NODE", "ROLE", "STATUS", "SEQ", "ANSWERS", "BACKLOG", "RECORDS",
            ],
            &self.0,
            |n| {
                vec![
                    n.node.clone(),
                    n.role.into(),
                    n.status.clone(),
                    n.seq.map_or("-".into(), |s| s.to_string()),
                    n.answers.map_or("-", yes_no).into(),
                    n.backlogs().map_or("-".into(), |b| clip(b, 24)),
                    n.records().map_or("-".into(), |r| clip(r, 48)),
                ]
            },
        )
    }
}

/// What the broker keeps about one node prefix.
#[derive(Default)]
struct Seen {
    /// Status and seq from `<prefix>/presence`.
    presence: Option<(String, Option<u64>)>,
    manifest: Option<Value>,
    answers: bool,
}

async fn nodes(c: &mut Client, timeout: Duration) -> Result<NodesView, Fail> {
    // Retained messages arrive right after the subscription.
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let listen = Duration::from_secs(1).min(timeout);
    let deadline = tokio::time::Instant::now() + listen;
    while let Some((topic, payload)) = c.message(deadline).await? {
        let (prefix, presence) = if let Some(p) = topic.strip_suffix("/presence") {
            (p, true)
        } else if let Some(p) = proto::prefix_of(&topic, proto::MANIFEST) {
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

    let is_node = |prefix: &str| !prefix.ends_with("/gateway");
    // Does each node answer? One `list` request each, all at once.
    let mut asked: BTreeMap<String, u32> = BTreeMap::new();
    for prefix in seen.keys().filter(|p| is_node(p)) {
        let id = c
            .send_to(proto::topic(prefix, proto::REQUEST), Op::List { from: 0 })
            .await?;
        asked.insert(proto::topic(prefix, proto::RESPONSE), id);
    }
    let deadline = tokio::time::Instant::now() + listen;
    let mut pending = asked.len();
    while pending > 0 {
        let Some((topic, payload)) = c.message(deadline).await? else {
            break;
        };
        let Some(&id) = asked.get(&topic) else {
            continue;
        };
        let ok = Reply::new(payload).is_some_and(|r| r.id == id);
        let prefix = proto::prefix_of(&topic, proto::RESPONSE).unwrap_or(&topic);
        if let Some(p) = seen.get_mut(prefix) {
            if ok && !p.answers {
                p.answers = true;
                pending -= 1;
            }
        }
    }

    Ok(NodesView(
        seen.into_iter()
            .map(|(prefix, p)| {
                let node = is_node(&prefix);
                let (status, seq) = p.presence.unwrap_or(("unknown".into(), None));
                NodeView {
                    node: prefix.trim_end_matches("/gateway").to_string(),
                    role: if node { "node" } else { "gateway" },
                    status,
                    seq,
                    answers: node.then_some(p.answers),
                    manifest: p.manifest.unwrap_or(Value::Null),
                }
            })
            .collect(),
    ))
}
