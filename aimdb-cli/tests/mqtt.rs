//! The `aimdb` binary against an in-process node on the workspace's own
//! MQTT connector, through a mosquitto on loopback (the broker helpers are
//! aimdb-connectors' test module, shared by path). Skipped, with a note,
//! when mosquitto is not installed.

mod common;
#[path = "../../aimdb-connectors/tests/mosquitto/mod.rs"]
mod mosquitto;

use std::path::Path;

use aimdb_connectors::mqtt::{Config, Counters, Presence};
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::{self, Routes};
use aimdb_core::remote::{proto, ManifestJson};
use common::{aimdb, expect_code, stdout, Node};
use mosquitto::{alongside, connector, free_port, publish_retained, tcp, until, within, Broker};
use serde_json::{json, Value};

const PREFIX: &str = "site/dev9";
const CLIENT: &str = "cli-test-node";

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

/// Runs `aimdb` off the runtime thread (the connector runs on it).
async fn run(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        aimdb(&args)
    })
    .await
    .expect("aimdb runner")
}

/// The record names of a manifest.
fn record_names(manifest: &Value) -> Vec<&str> {
    manifest["records"]
        .as_array()
        .unwrap_or_else(|| panic!("no records: {manifest}"))
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn ls_nodes_stats_and_watch_over_mqtt() {
    if !have_mosquitto() {
        eprintln!("mosquitto not installed: skipping the MQTT test");
        return;
    }
    let port = free_port();
    let broker = Broker::anonymous(port);
    let url = format!("mqtt://127.0.0.1:{port}");

    let counters: &'static Counters = Box::leak(Box::new(Counters::new()));
    let node = Node::with_connector("mqtt", counters);
    let (req, rsp) = (
        proto::topic(PREFIX, proto::REQUEST),
        proto::topic(PREFIX, proto::RESPONSE),
    );
    let manifest = proto::topic(PREFIX, proto::MANIFEST);
    let presence = format!("{PREFIX}/presence");
    let mut b = Dispatch::<2, 8>::builder();
    b.link(&req, node.responder);
    let mut dispatch = b.build().unwrap();
    let mut answers = outbound::Link::new(
        node.responder.requests(),
        rsp.as_str(),
        node.responder.answers(),
    );
    // The manifest: retained, once per connection.
    let mut manifests =
        outbound::Link::new(node.responder.manifest(), manifest.as_str(), ManifestJson);
    let mut payload = [0u8; 1024];
    let mut b = Routes::<_, 1, 2>::builder(node.ready, &mut payload);
    b.link(&mut answers).link(&mut manifests);
    let mut routes = b.build().unwrap();
    let mut config = Config::new(CLIENT);
    config.presence = Some(Presence::new(&presence));
    let (mut rx, mut tx) = ([0u8; 1024], [0u8; 2048]);
    let mut mqtt = connector(config, &mut rx, &mut tx, tcp(port), counters).with_link(node.link);
    // A node known by its manifest alone (no presence).
    publish_retained(
        &broker,
        &proto::topic("lonely", proto::MANIFEST),
        br#"{"records":[{"name":"solo","kind":"latest"}]}"#,
    )
    .await;
    // One whose manifest names a connector with a durable backlog.
    publish_retained(
        &broker,
        &proto::topic("kept", proto::MANIFEST),
        br#"{"records":[{"name":"solo","kind":"ring"}],"backlogs":["mqtt"]}"#,
    )
    .await;

    alongside(mqtt.run(&mut dispatch, &mut routes), async {
        until("the node's subscription", || {
            broker.subscriptions(CLIENT).contains(&req)
        })
        .await;

        let o = run(vec![
            "--mqtt".into(),
            url.clone(),
            "--node".into(),
            PREFIX.into(),
            "--json".into(),
            "ls".into(),
        ])
        .await;
        expect_code(&o, 0);
        let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let names: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["readings", "led", "setpoint", "cmd"]);

        // The retained presence names the node, online, and it answers;
        // its retained manifest lists its records.
        let v = within("the node and its manifest in `aimdb nodes`", async {
            loop {
                let o = run(vec![
                    "--mqtt".into(),
                    url.clone(),
                    "--json".into(),
                    "nodes".into(),
                ])
                .await;
                expect_code(&o, 0);
                let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
                let rows = v.as_array().unwrap();
                if rows
                    .iter()
                    .any(|r| r["node"] == PREFIX && r["manifest"].is_object())
                {
                    return v;
                }
            }
        })
        .await;
        let rows = v.as_array().unwrap();
        let row = rows.iter().find(|r| r["node"] == PREFIX).unwrap();
        assert_eq!(row["status"], "online", "{row}");
        assert!(row["seq"].is_u64(), "{row}");
        assert_eq!(row["answers"], true, "{row}");
        assert_eq!(
            record_names(&row["manifest"]),
            ["readings", "led", "setpoint", "cmd"]
        );
        assert_eq!(row["manifest"]["records"][1]["writable"], true, "{row}");
        // Its connector has no backlog, and the manifest says so.
        assert_eq!(row["manifest"]["backlogs"], json!([]), "{row}");
        let lonely = rows.iter().find(|r| r["node"] == "lonely").unwrap();
        assert_eq!(
            (&lonely["status"], &lonely["seq"], &lonely["answers"]),
            (&json!("unknown"), &Value::Null, &json!(false)),
            "{lonely}"
        );
        assert_eq!(record_names(&lonely["manifest"]), ["solo"]);

        let o = run(vec!["--mqtt".into(), url.clone(), "nodes".into()]).await;
        expect_code(&o, 0);
        let out = stdout(&o);
        assert!(out.contains("RECORDS"), "{out}");
        let line = out.lines().find(|l| l.starts_with(PREFIX)).unwrap();
        assert!(line.contains("readings,led,setpoint,cmd"), "{out}");
        // BACKLOG: the connectors the manifest names, else `-` (none, or
        // a manifest that does not say).
        let backlog = |node: &str| {
            let line = out.lines().find(|l| l.starts_with(node)).unwrap();
            line.split_whitespace().nth(5).unwrap().to_string()
        };
        assert!(out.lines().next().unwrap().contains("BACKLOG"), "{out}");
        assert_eq!(backlog("kept"), "mqtt", "{out}");
        assert_eq!(backlog("lonely"), "-", "{out}");
        assert_eq!(backlog(PREFIX), "-", "{out}");

        // stats names the MQTT connector, its link up.
        let node_args = |rest: &[&str]| -> Vec<String> {
            ["--mqtt", &url, "--node", PREFIX, "--json"]
                .iter()
                .chain(rest)
                .map(|s| s.to_string())
                .collect()
        };
        let o = run(node_args(&["stats"])).await;
        expect_code(&o, 0);
        let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let c = &v["connectors"][0];
        assert_eq!(c["name"], "mqtt", "{v}");
        assert_eq!(c["link"]["status"], "online", "{v}");
        assert!(c["received"].as_u64().unwrap() >= 1, "{v}");

        // A watch through the broker: values, then no watch left.
        node.setpoint.write(common::Setpoint {
            celsius: 21,
            on: true,
        });
        let o = run(node_args(&["watch", "setpoint", "--seconds", "1"])).await;
        expect_code(&o, 0);
        let last: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
        assert_eq!(
            last["records"]["setpoint"]["value"],
            json!({"celsius": 21, "on": true}),
            "{last}"
        );
        until("the node to hold no watch", || {
            node.responder.watching() == 0
        })
        .await;

        // A node nobody serves: no answer within the timeout.
        let o = run(vec![
            "--mqtt".into(),
            url.clone(),
            "--node".into(),
            "nobody".into(),
            "--timeout".into(),
            "0.5".into(),
            "ls".into(),
        ])
        .await;
        expect_code(&o, 4);
    })
    .await;
}
