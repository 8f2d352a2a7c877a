//! The `aimdb` binary against an in-process node over a framed TCP link
//! on loopback.

mod common;

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{
    aimdb, expect_code, finish, spawn_aimdb, stderr, stdout, wait_until, Node, Reading, Setpoint,
    WAIT,
};
use serde_json::{json, Value};

fn tcp(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn json_out(o: &std::process::Output) -> Value {
    serde_json::from_str(stdout(o).trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// One JSON value per line (`watch --json`).
fn json_lines(o: &std::process::Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
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

#[test]
fn watch_streams_writes_and_leaves_no_watch_behind() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());
    node.readings.write(Reading {
        seq: 0,
        millideg: -7,
    });

    // Writes while the tool runs: a bounded number, until it has exited.
    let readings = node.readings;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = done.clone();
        std::thread::spawn(move || {
            for seq in 1..=20_000 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                readings.write(Reading { seq, millideg: -7 });
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let o = aimdb(&[
        "--tcp",
        &addr,
        "--json",
        "watch",
        "readings",
        "led",
        "--seconds",
        "2",
    ]);
    done.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    expect_code(&o, 0);

    // Three samples (0 s, 1 s, 2 s), the values decoded with the schema.
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 3, "{}", stdout(&o));
    let (first, last) = (
        &lines[0]["records"]["readings"],
        &lines[2]["records"]["readings"],
    );
    for r in [first, last] {
        assert_eq!(r["kind"], "ring", "{r}");
        assert_eq!(r["value"]["millideg"], -7, "{r}");
        assert!(r["value"]["seq"].is_u64(), "{r}");
    }
    assert_eq!(first["rate"], Value::Null);
    assert_eq!(first["lag"], 0);
    assert!(last["rate"].is_number(), "{last}");
    let (w0, w2) = (
        first["writes"].as_u64().unwrap(),
        last["writes"].as_u64().unwrap(),
    );
    assert!(w2 > w0, "writes went from {w0} to {w2}");
    // Lag: writes no value showed, at most the writes since the start.
    let lag = last["lag"].as_u64().unwrap();
    assert!(lag <= w2 - w0, "lag {lag} of {} writes", w2 - w0);
    let led = &lines[2]["records"]["led"];
    assert_eq!(
        (&led["writes"], &led["lag"], &led["value"]),
        (&json!(0), &json!(0), &Value::Null)
    );

    // The tool stopped its watches before it exited: the node holds none
    // (the link's end alone would not free them before a next connection).
    wait_until("the node to hold no watch", || {
        node.responder.watching() == 0
    });
}

#[test]
fn watch_polls_a_record_with_no_free_reader_slot() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());
    // Both of `led`'s reader slots taken: the node cannot watch it.
    let _readers = (node.led.subscribe().unwrap(), node.led.subscribe().unwrap());
    node.led.write(true);

    let o = aimdb(&[
        "--tcp",
        &addr,
        "--json",
        "watch",
        "led",
        "readings",
        "--seconds",
        "1",
    ]);
    expect_code(&o, 0);
    let err = stderr(&o);
    assert!(
        err.contains("watch led: record has no free reader slot") && err.contains("polling"),
        "{err}"
    );
    assert_eq!(err.matches("polling").count(), 1, "said once: {err}");
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 2, "{}", stdout(&o));
    for l in &lines {
        let led = &l["records"]["led"];
        assert_eq!((&led["writes"], &led["value"]), (&json!(1), &json!(true)));
    }
    assert!(lines[1]["records"]["led"]["rate"].is_number());
    // The other record was watched, and is no more.
    assert_eq!(lines[1]["records"]["readings"]["writes"], 0);
    wait_until("the node to hold no watch", || {
        node.responder.watching() == 0
    });
}

