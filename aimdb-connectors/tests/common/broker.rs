//! A throwaway mosquitto for tests (started on a loopback port, killed by
//! PID on drop) and `mosquitto_sub` / `mosquitto_pub` helpers: the same
//! helpers as `tests/mqtt_broker.rs`, shared here for the tests that need a
//! broker (`bounds.rs`, `access.rs`, `soak.rs`, through `#[path]`). Only
//! std and tokio, no connector types, so any test may include it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream as StdTcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// Bound on every wait.
pub const WAIT: Duration = Duration::from_secs(15);

pub fn mosquitto_bin() -> PathBuf {
    const INSTALL: &str = "install the Debian packages `mosquitto mosquitto-clients` \
                           (scripts/install-deps.sh does)";
    if let Some(p) = std::env::var_os("MOSQUITTO") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "MOSQUITTO={} does not exist: {INSTALL}",
            p.display()
        );
        return p;
    }
    for p in [
        "/usr/sbin/mosquitto",
        "/usr/bin/mosquitto",
        "/usr/local/sbin/mosquitto",
    ] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    panic!(
        "mosquitto not found (looked in /usr/sbin, /usr/bin, /usr/local/sbin; or set MOSQUITTO): \
         {INSTALL}"
    );
}

pub fn client_tool(name: &str) -> Command {
    let probe = Command::new(name)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if probe.is_err() {
        panic!("`{name}` not found: install the Debian package `mosquitto-clients`");
    }
    Command::new(name)
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// A mosquitto process, killed (by its PID) on drop.
pub struct Broker {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<String>>,
    _dir: PathBuf,
}

impl Broker {
    pub fn start(port: u16) -> Self {
        Self::start_with(port, "log_type all\n")
    }

    /// A broker whose config ends with `extra` (log types, queue limits).
    pub fn start_with(port: u16, extra: &str) -> Self {
        let bin = mosquitto_bin();
        let dir = std::env::temp_dir().join(format!("aimdb-mqtt-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("broker dir");
        let conf = dir.join("mosquitto.conf");
        // `user root`: when the tests run as root (CI), keep root instead of
        // switching to a `mosquitto` user that may not exist.
        std::fs::write(
            &conf,
            format!(
                "user root\nlistener {port} 127.0.0.1\nallow_anonymous true\n\
                 log_dest stderr\n{extra}"
            ),
        )
        .expect("write broker config");
        let mut child = Command::new(&bin)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("broker stderr");
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut broker = Broker {
            child,
            port,
            log,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if StdTcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!(
                    "mosquitto exited ({status}) before listening on {port}:\n{}",
                    broker.log()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "mosquitto not listening on {port} within {WAIT:?}:\n{}",
                broker.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        broker
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub async fn wait_log(&self, needle: &str) {
        let found = tokio::time::timeout(WAIT, async {
            while !self.log().contains(needle) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "broker log never showed {needle:?} within {WAIT:?}:\n{}",
            self.log()
        );
    }

    /// The filters `client` subscribed to, from mosquitto's
    /// `<time>: <client> <qos> <filter>` log lines.
    pub fn subscriptions(&self, client: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|l| {
                let (_, rest) = l.split_once(": ")?;
                let mut w = rest.split(' ');
                let (c, q, f) = (w.next()?, w.next()?, w.next()?);
                (c == client && q.parse::<u8>().is_ok() && w.next().is_none())
                    .then(|| f.to_string())
            })
            .collect()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `mosquitto_sub` printing `topic hexpayload` lines; killed on drop.
pub struct Sub {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader2>,
}
pub type BufReader2 = tokio::io::BufReader<tokio::process::ChildStdout>;

impl Sub {
    pub async fn start(broker: &Broker, id: &str, filter: &str) -> Self {
        let std_cmd = client_tool("mosquitto_sub");
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.args(["-h", "127.0.0.1", "-p", &broker.port.to_string()])
            .args(["-i", id, "-t", filter, "-q", "1", "-F", "%t %x"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("start mosquitto_sub");
        let out = child.stdout.take().expect("sub stdout");
        broker.wait_log(&format!("Sending SUBACK to {id}")).await;
        Sub {
            child,
            lines: tokio::io::BufReader::new(out).lines(),
        }
    }

    pub async fn next(&mut self) -> String {
        match tokio::time::timeout(WAIT, self.lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            Ok(other) => panic!("mosquitto_sub ended: {other:?}"),
            Err(_) => panic!("mosquitto_sub received nothing within {WAIT:?}"),
        }
    }

    /// Reads lines until `want` arrives (lines before it are returned too).
    pub async fn until(&mut self, want: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let l = self.next().await;
            let done = l == want;
            seen.push(l);
            if done {
                return seen;
            }
        }
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `mosquitto_pub` of raw bytes (from stdin), waited for.
pub async fn publish(broker: &Broker, topic: &str, payload: &[u8]) {
    let mut cmd = tokio::process::Command::from(client_tool("mosquitto_pub"));
    cmd.args(["-h", "127.0.0.1", "-p", &broker.port.to_string()])
        .args(["-t", topic, "-q", "1", "-s"])
        .stdin(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("start mosquitto_pub");
    let mut stdin = child.stdin.take().expect("pub stdin");
    stdin.write_all(payload).await.expect("write payload");
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("mosquitto_pub finished in time")
        .expect("mosquitto_pub status");
    assert!(
        status.success(),
        "mosquitto_pub -t {topic} failed: {status}"
    );
}
