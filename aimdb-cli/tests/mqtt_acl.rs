//! Writes only from those allowed: the broker recipe of the README's
//! "Access control on MQTT", tested. A mosquitto whose ACL lets each node
//! publish only its own data, presence, manifest and answers, and read
//! only its own requests and commands; the operator alone publishes
//! requests and commands. Clients are told apart by password (over TCP)
//! or by client certificate (over TLS, the certificate's common name taken
//! as the user name), one test each. In both, another node of the fleet
//! (`dev8`) cannot change the node's records: its `aimdb set`, a request
//! it forges and a command it sends are dropped by the broker and reach no
//! record; the operator's land. Skipped when mosquitto is not installed.

mod common;
#[path = "../../aimdb-connectors/tests/mosquitto/mod.rs"]
mod mosquitto;

use std::path::Path;

use aimdb_connectors::mqtt::{Config, Connect, Counters, Presence, TlsConnect};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{self, Dispatch};
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Record, Ring};
use aimdb_core::remote::proto::{self, Op, Request};
use common::{aimdb, expect_code, stdout, Node};
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use mosquitto::{
    addr, alongside, ca, client_cert, connector, free_port, passwords, publish, server_cert, tcp,
    until, within, Broker, ClientArgs, TempDir,
};
use serde_json::Value;

/// The node's id: its MQTT user name (or certificate name) and the last
/// level of its prefix.
const NODE: &str = "dev7";
const PREFIX: &str = "fleet/dev7";
const CLIENT: &str = "acl-test-node";
/// The node's command topic (a `Ring<u8>` record).
const BEEP: &str = "fleet/dev7/cmd/beep";

/// The recipe's ACL: `%u` is the client's user name (with
/// `use_identity_as_username`, its certificate's common name).
const ACL: &str = "\
# Every node: its user name is its id, its topics are under fleet/<id>.
pattern write fleet/%u/presence
pattern write fleet/%u/data/#
pattern write fleet/%u/aimdb/rsp
pattern write fleet/%u/aimdb/manifest
pattern read fleet/%u/aimdb/req
pattern read fleet/%u/cmd/#

# The operator reads everything and alone sends requests and commands.
user operator
topic read fleet/#
topic write fleet/+/aimdb/req
topic write fleet/+/cmd/#
";

fn have_mosquitto() -> bool {
    std::env::var_os("MOSQUITTO").is_some()
        || [
            "/usr/sbin/mosquitto",
            "/usr/bin/mosquitto",
            "/usr/local/sbin/mosquitto",
        ]
        .iter()
        .any(|p| Path::new(p).exists())
}

async fn run(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        aimdb(&args)
    })
    .await
    .expect("aimdb runner")
}

/// How a client proves who it is: `aimdb` arguments and `mosquitto_pub`
/// arguments.
struct Identity {
    cli: Vec<String>,
    pubs: ClientArgs,
}

impl Identity {
    /// `aimdb` with this identity, for the node, then `rest`.
    fn aimdb(&self, rest: &[&str]) -> Vec<String> {
        let mut v = self.cli.clone();
        v.extend(["--node", PREFIX, "--json"].map(String::from));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    }
}

/// A `set` of `led` to `true`, encoded as `aimdb set` would send it.
fn forged_set() -> Vec<u8> {
    let op = Op::Set {
        record: "led",
        value: &[1],
    };
    postcard::to_stdvec(&Request { id: 9, op }).unwrap()
}

