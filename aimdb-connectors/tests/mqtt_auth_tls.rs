//! The MQTT connector against mosquitto with password authentication and
//! TLS.
//!
//! Each test starts its own broker (see `mosquitto/mod.rs`): anonymous
//! access off, a password file made by `mosquitto_passwd`, and for the TLS
//! tests a listener with a CA and a server certificate generated here at
//! run time (rcgen; valid for `localhost` and 127.0.0.1). `mosquitto_sub` /
//! `mosquitto_pub` play the other clients, with the same credentials and CA.
//!
//! The refusals are checked twice: the connector's own view (attempts
//! counted, [`Stopped::ConnectFailed`] under [`Reconnect::Attempts`], never
//! connected, nothing published or received) and, for TLS, the rustls error
//! of a direct [`Connect::connect`]. Each refusal test also shows the same
//! set-up with the right secret working, so the failure is the secret's.

mod mosquitto;

use std::path::PathBuf;
use std::time::Duration;

use aimdb_connectors::mqtt::rustls::{self, CertificateError};
use aimdb_connectors::mqtt::{
    Cause, Config, Connect, ConnectFailure, Counters, TlsConnect, TlsConnectError, TlsSetupError,
};
use aimdb_connectors::reconnect::{Backoff, Reconnect, Stopped};
use mosquitto::{
    addr, alongside, ca, client_cert, connector, free_port, password_file, publish, routed,
    server_cert, tcp, try_publish, until, within, Broker, ClientArgs, Sub, TempDir,
};

const USER: &str = "aimdb";
const PASSWORD: &str = "correct horse";

// --------------------------------------------------------------- utilities

fn config<'a>(client_id: &'a str, password: &'a str) -> Config<'a> {
    let mut c = Config::new(client_id);
    c.credentials = Some((USER, password.as_bytes()));
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    c.keep_alive = Some(Duration::from_secs(5));
    c
}

/// A password-protected broker; `tls` adds the listener's certificate
/// settings.
fn secured_broker(dir: &TempDir, tls: &str) -> Broker {
    let passwd = password_file(dir, USER, PASSWORD);
    Broker::start(
        dir,
        free_port(),
        &format!(
            "log_type all\nallow_anonymous false\npassword_file {}\n{tls}",
            passwd.display()
        ),
    )
}

/// The connector with one outbound route (`out` → `dev/state`) and one
/// inbound route (`cmd/level` → `in`), see `mosquitto::routed`, over `connect`; checks both
/// directions against `mosquitto_sub` / `mosquitto_pub` using `clients`.
async fn round_trip<C: Connect>(broker: &Broker, clients: &ClientArgs, connect: C) {
    let mut sub = Sub::start_with(broker, clients, "watcher", "dev/state").await;
    let (out, inn, mut inbound, mut routes) = routed();
    let mut level = inn.subscribe().unwrap();

    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let c = config("aimdb-auth", PASSWORD);
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);

    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to connect", || counters.is_connected()).await;
        out.write(300);
        assert_eq!(sub.next().await, "dev/state ac02");
        publish(clients, "cmd/level", &[0x2a]).await;
        assert_eq!(within("cmd/level", level.recv()).await, Ok(42));
    })
    .await;
    let s = counters.snapshot();
    assert_eq!((s.sent, s.received, s.rejected), (1, 1, 0), "{s:?}");
    assert_eq!((s.connect_failures, s.reconnects), (0, 0), "{s:?}");
}

