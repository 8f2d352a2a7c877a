//! A mosquitto broker and its command-line clients for tests, with
//! password files and TLS listeners.
//!
//! Each [`Broker`] runs its own `mosquitto` on 127.0.0.1 and a free port
//! with the listener settings the test gives, writes its files into a
//! [`TempDir`] of its own, and is killed by PID when dropped. Every wait is
//! bounded by [`WAIT`]. Without mosquitto installed the tests fail with a
//! message naming the Debian packages (`mosquitto mosquitto-clients`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// Bound on every wait.
pub const WAIT: Duration = Duration::from_secs(15);

const INSTALL: &str = "install the Debian packages `mosquitto mosquitto-clients` \
                       (scripts/install-deps.sh does)";

fn mosquitto_bin() -> PathBuf {
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
        if Path::new(p).exists() {
            return p.into();
        }
    }
    panic!(
        "mosquitto not found (looked in /usr/sbin, /usr/bin, /usr/local/sbin; or set MOSQUITTO): \
         {INSTALL}"
    );
}

/// `name` (a mosquitto tool on `PATH`), or a panic saying what to install.
pub fn tool(name: &str) -> Command {
    let probe = Command::new(name)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if probe.is_err() {
        panic!("`{name}` not found: {INSTALL}");
    }
    Command::new(name)
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// A directory removed (with its contents) on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory named after the process and `tag`.
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("aimdb-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` in the directory; returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A mosquitto password file for one user, made by `mosquitto_passwd -b -c`
/// (Debian package `mosquitto`).
pub fn password_file(dir: &TempDir, user: &str, password: &str) -> PathBuf {
    let p = dir.path().join("passwd");
    let out = tool("mosquitto_passwd")
        .args(["-b", "-c"])
        .arg(&p)
        .args([user, password])
        .stdin(Stdio::null())
        .output()
        .expect("run mosquitto_passwd");
    assert!(
        out.status.success(),
        "mosquitto_passwd failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    p
}

/// A mosquitto process, killed (by its PID) on drop.
pub struct Broker {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<String>>,
}

impl Broker {
    /// Starts mosquitto with `listener <port> 127.0.0.1` followed by
    /// `settings` (one directive per line), its config file in `dir`, and
    /// waits until the port accepts TCP.
    pub fn start(dir: &TempDir, port: u16, settings: &str) -> Self {
        let bin = mosquitto_bin();
        // `user root`: when the tests run as root (CI), keep root instead of
        // switching to a `mosquitto` user that may not exist (or may not
        // read the test's files).
        let conf = dir.write(
            "mosquitto.conf",
            format!(
                "user root\nlog_dest stderr\nlog_type all\n\
                 listener {port} 127.0.0.1\n{settings}\n"
            ),
        );
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
        let mut broker = Broker { child, port, log };
        let deadline = Instant::now() + WAIT;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!(
                    "mosquitto exited ({status}) before listening on {port}:\n{}",
                    broker.log()
                );
            }
            assert!(
                Instant::now() < deadline,
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

    /// Waits until the broker's log contains `needle`.
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
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the command-line clients reach the broker: host, port, and any
/// `-u`/`-P`/`--cafile` arguments.
#[derive(Debug, Clone)]
pub struct ClientArgs(pub Vec<String>);

impl ClientArgs {
    pub fn new(broker: &Broker) -> Self {
        Self(vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            broker.port.to_string(),
        ])
    }

    pub fn user(mut self, user: &str, password: &str) -> Self {
        self.0
            .extend(["-u".into(), user.into(), "-P".into(), password.into()]);
        self
    }

    pub fn cafile(mut self, ca: &Path) -> Self {
        self.0.extend(["--cafile".into(), ca.display().to_string()]);
        self
    }
}

/// A `mosquitto_sub` printing `topic hexpayload` lines; killed on drop.
pub struct Sub {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Sub {
    /// Subscribes client `id` to `filter` and waits for the broker's SUBACK.
    pub async fn start(broker: &Broker, args: &ClientArgs, id: &str, filter: &str) -> Self {
        let mut cmd = tokio::process::Command::from(tool("mosquitto_sub"));
        cmd.args(&args.0)
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

    /// The next line, within [`WAIT`].
    pub async fn next(&mut self) -> String {
        match tokio::time::timeout(WAIT, self.lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            Ok(other) => panic!("mosquitto_sub ended: {other:?}"),
            Err(_) => panic!("mosquitto_sub received nothing within {WAIT:?}"),
        }
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `mosquitto_pub` of raw bytes (from stdin) at QoS 1; returns whether it
/// succeeded (a refused connection is a failure).
pub async fn try_publish(args: &ClientArgs, topic: &str, payload: &[u8]) -> bool {
    let mut cmd = tokio::process::Command::from(tool("mosquitto_pub"));
    cmd.args(&args.0)
        .args(["-t", topic, "-q", "1", "-s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("start mosquitto_pub");
    let mut stdin = child.stdin.take().expect("pub stdin");
    stdin.write_all(payload).await.expect("write payload");
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("mosquitto_pub finished in time")
        .expect("mosquitto_pub status");
    status.success()
}

/// [`try_publish`] that must succeed.
pub async fn publish(args: &ClientArgs, topic: &str, payload: &[u8]) {
    assert!(
        try_publish(args, topic, payload).await,
        "mosquitto_pub -t {topic} failed"
    );
}