/// The node on the MQTT connector (`connect`, `config`) beside the test
/// body: remote access on `fleet/dev7/aimdb/{req,rsp}`, commands on
/// [`BEEP`] into a ring; then the operator and the intruder at work.
async fn only_the_operator_writes<C: Connect>(
    broker: &Broker,
    connect: C,
    mut config: Config<'static>,
    operator: &Identity,
    intruder: &Identity,
) {
    let counters: &'static Counters = Box::leak(Box::new(Counters::new()));
    let node = Node::with_connector("mqtt", counters);
    let beeps: &'static Record<Cs, Ring<u8, 4>, 1> = Box::leak(Box::new(Record::new("beeps")));
    let mut beeps_read = beeps.subscribe().unwrap();
    let beep_link: &'static inbound::Link<'static, _, Postcard, u8> =
        Box::leak(Box::new(inbound::Link::new(beeps, Postcard)));
    let (req, rsp) = (
        proto::topic(PREFIX, proto::REQUEST),
        proto::topic(PREFIX, proto::RESPONSE),
    );
    let presence = format!("{PREFIX}/presence");
    let mut b = Dispatch::<2, 8>::builder();
    b.link(&req, node.responder).link(BEEP, beep_link);
    let mut dispatch = b.build().unwrap();
    let mut answers = outbound::Link::new(
        node.responder.requests(),
        rsp.as_str(),
        node.responder.answers(),
    );
    let mut payload = [0u8; 512];
    let mut b = Routes::<_, 1, 1>::builder(node.ready, &mut payload);
    b.link(&mut answers);
    let mut routes = b.build().unwrap();
    let presence: &'static str = Box::leak(presence.into_boxed_str());
    config.presence = Some(Presence::new(presence));
    let (rx, tx) = (
        Box::leak(Box::new([0u8; 1024])),
        Box::leak(Box::new([0u8; 2048])),
    );
    let mut mqtt = connector(config, rx, tx, connect, counters).with_link(node.link);

    alongside(mqtt.run(&mut dispatch, &mut routes), async {
        until("the node's subscriptions", || {
            let s = broker.subscriptions(CLIENT);
            s.contains(&req) && s.iter().any(|t| t == BEEP)
        })
        .await;

        // The node's own topics are its to write: its birth is seen.
        let o = run(operator.aimdb(&["nodes"])).await;
        expect_code(&o, 0);
        let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let row = v.as_array().unwrap().iter().find(|r| r["node"] == PREFIX);
        assert_eq!(row.map(|r| &r["status"]), Some(&"online".into()), "{v}");

        let o = run(operator.aimdb(&["set", "led", "false"])).await;
        expect_code(&o, 0);
        assert_eq!(node.led.with_newest(|v| v.copied()), Some(false));

        // Another node: mosquitto takes its subscription to the answers but
        // delivers none, and drops its request: no answer (exit 4), no
        // write.
        let o = run(intruder.aimdb(&["--timeout", "1", "set", "led", "true"])).await;
        expect_code(&o, 4);
        assert_eq!(node.led.with_newest(|v| v.copied()), Some(false));
        // A request it forges is dropped by the broker: the operator's
        // `get`, sent after it (mosquitto_pub has its PUBACK, so the broker
        // has routed it), is answered after it would have been served.
        publish(&intruder.pubs, &req, &forged_set()).await;
        let o = run(operator.aimdb(&["get", "led"])).await;
        expect_code(&o, 0);
        let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["value"], false, "{v}");
        assert_eq!(node.led.with_newest(|v| v.copied()), Some(false));

        // The same for a command: the intruder's first, then the
        // operator's; only the operator's arrives.
        publish(&intruder.pubs, BEEP, &[66]).await;
        publish(&operator.pubs, BEEP, &[7]).await;
        let first = within("the operator's command", beeps_read.recv()).await;
        assert_eq!(first.ok(), Some(7));
        assert!(beeps_read.try_recv().is_err(), "a second command arrived");

        // The operator's write still lands.
        let o = run(operator.aimdb(&["set", "led", "true"])).await;
        expect_code(&o, 0);
        assert_eq!(node.led.with_newest(|v| v.copied()), Some(true));
    })
    .await;
}

fn node_config(credentials: Option<(&'static str, &'static [u8])>) -> Config<'static> {
    let mut c = Config::new(CLIENT);
    c.credentials = credentials;
    c
}

