//! The `aimdb` binary against an in-process node over a framed TCP link
//! on loopback.

mod common;

use common::{aimdb, expect_code, stderr, stdout, Node, Reading, Setpoint};
use serde_json::{json, Value};

fn tcp(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn json_out(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn ls_lists_every_record() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());

    let o = aimdb(&["--tcp", &addr, "ls"]);
    expect_code(&o, 0);
    let out = stdout(&o);
    for word in [
        "readings", "led", "setpoint", "cmd", "Reading", "Setpoint", "dev/led",
    ] {
        assert!(out.contains(word), "{word} missing from:\n{out}");
    }

    let o = aimdb(&["--tcp", &addr, "--json", "ls"]);
    expect_code(&o, 0);
    let v = json_out(&o);
    let rows: Vec<(&str, &str, bool, &str)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["kind"].as_str().unwrap(),
                r["writable"].as_bool().unwrap(),
                r["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("readings", "ring", false, "Reading"),
            ("led", "latest", true, "bool"),
            ("setpoint", "latest", true, "Setpoint"),
            ("cmd", "mailbox", false, "u8"),
        ]
    );
    assert_eq!(v[0]["capacity"], 4);
    assert_eq!(v[0]["topics"], json!(["dev/readings"]));
}

#[test]
fn get_decodes_a_struct_with_the_schema() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());

    let o = aimdb(&["--tcp", &addr, "--json", "get", "readings"]);
    expect_code(&o, 0);
    assert_eq!(
        json_out(&o),
        json!({"record": "readings", "writes": 0, "value": null})
    );

    for seq in 0..3 {
        node.readings.write(Reading {
            seq,
            millideg: -2500,
        });
    }
    let o = aimdb(&["--tcp", &addr, "--json", "get", "readings"]);
    expect_code(&o, 0);
    assert_eq!(
        json_out(&o),
        json!({"record": "readings", "writes": 3, "value": {"seq": 2, "millideg": -2500}})
    );

    let o = aimdb(&["--tcp", &addr, "get", "readings"]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("\"millideg\": -2500"), "{}", stdout(&o));
    assert!(stdout(&o).contains("writes: 3"), "{}", stdout(&o));
}

#[test]
fn describe_shows_the_schema() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());
    let o = aimdb(&["--tcp", &addr, "describe", "setpoint"]);
    expect_code(&o, 0);
    let out = stdout(&o);
    for word in [
        "Setpoint",
        "celsius",
        "i16",
        "on",
        "bool",
        "writable:    yes",
    ] {
        assert!(out.contains(word), "{word} missing from:\n{out}");
    }
}

#[test]
fn set_writes_a_writable_record() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());

    let o = aimdb(&[
        "--tcp",
        &addr,
        "set",
        "setpoint",
        r#"{"celsius": -4, "on": true}"#,
    ]);
    expect_code(&o, 0);
    assert_eq!(stdout(&o).trim(), "ok");
    assert_eq!(
        node.setpoint.with_newest(|v| v.cloned()),
        Some(Setpoint {
            celsius: -4,
            on: true
        })
    );

    let o = aimdb(&["--tcp", &addr, "set", "led", "true"]);
    expect_code(&o, 0);
    assert_eq!(node.led.with_newest(|v| v.copied()), Some(true));

    // And it reads back.
    let o = aimdb(&["--tcp", &addr, "--json", "get", "setpoint"]);
    expect_code(&o, 0);
    assert_eq!(json_out(&o)["value"], json!({"celsius": -4, "on": true}));
}

#[test]
fn set_on_a_read_only_record_is_a_node_error_and_changes_nothing() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());

    let o = aimdb(&["--tcp", &addr, "set", "cmd", "3"]);
    expect_code(&o, 5);
    assert!(
        stderr(&o).contains("set cmd: record is read-only"),
        "{}",
        stderr(&o)
    );
    assert_eq!(node.cmd.writes(), 0);
    assert_eq!(node.responder.stats().denied, 1);

    let o = aimdb(&["--tcp", &addr, "get", "nosuch"]);
    expect_code(&o, 5);
    assert!(stderr(&o).contains("no such record"), "{}", stderr(&o));
}

#[test]
fn set_with_json_not_fitting_the_schema_exits_6() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());

    for bad in [r#"{"celsius": "warm", "on": true}"#, "true", "{not json"] {
        let o = aimdb(&["--tcp", &addr, "set", "setpoint", bad]);
        expect_code(&o, 6);
    }
    let o = aimdb(&["--tcp", &addr, "set", "led", "7"]);
    expect_code(&o, 6);
    assert_eq!(node.setpoint.writes(), 0);
    assert_eq!(node.led.writes(), 0);
}

#[test]
fn an_unreachable_port_exits_3() {
    // A port that was free a moment ago: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = aimdb(&["--tcp", &tcp(port), "ls"]);
    expect_code(&o, 3);
    assert!(stderr(&o).contains("aimdb: ls: connect"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2() {
    expect_code(&aimdb(&["ls"]), 2);
    expect_code(&aimdb(&["--tcp", "127.0.0.1:1", "frobnicate"]), 2);
    expect_code(&aimdb(&["--tcp", "127.0.0.1:1", "nodes"]), 2);
}

#[test]
fn stats_and_watch_report_writes() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());
    for seq in 0..6 {
        node.readings.write(Reading { seq, millideg: 1 });
    }

    let o = aimdb(&["--tcp", &addr, "--json", "stats"]);
    expect_code(&o, 0);
    let v = json_out(&o);
    let records = &v["records"];
    assert_eq!(records[0]["record"], "readings");
    assert_eq!(records[0]["writes"], 6);
    assert!(records[0]["replaced"].is_u64(), "{v}");
    assert_eq!(records.as_array().unwrap().len(), 4);
    assert!(v["connectors"].is_array(), "{v}");

    // Two samples (at 0 s and 1 s), one JSON line each.
    let o = aimdb(&[
        "--tcp",
        &addr,
        "--json",
        "watch",
        "readings",
        "led",
        "--seconds",
        "1",
    ]);
    expect_code(&o, 0);
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", stdout(&o));
    let r = &lines[0]["records"]["readings"];
    assert_eq!(r["writes"], 6);
    assert_eq!(r["value"], json!({"seq": 5, "millideg": 1}));
    assert_eq!(r["rate"], Value::Null);
    assert!(lines[1]["records"]["readings"]["rate"].is_number());
    assert_eq!(lines[1]["records"]["led"]["value"], Value::Null);

    let o = aimdb(&["--tcp", &addr, "watch", "--seconds", "0"]);
    expect_code(&o, 0);
    assert!(stdout(&o).contains("WRITES/S"), "{}", stdout(&o));
}