/// Runs a connector that must never get in: `Reconnect::Attempts(3)`, so
/// `run` returns `ConnectFailed(3)`. A value written to its outbound record
/// must not reach `sub`, and a message published to its inbound topic must
/// not reach its record.
async fn refused<C: Connect>(
    sub: &mut Sub,
    clients: &ClientArgs,
    connect: C,
    password: &str,
) -> Option<Cause> {
    let (out, inn, mut inbound, mut routes) = routed();

    // Pending before the first attempt: would go out on a connection.
    out.write(7);
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let mut c = config("aimdb-refused", password);
    c.reconnect = Reconnect::Attempts(3);
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);
    let stopped = within("run to give up", async {
        tokio::join!(mqtt.run(&mut inbound, &mut routes), async {
            // While it is trying: inbound traffic for it goes nowhere.
            publish(clients, "cmd/level", &[0x09]).await;
        })
        .0
    })
    .await;
    eprintln!("refused connector: run returned {stopped:?} ({stopped}); {counters:?}");
    assert_eq!(stopped, Stopped::ConnectFailed(3));
    let s = counters.snapshot();
    assert_eq!(s.connect_failures, 3, "{s:?}");
    assert!(!s.connected, "{s:?}");
    assert_eq!((s.sent, s.received, s.reconnects), (0, 0, 0), "{s:?}");
    assert_eq!(inn.writes(), 0, "nothing reached the inbound record");
    // The first thing the watcher sees is a marker published after the
    // connector gave up: nothing of the connector's came before it.
    publish(clients, "dev/state", b"end").await;
    assert_eq!(sub.next().await, "dev/state 656e64");
    counters.last_error()
}

/// A CA and a server certificate it signed, valid for `localhost` and
/// 127.0.0.1, written as PEM to `dir`.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki(dir: &TempDir) -> Pki {
    let ca = ca("aimdb test CA");
    let (cert, key) = server_cert(&ca);
    Pki {
        ca: dir.write("ca.pem", ca.pem()),
        cert: dir.write("server.pem", cert),
        key: dir.write("server.key", key),
    }
}

/// A password-protected TLS broker with a fresh [`pki`] in `dir`, and
/// clients with the right credentials and CA.
fn tls_broker(dir: &TempDir) -> (Pki, Broker, ClientArgs) {
    let pki = pki(dir);
    let tls = format!(
        "cafile {}\ncertfile {}\nkeyfile {}\n",
        pki.ca.display(),
        pki.cert.display(),
        pki.key.display()
    );
    let broker = secured_broker(dir, &tls);
    let clients = ClientArgs::new(&broker)
        .user(USER, PASSWORD)
        .cafile(&pki.ca);
    (pki, broker, clients)
}

// ------------------------------------------------------------------- tests

#[tokio::test]
async fn password_auth_right_credentials_round_trip_both_ways() {
    let dir = TempDir::new("mqtt-passwd-ok");
    let broker = secured_broker(&dir, "");
    let clients = ClientArgs::new(&broker).user(USER, PASSWORD);
    // Control: the broker does refuse anonymous clients.
    assert!(
        !try_publish(&ClientArgs::new(&broker), "cmd/level", &[1]).await,
        "an anonymous mosquitto_pub got in:\n{}",
        broker.log()
    );
    let connect = tcp(broker.port);
    round_trip(&broker, &clients, connect).await;
    let log = broker.log();
    assert!(
        log.lines()
            .any(|l| l.contains("as aimdb-auth (") && l.contains(&format!("u'{USER}'"))),
        "the connector logged in as {USER}:\n{log}"
    );
}

#[tokio::test]
async fn password_auth_wrong_password_is_refused_and_nothing_flows() {
    let dir = TempDir::new("mqtt-passwd-bad");
    let broker = secured_broker(&dir, "");
    let clients = ClientArgs::new(&broker).user(USER, PASSWORD);
    let mut sub = Sub::start_with(&broker, &clients, "watcher", "dev/state").await;
    let connect = tcp(broker.port);
    let why = refused(&mut sub, &clients, connect, "wrong horse").await;
    // 0x86 bad user name or password (0x87 not authorized from some
    // brokers): readable while it runs, kept after it stops.
    assert!(
        matches!(why, Some(Cause::Refused(0x86 | 0x87))),
        "last error {why:?}"
    );
    // mosquitto 2.0 names no client id on a refused login; the watcher
    // and mosquitto_pub log in fine, so every refusal is the connector's.
    let log = broker.log();
    let refusals: Vec<_> = log
        .lines()
        .filter(|l| l.contains("not authorised") || l.contains("CONNACK to 127.0.0.1 (0, 135)"))
        .collect();
    eprintln!("broker on the refusals:\n{}", refusals.join("\n"));
    assert_eq!(
        refusals
            .iter()
            .filter(|l| l.contains("not authorised"))
            .count(),
        3,
        "three refused logins:\n{log}"
    );
}