#[tokio::test]
async fn with_passwords_only_the_operator_writes() {
    if !have_mosquitto() {
        eprintln!("mosquitto not installed: skipping the MQTT ACL test");
        return;
    }
    let dir = TempDir::new("cli-acl-passwd");
    let passwd = passwords(
        &dir,
        &[
            (NODE, "node pw"),
            ("operator", "op pw"),
            ("dev8", "dev8 pw"),
        ],
    );
    let acl = dir.write("acl", ACL);
    let broker = Broker::start(
        &dir,
        free_port(),
        &format!(
            "log_type all\nallow_anonymous false\npassword_file {}\nacl_file {}\n",
            passwd.display(),
            acl.display()
        ),
    );
    let url = format!("mqtt://127.0.0.1:{}", broker.port);
    let who = |user: &str, password: &str| Identity {
        cli: ["--mqtt", &url, "--username", user, "--password", password]
            .map(String::from)
            .to_vec(),
        pubs: ClientArgs::new(&broker).user(user, password),
    };
    let (operator, intruder) = (who("operator", "op pw"), who("dev8", "dev8 pw"));
    let config = node_config(Some((NODE, b"node pw")));
    only_the_operator_writes(&broker, tcp(broker.port), config, &operator, &intruder).await;
}

#[tokio::test]
async fn with_client_certificates_only_the_operator_writes() {
    if !have_mosquitto() {
        eprintln!("mosquitto not installed: skipping the MQTT ACL test");
        return;
    }
    let dir = TempDir::new("cli-acl-certs");
    let ca = ca("aimdb fleet CA");
    let ca_pem = dir.write("ca.pem", ca.pem());
    let (cert, key) = server_cert(&ca);
    let (server, server_key) = (dir.write("server.pem", cert), dir.write("server.key", key));
    let acl = dir.write("acl", ACL);
    let broker = Broker::start(
        &dir,
        free_port(),
        &format!(
            "log_type all\ncafile {}\ncertfile {}\nkeyfile {}\n\
             require_certificate true\nuse_identity_as_username true\nacl_file {}\n",
            ca_pem.display(),
            server.display(),
            server_key.display(),
            acl.display()
        ),
    );
    let url = format!("mqtts://localhost:{}", broker.port);
    let who = |name: &str| {
        let (cert, key) = client_cert(&ca, name);
        let (cert, key) = (
            dir.write(&format!("{name}.pem"), cert),
            dir.write(&format!("{name}.key"), key),
        );
        Identity {
            cli: vec![
                "--mqtt".into(),
                url.clone(),
                "--tls-ca".into(),
                ca_pem.display().to_string(),
                "--tls-cert".into(),
                cert.display().to_string(),
                "--tls-key".into(),
                key.display().to_string(),
            ],
            pubs: ClientArgs::new(&broker).cafile(&ca_pem).cert(&cert, &key),
        }
    };
    let (operator, intruder) = (who("operator"), who("dev8"));
    let (cert, key) = client_cert(&ca, NODE);
    let connect = TlsConnect::with_client_pem(
        addr(broker.port),
        "localhost",
        ca.pem().as_bytes(),
        cert.as_bytes(),
        key.as_bytes(),
    )
    .unwrap();
    only_the_operator_writes(&broker, connect, node_config(None), &operator, &intruder).await;
}

/// A broker that refuses the subscription to the answers (as brokers
/// whose ACL covers subscriptions do; mosquitto grants it and delivers
/// nothing): `aimdb` stops at once, exit 7, naming the topic.
#[tokio::test]
async fn a_refused_subscription_exits_7() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let broker = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut s, _) = listener.accept().await.unwrap();
        let (connect, _) = mosquitto::read_packet(&mut s).await;
        assert_eq!(connect >> 4, 1, "CONNECT first");
        s.write_all(&[0x20, 0x02, 0x00, 0x00]).await.unwrap();
        let (subscribe, body) = mosquitto::read_packet(&mut s).await;
        assert_eq!(subscribe, 0x82, "SUBSCRIBE");
        // SUBACK for its packet id: 0x80, failure.
        s.write_all(&[0x90, 0x03, body[0], body[1], 0x80])
            .await
            .unwrap();
        // Held open until the client leaves.
        let _ = s.read_to_end(&mut Vec::new()).await;
    });
    let url = format!("mqtt://127.0.0.1:{port}");
    let o = run(["--mqtt", &url, "--node", PREFIX, "get", "led"]
        .map(String::from)
        .to_vec())
    .await;
    expect_code(&o, 7);
    let err = common::stderr(&o);
    assert!(
        err.contains("refused the subscription to fleet/dev7/aimdb/rsp"),
        "{err}"
    );
    broker.await.unwrap();
}
