//! A mosquitto broker and its command-line clients for tests, shared by
//! every test that needs a broker (`mqtt_broker.rs`, `mqtt_auth_tls.rs`,
//! `access.rs`, `bounds.rs`, `soak.rs`, each through `mod mosquitto;`).
//! Mostly std and tokio; the few connector helpers at the end ([`tcp`],
//! [`connector`], [`Gated`], [`alongside`]) are the set-up every MQTT test repeats.
//!
//! Each [`Broker`] runs its own `mosquitto` on 127.0.0.1 and a port the test
//! picks ([`free_port`], or the same port again to restart a broker), with
//! the listener settings the test gives: anonymous ([`Broker::anonymous`])
//! or free-form ([`Broker::start`]: password files, TLS). Its files go into
//! a [`TempDir`], removed on drop, and it is killed by PID when dropped.
//! `mosquitto_sub` ([`Sub`]) and `mosquitto_pub` ([`publish`]) play the
//! other clients, with [`ClientArgs`] for credentials and a CA. Every wait
//! is bounded by [`WAIT`]. Without mosquitto installed the tests fail with
//! a message naming the Debian packages (`mosquitto mosquitto-clients`);
//! `MOSQUITTO=/path/to/mosquitto` picks the broker binary.
#![allow(dead_code)]

use std::fmt::Display;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aimdb_connectors::mqtt::{Config, Connect, Counters, Mqtt};
use aimdb_connectors::tokio_io::TcpConnect;
use aimdb_connectors::tokio_io::TokioClock;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{self, Dispatch};
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
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
    passwords(dir, &[(user, password)])
}

/// A mosquitto password file for every `(user, password)`, made by
/// `mosquitto_passwd -b` (`-c` for the first).
pub fn passwords(dir: &TempDir, users: &[(&str, &str)]) -> PathBuf {
    let p = dir.path().join("passwd");
    for (i, (user, password)) in users.iter().enumerate() {
        let out = tool("mosquitto_passwd")
            .args(if i == 0 { &["-b", "-c"][..] } else { &["-b"] })
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
    }
    p
}

// ------------------------------------------------------------ certificates

/// A CA made at run time (rcgen): its certificate and key live in memory
/// and in a test's [`TempDir`], never in the repository.
pub fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap()
}

/// A broker certificate signed by `ca`, valid for `localhost` and
/// 127.0.0.1: (certificate PEM, key PEM).
pub fn server_cert(ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) -> (String, String) {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    leaf(
        ca,
        names,
        "localhost",
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    )
}

/// A client certificate signed by `ca` with common name `name` (what a
/// broker with `use_identity_as_username` takes as the user name):
/// (certificate PEM, key PEM).
pub fn client_cert(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    name: &str,
) -> (String, String) {
    leaf(
        ca,
        Vec::new(),
        name,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    )
}