#[tokio::test]
async fn tls_with_credentials_round_trips_both_ways() {
    let dir = TempDir::new("mqtt-tls-ok");
    let (pki, broker, clients) = tls_broker(&dir);
    let ca_pem = std::fs::read(&pki.ca).unwrap();

    // The certificate names 127.0.0.1 too: an IP server name is checked
    // against it (one handshake, no MQTT).
    let mut by_ip = TlsConnect::with_ca_pem(addr(broker.port), "127.0.0.1", &ca_pem).unwrap();
    if let Err(e) = within("TLS handshake", by_ip.connect()).await {
        panic!("TLS to 127.0.0.1 failed: {e}\n{}", broker.log());
    }

    let connect = TlsConnect::with_ca_pem(addr(broker.port), "localhost", &ca_pem).unwrap();
    round_trip(&broker, &clients, connect).await;
}

#[tokio::test]
async fn tls_untrusted_ca_or_wrong_name_fails_to_connect_and_is_counted() {
    let dir = TempDir::new("mqtt-tls-bad");
    let (pki, broker, clients) = tls_broker(&dir);
    let right_ca = std::fs::read(&pki.ca).unwrap();
    let other_ca = ca("some other CA").pem();

    // Control: the right CA and name complete the handshake.
    let mut good = TlsConnect::with_ca_pem(addr(broker.port), "localhost", &right_ca).unwrap();
    if let Err(e) = within("TLS handshake", good.connect()).await {
        panic!("TLS with the right CA failed: {e}\n{}", broker.log());
    }

    let mut untrusted =
        TlsConnect::with_ca_pem(addr(broker.port), "localhost", other_ca.as_bytes()).unwrap();
    let e = within("TLS handshake", untrusted.connect())
        .await
        .err()
        .expect("a broker certificate from another CA was accepted");
    eprintln!("untrusted CA: {e}");
    assert!(matches!(e, TlsConnectError::Handshake(_)), "{e:?}");
    assert_eq!(
        e.tls(),
        Some(&rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer
        )),
        "{e:?}"
    );

    let mut misnamed =
        TlsConnect::with_ca_pem(addr(broker.port), "broker.invalid", &right_ca).unwrap();
    let e = within("TLS handshake", misnamed.connect())
        .await
        .err()
        .expect("a certificate for another name was accepted");
    eprintln!("wrong server name: {e}");
    assert!(
        matches!(
            e.tls(),
            Some(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForNameContext { .. } | CertificateError::NotValidForName
            ))
        ),
        "{e:?}"
    );

    // The connector with the other CA (and the right password): attempts
    // fail in the handshake, are counted, and it gives up without a panic.
    let mut sub = Sub::start_with(&broker, &clients, "watcher", "dev/state").await;
    let why = refused(&mut sub, &clients, untrusted, PASSWORD).await;
    assert_eq!(why, Some(Cause::Connect(ConnectFailure::Tls)));
    // No MQTT session was ever opened by it.
    assert!(!broker.log().contains("aimdb-refused"), "{}", broker.log());
}

#[test]
fn a_client_certificate_without_its_own_key_is_refused_at_setup() {
    let ca = ca("aimdb test CA");
    let ca_pem = ca.pem();
    let (cert, key) = client_cert(&ca, "dev7");
    let (_, other_key) = client_cert(&ca, "dev8");
    let build = |cert: &str, key: &str| {
        TlsConnect::with_client_pem(
            "127.0.0.1:1",
            "localhost",
            ca_pem.as_bytes(),
            cert.as_bytes(),
            key.as_bytes(),
        )
        .map(|_| ())
    };
    assert_eq!(build(&cert, &key), Ok(()));
    assert_eq!(build(&cert, &other_key), Err(TlsSetupError::ClientKey));
    assert_eq!(build(&cert, ""), Err(TlsSetupError::ClientKey));
    assert_eq!(build("", &key), Err(TlsSetupError::ClientCertificate));
}