#[test]
fn watch_stops_its_watches_on_ctrl_c() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());
    let mut child = spawn_aimdb(&["--tcp", &addr, "--json", "watch", "setpoint"]);

    // The first sample: the watch is running.
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(WAIT).expect("a first sample").unwrap();
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["records"]["setpoint"]["value"], Value::Null, "{v}");
    assert_eq!(node.responder.watching(), 1);

    // SIGINT, as Ctrl-C sends it.
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let o = finish(child, "aimdb watch after SIGINT");
    expect_code(&o, 0);
    wait_until("the node to hold no watch", || {
        node.responder.watching() == 0
    });
}

#[test]
fn stats_reports_the_connector_and_its_link() {
    let node = Node::new();
    let addr = tcp(node.serve_tcp());
    // `ls`: one list request and four describes, five answers.
    expect_code(&aimdb(&["--tcp", &addr, "ls"]), 0);

    let o = aimdb(&["--tcp", &addr, "--json", "stats"]);
    expect_code(&o, 0);
    let v = json_out(&o);
    let c = &v["connectors"];
    assert_eq!(c.as_array().map(Vec::len), Some(1), "{v}");
    let c = &c[0];
    assert_eq!(c["name"], "framed");
    // Counted over both connections: ls's five requests and this one.
    assert!(c["received"].as_u64().unwrap() >= 6, "{c}");
    assert!(c["sent"].as_u64().unwrap() >= 5, "{c}");
    for k in ["rejected", "dropped", "lagged", "reconnects"] {
        assert!(c[k].is_u64(), "{k}: {c}");
    }
    // The link this request came over is up; its seq is the tool's.
    assert_eq!(c["link"]["status"], "online", "{c}");
    assert!(c["link"]["seq"].is_u64(), "{c}");
    assert_eq!(c["link"]["cause"], Value::Null, "{c}");

    let o = aimdb(&["--tcp", &addr, "stats"]);
    expect_code(&o, 0);
    let out = stdout(&o);
    for word in ["CONNECTOR", "RECEIVED", "RECONNECTS", "framed", "online #"] {
        assert!(out.contains(word), "{word} missing from:\n{out}");
    }
}

/// A node's durable backlog, as the tool is to show it: fixed figures.
struct Behind;

impl aimdb_core::remote::BacklogView for Behind {
    fn backlog_counters(&self) -> aimdb_core::remote::BacklogCounters {
        aimdb_core::remote::BacklogCounters {
            depth: 7_200,
            bytes: 345_600,
            behind_ms: 12 * 60_000 + 5_000,
            dropped: 3,
            erases: 41,
            flash_errors: 0,
        }
    }
}

#[test]
fn stats_show_how_far_behind_a_backlog_is() {
    static BEHIND: Behind = Behind;
    let node = Node::with_backlog(&BEHIND);
    let addr = tcp(node.serve_tcp());
    let o = aimdb(&["--tcp", &addr, "--json", "stats"]);
    expect_code(&o, 0);
    let v = json_out(&o);
    let b = &v["connectors"][0]["backlog"];
    assert_eq!(b["depth"], 7_200, "{v}");
    assert_eq!(b["behind_ms"], 725_000, "{v}");
    assert_eq!(
        (b["dropped"].as_u64(), b["erases"].as_u64()),
        (Some(3), Some(41))
    );
    let o = aimdb(&["--tcp", &addr, "stats"]);
    expect_code(&o, 0);
    let out = stdout(&o);
    // The operator's line: this node is 12 minutes behind.
    let line = out
        .lines()
        .find(|l| l.starts_with("framed") && l.contains("7200"))
        .unwrap_or_else(|| panic!("no backlog line in:\n{out}"));
    assert!(line.contains("12 min"), "{line}");
    assert!(out.contains("BEHIND"), "{out}");
    // A node without one shows none.
    let plain = Node::new();
    let addr = tcp(plain.serve_tcp());
    let o = aimdb(&["--tcp", &addr, "--json", "stats"]);
    assert_eq!(json_out(&o)["connectors"][0]["backlog"], Value::Null);
}