fn leaf(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    names: Vec<String>,
    common_name: &str,
    usage: rcgen::ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A mosquitto process, killed (by its PID) on drop.
pub struct Broker {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<String>>,
    /// The broker's own files, when it owns them ([`Broker::anonymous`]);
    /// removed after the process is gone.
    dir: Option<TempDir>,
}

impl Broker {
    /// An anonymous broker on `port` logging everything (what [`Sub`]
    /// needs). Starting one again on a port whose broker was dropped
    /// restarts it there.
    pub fn anonymous(port: u16) -> Self {
        Self::anonymous_with(port, "log_type all")
    }

    /// An anonymous broker whose config ends with `extra` (log types, queue
    /// limits), its files in a [`TempDir`] of its own.
    pub fn anonymous_with(port: u16, extra: &str) -> Self {
        let dir = TempDir::new(&format!("mqtt-{port}"));
        let mut broker = Self::start(&dir, port, &format!("allow_anonymous true\n{extra}"));
        broker.dir = Some(dir);
        broker
    }

    /// Starts mosquitto with `listener <port> 127.0.0.1` followed by
    /// `settings` (one directive per line, log types included: [`Sub`]
    /// waits for the SUBACK in the log, so it needs `log_type all`), its
    /// config file in `dir`, and waits until the port accepts TCP.
    pub fn start(dir: &TempDir, port: u16, settings: &str) -> Self {
        let bin = mosquitto_bin();
        // `user root`: when the tests run as root (CI), keep root instead of
        // switching to a `mosquitto` user that may not exist (or may not
        // read the test's files).
        let conf = dir.write(
            "mosquitto.conf",
            format!("user root\nlog_dest stderr\nlistener {port} 127.0.0.1\n{settings}\n"),
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
        let mut broker = Broker {
            child,
            port,
            log,
            dir: None,
        };
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

    /// Stops the broker with SIGTERM (a broker with persistence saves its
    /// sessions and queued messages first) and waits for it to exit; the
    /// guard then holds nothing to kill.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}: {sent}");
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().expect("broker status").is_none() {
            assert!(Instant::now() < deadline, "mosquitto {pid} ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The filters `client` subscribed to, from mosquitto's
    /// `<time>: <client> <qos> <filter>` log lines (`log_type all`).
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

    /// A client certificate and its key (PEM files).
    pub fn cert(mut self, cert: &Path, key: &Path) -> Self {
        self.0.extend([
            "--cert".into(),
            cert.display().to_string(),
            "--key".into(),
            key.display().to_string(),
        ]);
        self
    }
}

/// Anonymous clients of `broker`.
impl From<&Broker> for ClientArgs {
    fn from(broker: &Broker) -> Self {
        Self::new(broker)
    }
}

impl From<&ClientArgs> for ClientArgs {
    fn from(args: &ClientArgs) -> Self {
        args.clone()
    }
}

/// A `mosquitto_sub` printing `topic hexpayload` lines; killed on drop.
pub struct Sub {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Sub {
    /// Subscribes anonymous client `id` to `filter` and waits for the
    /// broker's SUBACK.
    pub async fn start(broker: &Broker, id: &str, filter: &str) -> Self {
        Self::start_with(broker, &ClientArgs::new(broker), id, filter).await
    }

    /// [`Sub::start`] with `args` (credentials, CA).
    pub async fn start_with(broker: &Broker, args: &ClientArgs, id: &str, filter: &str) -> Self {
        Self::spawn(broker, args, id, filter, &["-q", "1", "-F", "%t %x"]).await
    }

    /// A subscription at QoS 2 printing `topic qos` lines: the QoS each
    /// message was published with (the broker delivers at the lower of
    /// the publish and the subscription QoS).
    pub async fn qos(broker: &Broker, id: &str, filter: &str) -> Self {
        let args = ClientArgs::new(broker);
        Self::spawn(broker, &args, id, filter, &["-q", "2", "-F", "%t %q"]).await
    }

    /// A subscription at QoS 1 printing `topic payload` lines, the
    /// payload as text.
    pub async fn text(broker: &Broker, id: &str, filter: &str) -> Self {
        let args = ClientArgs::new(broker);
        Self::spawn(broker, &args, id, filter, &["-q", "1", "-F", "%t %p"]).await
    }

    /// A `mosquitto_sub` of client `id` on `filter` with `options` (QoS,
    /// output format, protocol version, persistence).
    pub async fn spawn(
        broker: &Broker,
        args: &ClientArgs,
        id: &str,
        filter: &str,
        options: &[&str],
    ) -> Self {
        let mut cmd = tokio::process::Command::from(tool("mosquitto_sub"));
        cmd.args(&args.0)
            .args(["-i", id, "-t", filter])
            .args(options)
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

/// `mosquitto_pub` of raw bytes (from stdin) at QoS 1, as `to` (a
/// [`Broker`] for an anonymous client, or [`ClientArgs`]); returns its exit
/// status (a refused connection is a failure).
async fn pub_status(to: impl Into<ClientArgs>, topic: &str, payload: &[u8]) -> ExitStatus {
    pub_status_with(to, topic, payload, &[]).await
}

/// `mosquitto_pub` with `extra` arguments (`-r` to retain); an empty
/// payload is sent with `-n` (a null message).
async fn pub_status_with(
    to: impl Into<ClientArgs>,
    topic: &str,
    payload: &[u8],
    extra: &[&str],
) -> ExitStatus {
    let args: ClientArgs = to.into();
    let mut cmd = tokio::process::Command::from(tool("mosquitto_pub"));
    cmd.args(&args.0)
        .args(["-t", topic, "-q", "1"])
        .args(extra)
        .arg(if payload.is_empty() { "-n" } else { "-s" })
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
    status
}

/// Whether a `mosquitto_pub` (see [`pub_status`]) succeeded.
pub async fn try_publish(to: impl Into<ClientArgs>, topic: &str, payload: &[u8]) -> bool {
    pub_status(to, topic, payload).await.success()
}

/// A retained `mosquitto_pub -r` that must succeed; an empty `payload`
/// clears the topic's retained message.
pub async fn publish_retained(to: impl Into<ClientArgs>, topic: &str, payload: &[u8]) {
    let status = pub_status_with(to, topic, payload, &["-r"]).await;
    assert!(
        status.success(),
        "mosquitto_pub -r -t {topic} failed: {status}"
    );
}

/// A `mosquitto_pub` (see [`pub_status`]) that must succeed.
pub async fn publish(to: impl Into<ClientArgs>, topic: &str, payload: &[u8]) {
    let status = pub_status(to, topic, payload).await;
    assert!(
        status.success(),
        "mosquitto_pub -t {topic} failed: {status}"
    );
}

// ------------------------------------------------ a hand-written broker

/// Reads one MQTT packet from a hand-written broker's side of the
/// connection: (first header byte, body).
pub async fn read_packet(s: &mut tokio::net::TcpStream) -> (u8, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.expect("packet header");
    let kind = b[0];
    let (mut len, mut shift) = (0usize, 0);
    loop {
        s.read_exact(&mut b).await.expect("remaining length");
        len |= usize::from(b[0] & 0x7f) << shift;
        shift += 7;
        if b[0] & 0x80 == 0 {
            break;
        }
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.expect("packet body");
    (kind, body)
}

// ------------------------------------------------------- waits and set-up

/// Waits (polling every 5 ms) until `cond` holds; fails after [`WAIT`].
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let ok = tokio::time::timeout(WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out after {WAIT:?} waiting for {what}");
}

/// `f`'s output; fails after [`WAIT`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
}

/// Runs the test body next to the connector; the connector stopping first
/// fails the test.
pub async fn alongside(run: impl Future<Output = impl Display>, body: impl Future<Output = ()>) {
    tokio::select! {
        biased;
        () = body => {}
        why = run => panic!("connector stopped: {why}"),
    }
}

/// 127.0.0.1:`port`.
pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Plain TCP to 127.0.0.1:`port`.
pub fn tcp(port: u16) -> TcpConnect {
    TcpConnect::new(addr(port))
}

/// An MQTT connector (tokio timers) with session buffers `rx` and `tx`.
pub fn connector<'a, C: Connect>(
    config: Config<'a>,
    rx: &'a mut [u8],
    tx: &'a mut [u8],
    connect: C,
    counters: &'a Counters,
) -> Mqtt<'a, C, TokioClock> {
    Mqtt::new(
        config,
        aimdb_connectors::mqtt::Parts {
            connect,
            clock: TokioClock::new(),
            rx,
            tx,
            counters,
        },
    )
    .unwrap()
}

/// Plain TCP behind a switch the test flips: while `open()` is false, every
/// attempt fails as if the broker were unreachable.
pub struct Gated<G: Fn() -> bool> {
    pub inner: TcpConnect,
    pub open: G,
}

impl<G: Fn() -> bool> Connect for Gated<G> {
    type Connection<'c>
        = <TcpConnect as Connect>::Connection<'c>
    where
        Self: 'c;
    type Error = std::io::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        if !(self.open)() {
            return Err(std::io::Error::other("gate closed"));
        }
        self.inner.connect().await
    }
}

// ------------------------------------------------------------ the records

/// A `u32` record as the MQTT tests route it.
pub type Rec = Record<Cs, Latest<u32>, 1>;

/// `v` for the rest of the test.
pub fn leak<T>(v: T) -> &'static mut T {
    Box::leak(Box::new(v))
}

/// A connector's records and tables: `out` published on `dev/state`,
/// `cmd/level` delivered into `inn`.
pub fn routed() -> (
    &'static Rec,
    &'static Rec,
    Dispatch<'static, 2, 2>,
    Routes<'static, &'static Readiness<1>, 1, 1>,
) {
    let out: &'static Rec = leak(Record::new("out"));
    let inn: &'static Rec = leak(Record::new("in"));
    let mut b = Dispatch::<2, 2>::builder();
    b.link("cmd/level", leak(inbound::Link::new(inn, Postcard)));
    let inbound = b.build().unwrap();
    let state = leak(outbound::Link::new(
        out.subscribe().unwrap(),
        "dev/state",
        Postcard,
    ));
    let ready = leak(Readiness::new());
    let mut b =
        Routes::<_, 1, 1>::builder(&*ready, leak([0u8; 16])).written_topics(leak([0u8; 16]));
    b.link(state);
    (out, inn, inbound, b.build().unwrap())
}
