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
use common::{aimdb, expect_code, stdout, Node};
use mosquitto::{alongside, connector, free_port, tcp, until, within, Broker};
use serde_json::Value;

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

#[tokio::test]
async fn ls_and_nodes_over_mqtt() {
    if !have_mosquitto() {
        eprintln!("mosquitto not installed: skipping the MQTT test");
        return;
    }
    let port = free_port();
    let broker = Broker::anonymous(port);
    let url = format!("mqtt://127.0.0.1:{port}");

    let node = Node::new();
    let (req, rsp) = (format!("{PREFIX}/aimdb/req"), format!("{PREFIX}/aimdb/rsp"));
    let presence = format!("{PREFIX}/presence");
    let mut b = Dispatch::<2, 8>::builder();
    b.link(&req, node.responder);
    let mut dispatch = b.build().unwrap();
    let mut answers = outbound::Link::new(
        node.responder.requests(),
        rsp.as_str(),
        node.responder.answers(),
    );
    let mut payload = [0u8; 1024];
    let mut b = Routes::<_, 1, 1>::builder(node.ready, &mut payload);
    b.link(&mut answers);
    let mut routes = b.build().unwrap();
    let mut config = Config::new(CLIENT);
    config.presence = Some(Presence::new(&presence));
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 1024], [0u8; 2048]);
    let mut mqtt = connector(config, &mut rx, &mut tx, tcp(port), &counters);

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

        // The retained presence names the node, online, and it answers.
        let row = within("the node in `aimdb nodes`", async {
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
                if let Some(row) = v.as_array().unwrap().iter().find(|r| r["node"] == PREFIX) {
                    return row.clone();
                }
            }
        })
        .await;
        assert_eq!(row["status"], "online", "{row}");
        assert!(row["seq"].is_u64(), "{row}");
        assert_eq!(row["answers"], true, "{row}");

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
