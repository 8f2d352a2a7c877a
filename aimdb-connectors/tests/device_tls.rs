//! The device TLS layer (`tls::TlsConnect`, embedded-tls, no heap) against
//! mosquitto's TLS 1.3 listener on loopback, under the MQTT connector: the
//! right CA round-trips and survives a broker restart; a broker
//! certificate from another CA, for another name, or expired, fails the
//! handshake with a typed error and a counter while the connector retries
//! and gives up under its policy; a server that skips its certificate is
//! refused; a client certificate reaches the broker's ACL.
//!
//! Certificates are made by the test (rcgen, ECDSA P-256); nothing is
//! committed.

mod mosquitto;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aimdb_connectors::mqtt::{Cause, Config, ConnectFailure, Counters};
use aimdb_connectors::reconnect::{Backoff, Reconnect, Stopped};
use aimdb_connectors::tls::{
    self, ConnectError, Identity, IdentityError, MaxFragmentLength, TlsConnect, TlsError, WallClock,
};
use aimdb_connectors::tokio_io::TcpConnect;
use aimdb_connectors::Connect;
use embedded_io_adapters::tokio_1::FromTokio;
use mosquitto::{
    alongside, ca, client_cert, connector, free_port, leak, publish, routed, server_cert, tcp,
    until, within, Broker, ClientArgs, Sub, TempDir,
};
use rand_core::OsRng;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

type Issuer = rcgen::CertifiedIssuer<'static, rcgen::KeyPair>;

/// PEM to DER (the first block), as firmware would `include_bytes!` it.
fn der(pem: &str) -> &'static [u8] {
    let block = pem::parse(pem).unwrap();
    leak(block.into_contents())
}

fn config(client_id: &str) -> Config<'_> {
    let mut c = Config::new(client_id);
    c.backoff = Backoff {
        min: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    c.keep_alive = Some(Duration::from_secs(5));
    c
}

/// A broker's TLS material: the CA, its certificate and key files.
struct Pki {
    ca: Issuer,
    dir: TempDir,
}

impl Pki {
    fn new(tag: &str) -> Self {
        Self {
            ca: ca("aimdb broker CA"),
            dir: TempDir::new(tag),
        }
    }

    /// A TLS 1.3-only listener with `cert`/`key` as the broker's; `extra`
    /// settings appended.
    fn broker(&self, port: u16, (cert, key): &(String, String), extra: &str) -> Broker {
        let ca = self.dir.write("ca.pem", self.ca.pem());
        let cert = self.dir.write("server.pem", cert);
        let key = self.dir.write("server.key", key);
        Broker::start(
            &self.dir,
            port,
            &format!(
                "log_type all\nallow_anonymous true\ncafile {}\ncertfile {}\nkeyfile {}\n\
                 tls_version tlsv1.3\n{extra}",
                ca.display(),
                cert.display(),
                key.display()
            ),
        )
    }

    fn clients(&self, broker: &Broker) -> ClientArgs {
        ClientArgs::new(broker).cafile(&self.dir.write("ca.pem", self.ca.pem()))
    }
}

/// A broker certificate for `localhost` whose validity ended in 2021.
fn expired_server_cert(ca: &Issuer) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// TLS over loopback TCP to `port`: buffers for 4 KiB fragments.
fn device_tls(
    port: u16,
    server_name: &'static str,
    ca_der: &'static [u8],
) -> TlsConnect<'static, TcpConnect, OsRng> {
    let rx = leak([0u8; 2 * (4096 + 256 + 5)]);
    let tx = leak([0u8; 2 * 1280]);
    TlsConnect::new(tcp(port), server_name, ca_der, OsRng, rx, tx)
        .max_fragment_length(MaxFragmentLength::Bits12)
}

/// One handshake, its error if it failed.
async fn handshake<C: Connect>(connect: &mut C) -> Result<(), C::Error> {
    within("a TLS handshake", connect.connect()).await.map(drop)
}

#[tokio::test]
async fn the_right_ca_round_trips_and_survives_a_broker_restart() {
    let pki = Pki::new("device-tls-ok");
    let port = free_port();
    let cert = server_cert(&pki.ca);
    let broker = pki.broker(port, &cert, "persistence false\n");
    let clients = pki.clients(&broker);
    let mut sub = Sub::start_with(&broker, &clients, "watcher", "dev/state").await;
    static TLS: tls::Counters = tls::Counters::new();
    let connect = device_tls(port, "localhost", der(&pki.ca.pem())).counters(&TLS);

    let (out, inn, mut inbound, mut routes) = routed();
    let mut level = inn.subscribe().unwrap();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let mut mqtt = connector(
        config("aimdb-tls-device"),
        &mut rx,
        &mut tx,
        connect,
        &counters,
    );
    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to connect", || counters.is_connected()).await;
        out.write(300);
        assert_eq!(sub.next().await, "dev/state ac02");
        publish(&clients, "cmd/level", &[0x2a]).await;
        assert_eq!(within("cmd/level", level.recv()).await, Ok(42));
        assert_eq!(TLS.snapshot().handshakes, 1);

        // The broker goes away and a new one comes up on the same port.
        drop(sub);
        broker.terminate();
        let broker = pki.broker(port, &cert, "persistence false\n");
        let mut sub = Sub::start_with(&broker, &clients, "watcher-2", "dev/state").await;
        until("a second TLS handshake", || TLS.snapshot().handshakes >= 2).await;
        until("the connector to reconnect", || counters.is_connected()).await;
        out.write(301);
        let mut seen = sub.next().await;
        if seen == "dev/state ac02" {
            // The replay of the state reached the watcher first.
            seen = sub.next().await;
        }
        assert_eq!(seen, "dev/state ad02");
        publish(&clients, "cmd/level", &[0x2b]).await;
        assert_eq!(within("cmd/level", level.recv()).await, Ok(43));
    })
    .await;
    let s = counters.snapshot();
    assert!(s.reconnects >= 1, "{s:?}");
    let t = TLS.snapshot();
    assert_eq!(
        (
            t.certificate_refused,
            t.no_server_certificate,
            t.chain_too_long
        ),
        (0, 0, 0),
        "{t:?}"
    );
}

/// Runs the MQTT connector over `connect` as `client_id` until it is
/// connected.
async fn comes_up<C: Connect>(connect: C, client_id: &str) {
    let (_, _, mut inbound, mut routes) = routed();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let mut mqtt = connector(config(client_id), &mut rx, &mut tx, connect, &counters);
    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to connect", || counters.is_connected()).await;
    })
    .await;
}

/// A connector over `connect` that must never get in: it tries three
/// times (`Reconnect::Attempts(3)`), each attempt failing in the
/// handshake, and gives up; nothing it holds reaches the broker.
async fn refused<C: Connect>(connect: C, sub: &mut Sub, clients: &ClientArgs) {
    let (out, inn, mut inbound, mut routes) = routed();
    out.write(7);
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let mut c = config("aimdb-tls-refused");
    c.reconnect = Reconnect::Attempts(3);
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);
    let stopped = within("run to give up", mqtt.run(&mut inbound, &mut routes)).await;
    assert_eq!(stopped, Stopped::ConnectFailed(3));
    let s = counters.snapshot();
    assert_eq!((s.connect_failures, s.sent, s.received), (3, 0, 0), "{s:?}");
    assert_eq!(
        counters.last_error(),
        Some(Cause::Connect(ConnectFailure::Tls))
    );
    assert_eq!(inn.writes(), 0);
    publish(clients, "dev/state", b"end").await;
    assert_eq!(
        sub.next().await,
        "dev/state 656e64",
        "nothing of the device's came first"
    );
}

#[tokio::test]
async fn another_ca_or_another_name_fails_the_handshake_and_is_counted() {
    let pki = Pki::new("device-tls-bad");
    let port = free_port();
    let broker = pki.broker(port, &server_cert(&pki.ca), "");
    let clients = pki.clients(&broker);
    let right = der(&pki.ca.pem());
    let other = der(&ca("some other CA").pem());

    // Control: the right CA and name get in.
    handshake(&mut device_tls(port, "localhost", right))
        .await
        .unwrap_or_else(|e| panic!("the right CA failed: {e}\n{}", broker.log()));

    static OTHER_CA: tls::Counters = tls::Counters::new();
    let mut untrusted = device_tls(port, "localhost", other).counters(&OTHER_CA);
    let e = handshake(&mut untrusted)
        .await
        .expect_err("another CA's certificate accepted");
    assert!(
        matches!(e, ConnectError::Handshake(TlsError::InvalidCertificate)),
        "{e:?}"
    );
    assert_eq!(OTHER_CA.snapshot().certificate_refused, 1);

    static OTHER_NAME: tls::Counters = tls::Counters::new();
    let mut misnamed = device_tls(port, "broker.invalid", right).counters(&OTHER_NAME);
    let e = handshake(&mut misnamed)
        .await
        .expect_err("a certificate for another name accepted");
    assert!(
        matches!(e, ConnectError::Handshake(TlsError::InvalidCertificate)),
        "{e:?}"
    );
    assert_eq!(OTHER_NAME.snapshot().certificate_refused, 1);
    assert_eq!(OTHER_NAME.snapshot().handshakes, 0);

    // Under the connector: three failed attempts, counted, then it stops.
    let mut sub = Sub::start_with(&broker, &clients, "watcher", "dev/state").await;
    refused(untrusted, &mut sub, &clients).await;
    assert_eq!(OTHER_CA.snapshot().certificate_refused, 4);
    refused(misnamed, &mut sub, &clients).await;
    assert_eq!(OTHER_NAME.snapshot().certificate_refused, 4);
}

#[tokio::test]
async fn an_expired_certificate_fails_once_the_device_knows_the_date() {
    let pki = Pki::new("device-tls-expired");
    let port = free_port();
    let broker = pki.broker(port, &expired_server_cert(&pki.ca), "");
    let right = der(&pki.ca.pem());

    // Without a clock the validity period cannot be checked: the
    // handshake succeeds (the documented limit of a device without one).
    handshake(&mut device_tls(port, "localhost", right))
        .await
        .unwrap_or_else(|e| panic!("expired certificate, no clock: {e}\n{}", broker.log()));

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    WallClock::set(u32::try_from(now).unwrap());
    static EXPIRED: tls::Counters = tls::Counters::new();
    let mut dated = device_tls(port, "localhost", right)
        .clock::<WallClock>()
        .counters(&EXPIRED);
    let e = handshake(&mut dated)
        .await
        .expect_err("an expired certificate accepted");
    assert!(
        matches!(e, ConnectError::Handshake(TlsError::InvalidCertificate)),
        "{e:?}"
    );
    assert_eq!(EXPIRED.snapshot().certificate_refused, 1);

    // And a certificate valid now passes with the same clock.
    drop(broker);
    let broker = pki.broker(port, &server_cert(&pki.ca), "");
    let mut good = device_tls(port, "localhost", right).clock::<WallClock>();
    handshake(&mut good)
        .await
        .unwrap_or_else(|e| panic!("a valid certificate with the clock: {e}\n{}", broker.log()));
}

#[tokio::test]
async fn a_device_certificate_reaches_the_broker_acl() {
    let pki = Pki::new("device-tls-acl");
    let port = free_port();
    let devices = ca("aimdb device CA");
    let acl = pki.dir.write("acl", "pattern readwrite fleet/%u/#\n");
    let cafile = pki.dir.write(
        "clients-ca.pem",
        format!("{}{}", pki.ca.pem(), devices.pem()),
    );
    let (cert, key) = server_cert(&pki.ca);
    let broker = Broker::start(
        &pki.dir,
        port,
        &format!(
            "log_type all\nallow_anonymous false\nacl_file {}\ncafile {}\ncertfile {}\nkeyfile {}\n\
             tls_version tlsv1.3\nrequire_certificate true\nuse_identity_as_username true\n",
            acl.display(),
            cafile.display(),
            pki.dir.write("server.pem", cert).display(),
            pki.dir.write("server.key", key).display(),
        ),
    );
    let (dev_cert, dev_key) = client_cert(&devices, "dev7");
    let identity = Identity::from_der(der(&dev_cert), der(&dev_key)).unwrap();

    // Without a certificate the broker ends the session at once (in TLS
    // 1.3 it checks the client's certificate after the client finished):
    // the connector never comes up, and gives up under its policy.
    let right = der(&pki.ca.pem());
    let (_, _, mut inbound, mut routes) = routed();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let mut c = config("aimdb-tls-anonymous");
    c.reconnect = Reconnect::Attempts(2);
    let anonymous = device_tls(port, "localhost", right);
    let mut mqtt = connector(c, &mut rx, &mut tx, anonymous, &counters);
    let stopped = within("run to give up", mqtt.run(&mut inbound, &mut routes)).await;
    assert_eq!(stopped, Stopped::ConnectFailed(2), "{counters:?}");
    assert_eq!(counters.snapshot().reconnects, 0);

    // With it, the MQTT session opens under the certificate's name.
    let connect = device_tls(port, "localhost", right).identity(identity);
    comes_up(connect, "aimdb-tls-dev7").await;
    within("the broker to log the identity", broker.wait_log("u'dev7'")).await;

    // A host service reads alike: the same DER files through rustls.
    let host = aimdb_connectors::mqtt::TlsConnect::with_der(
        mosquitto::addr(port),
        "localhost",
        right,
        Some((der(&dev_cert), der(&dev_key))),
    )
    .unwrap();
    comes_up(host, "aimdb-tls-host7").await;
    assert!(
        broker
            .log()
            .lines()
            .any(|l| l.contains("as aimdb-tls-host7") && l.contains("u'dev7'")),
        "{}",
        broker.log()
    );

    // Someone else's key with dev7's certificate is refused at setup.
    let (_, other_key) = client_cert(&devices, "dev8");
    assert_eq!(
        Identity::from_der(der(&dev_cert), der(&other_key)).err(),
        Some(IdentityError::NotTheCertificatesKey)
    );
    assert_eq!(
        aimdb_connectors::mqtt::TlsConnect::with_der(
            mosquitto::addr(port),
            "localhost",
            right,
            Some((der(&dev_cert), der(&other_key))),
        )
        .err(),
        Some(aimdb_connectors::mqtt::TlsSetupError::ClientKey)
    );
}

#[tokio::test]
async fn a_broker_certificate_signed_by_a_device_certificate_is_refused() {
    // One CA signed a device's certificate (not a CA); the device's key
    // signs a certificate for `localhost`, and a broker serves that with
    // the device certificate as its "intermediate".
    let pki = Pki::new("device-tls-forged");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "dev9");
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let device = Issuer::signed_by(params, rcgen::KeyPair::generate().unwrap(), &pki.ca).unwrap();
    let (forged, forged_key) = server_cert(&device);
    let port = free_port();
    let broker = pki.broker(port, &(forged + &device.pem(), forged_key), "");
    let right = der(&pki.ca.pem());

    static FORGED: tls::Counters = tls::Counters::new();
    let mut connect = device_tls(port, "localhost", right).counters(&FORGED);
    let e = handshake(&mut connect)
        .await
        .expect_err("a broker certificate signed by a device was trusted");
    assert!(matches!(e, ConnectError::ChainTooLong), "{e:?}");
    assert_eq!(FORGED.snapshot().chain_too_long, 1);

    // With intermediates allowed, embedded-tls alone accepts it: the
    // signatures check out and nobody asks whether dev9 may sign.
    let mut lax = device_tls(port, "localhost", right).max_chain(2);
    handshake(&mut lax)
        .await
        .unwrap_or_else(|e| panic!("the forged chain with max_chain(2): {e}\n{}", broker.log()));
}

/// Plain TCP that counts the bytes written to it.
struct Counted {
    inner: TcpConnect,
    written: Arc<AtomicUsize>,
}

struct CountedTx<W> {
    tx: W,
    written: Arc<AtomicUsize>,
}

impl<W: embedded_io_async::ErrorType> embedded_io_async::ErrorType for CountedTx<W> {
    type Error = W::Error;
}

impl<W: embedded_io_async::Write> embedded_io_async::Write for CountedTx<W> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, W::Error> {
        let n = self.tx.write(buf).await?;
        self.written.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }
    async fn flush(&mut self) -> Result<(), W::Error> {
        self.tx.flush().await
    }
}

impl Connect for Counted {
    type Connection<'c> = (
        FromTokio<OwnedReadHalf>,
        CountedTx<FromTokio<OwnedWriteHalf>>,
    );
    type Error = std::io::Error;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let (rx, tx) = self.inner.connect().await?;
        let written = self.written.clone();
        Ok((rx, CountedTx { tx, written }))
    }
}

/// Bytes on the wire for `n` readings published one at a time, once the
/// connection is up, over `connect` (which counts into `written`).
async fn wire_bytes<C: Connect>(connect: C, written: &AtomicUsize, sub: &mut Sub, n: u32) -> usize {
    let (out, _, mut inbound, mut routes) = routed();
    let counters = Counters::new();
    let (mut rx, mut tx) = ([0u8; 512], [0u8; 512]);
    let mut c = config("aimdb-tls-bytes");
    c.keep_alive = None;
    let mut mqtt = connector(c, &mut rx, &mut tx, connect, &counters);
    let mut bytes = 0;
    alongside(mqtt.run(&mut inbound, &mut routes), async {
        until("the connector to connect", || counters.is_connected()).await;
        // The first value settles the session (its acknowledgements).
        out.write(1000);
        assert_eq!(sub.next().await, "dev/state e807");
        let before = written.load(Ordering::Relaxed);
        for i in 0..n {
            out.write(2000 + i);
            let want = postcard::to_allocvec(&(2000 + i)).unwrap();
            let hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(sub.next().await, format!("dev/state {hex}"));
        }
        bytes = written.load(Ordering::Relaxed) - before;
    })
    .await;
    bytes
}

#[tokio::test]
async fn tls_adds_one_record_header_and_tag_per_message() {
    let pki = Pki::new("device-tls-bytes");
    let port = free_port();
    let broker = pki.broker(port, &server_cert(&pki.ca), "");
    let clients = pki.clients(&broker);
    let plain_port = free_port();
    let plain = mosquitto::Broker::anonymous(plain_port);
    const N: u32 = 10;

    let mut sub = Sub::start(&plain, "watcher", "dev/state").await;
    let written = Arc::new(AtomicUsize::new(0));
    let tcp_only = Counted {
        inner: tcp(plain_port),
        written: written.clone(),
    };
    let plain_bytes = wire_bytes(tcp_only, &written, &mut sub, N).await;

    let mut sub = Sub::start_with(&broker, &clients, "watcher", "dev/state").await;
    let written = Arc::new(AtomicUsize::new(0));
    let counted = Counted {
        inner: tcp(port),
        written: written.clone(),
    };
    let rx = leak([0u8; 2 * (4096 + 256 + 5)]);
    let tx = leak([0u8; 2 * 1280]);
    let over_tls = TlsConnect::new(counted, "localhost", der(&pki.ca.pem()), OsRng, rx, tx);
    let tls_bytes = wire_bytes(over_tls, &written, &mut sub, N).await;

    // RFC 8446 §5.2: each record adds a 5-byte header, the inner content
    // type byte and AES-128-GCM's 16-byte tag; one message is one record.
    eprintln!("{N} messages: {plain_bytes} B over TCP, {tls_bytes} B over TLS");
    assert_eq!(tls_bytes - plain_bytes, N as usize * (5 + 1 + 16));
}

#[tokio::test]
async fn a_broken_record_after_the_handshake_ends_the_session_and_is_counted() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::AsyncWriteExt;

    // A rustls server (TLS 1.3 only) that completes the handshake, then
    // writes an application-data record no key made (its tag cannot
    // verify) straight on the TCP stream.
    let ca = ca("aimdb broker CA");
    let (cert, key) = server_cert(&ca);
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut session = acceptor.accept(tcp).await.unwrap();
        session.flush().await.unwrap();
        let (mut tcp, _) = session.into_inner();
        tcp.write_all(&[0x17, 3, 3, 0, 32]).await.unwrap();
        tcp.write_all(&[0xa5; 32]).await.unwrap();
        // Open until the client gave up on it.
        tokio::time::sleep(Duration::from_secs(5)).await;
    });

    static BROKEN: tls::Counters = tls::Counters::new();
    let mut connect = device_tls(port, "localhost", der(&ca.pem())).counters(&BROKEN);
    let mut session = within("a TLS handshake", connect.connect())
        .await
        .unwrap_or_else(|e| panic!("handshake with rustls: {e}"));
    let (mut rx, _tx) = aimdb_connectors::connect::Connection::split(&mut session);
    let mut buf = [0u8; 16];
    let e = within(
        "the broken record",
        embedded_io_async::Read::read(&mut rx, &mut buf),
    )
    .await
    .expect_err("a broken record was read as data");
    assert!(matches!(e, tls::Error::Tls(_)), "{e:?}");
    let t = BROKEN.snapshot();
    assert_eq!((t.handshakes, t.session_errors), (1, 1), "{t:?}");
    server.abort();
}

// --------------------------------------------- a server without a certificate

/// A TLS 1.3 "server" that sends ServerHello, EncryptedExtensions and
/// Finished and never a Certificate or CertificateVerify: it proves no
/// identity at all. Only loopback; one connection.
mod certless {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    use aes_gcm::Aes128Gcm;
    use hmac::{Hmac, Mac};
    use p256::ecdh::EphemeralSecret;
    use p256::elliptic_curve::sec1::ToEncodedPoint;
    use p256::PublicKey;
    use rand_core::{OsRng, RngCore};
    use sha2::{Digest, Sha256};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// HKDF-Expand-Label (RFC 8446 §7.1), at most one hash of output.
    fn expand_label(secret: &[u8], label: &[u8], context: &[u8], len: usize) -> Vec<u8> {
        let mut info = (len as u16).to_be_bytes().to_vec();
        info.push(6 + label.len() as u8);
        info.extend_from_slice(b"tls13 ");
        info.extend_from_slice(label);
        info.push(context.len() as u8);
        info.extend_from_slice(context);
        hmac(secret, &[&info, &[1]])[..len].to_vec()
    }

    fn derive(secret: &[u8], label: &[u8], transcript: &[u8]) -> Vec<u8> {
        expand_label(secret, label, &Sha256::digest(transcript), 32)
    }

    /// The P-256 key share in a ClientHello.
    fn key_share(ch: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut p = 4 + 2 + 32;
        let sid = ch[p + 1..p + 1 + ch[p] as usize].to_vec();
        p += 1 + ch[p] as usize;
        p += 2 + u16::from_be_bytes([ch[p], ch[p + 1]]) as usize;
        p += 1 + ch[p] as usize;
        let end = p + 2 + u16::from_be_bytes([ch[p], ch[p + 1]]) as usize;
        p += 2;
        while p < end {
            let kind = u16::from_be_bytes([ch[p], ch[p + 1]]);
            let len = u16::from_be_bytes([ch[p + 2], ch[p + 3]]) as usize;
            let body = &ch[p + 4..p + 4 + len];
            if kind == 0x33 {
                let mut q = 2;
                while q < body.len() {
                    let group = u16::from_be_bytes([body[q], body[q + 1]]);
                    let kl = u16::from_be_bytes([body[q + 2], body[q + 3]]) as usize;
                    if group == 0x17 {
                        return (sid, body[q + 4..q + 4 + kl].to_vec());
                    }
                    q += 4 + kl;
                }
            }
            p += 4 + len;
        }
        panic!("no P-256 key share in the ClientHello");
    }

    /// Serves one handshake on `listener`; returns what the client sent
    /// after it (nothing, if the client refused).
    pub async fn serve(listener: TcpListener) -> usize {
        let (mut c, _) = listener.accept().await.unwrap();
        let mut hdr = [0u8; 5];
        c.read_exact(&mut hdr).await.unwrap();
        let mut ch = vec![0u8; u16::from_be_bytes([hdr[3], hdr[4]]) as usize];
        c.read_exact(&mut ch).await.unwrap();
        let (sid, client_pub) = key_share(&ch);
        let secret = EphemeralSecret::random(&mut OsRng);
        let shared = secret.diffie_hellman(&PublicKey::from_sec1_bytes(&client_pub).unwrap());
        let spub = secret.public_key().to_encoded_point(false);
        let spub = spub.as_bytes();

        let mut exts = vec![0, 0x2b, 0, 2, 3, 4, 0, 0x33];
        exts.extend_from_slice(&(4 + spub.len() as u16).to_be_bytes());
        exts.extend_from_slice(&[0, 0x17]);
        exts.extend_from_slice(&(spub.len() as u16).to_be_bytes());
        exts.extend_from_slice(spub);
        let mut random = [0u8; 32];
        OsRng.fill_bytes(&mut random);
        let mut body = vec![3, 3];
        body.extend_from_slice(&random);
        body.push(sid.len() as u8);
        body.extend_from_slice(&sid);
        body.extend_from_slice(&[0x13, 0x01, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut sh = vec![2];
        sh.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        sh.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 3];
        rec.extend_from_slice(&(sh.len() as u16).to_be_bytes());
        rec.extend_from_slice(&sh);
        c.write_all(&rec).await.unwrap();

        let early = hmac(&[0; 32], &[&[0; 32]]);
        let hs = hmac(
            &derive(&early, b"derived", b""),
            &[shared.raw_secret_bytes()],
        );
        let transcript = [ch.as_slice(), &sh].concat();
        let s_hs = derive(&hs, b"s hs traffic", &transcript);
        let key = expand_label(&s_hs, b"key", b"", 16);
        let iv = expand_label(&s_hs, b"iv", b"", 12);
        let ee = [8u8, 0, 0, 2, 0, 0];
        let fin_key = expand_label(&s_hs, b"finished", b"", 32);
        let verify = hmac(
            &fin_key,
            &[&Sha256::digest([transcript.as_slice(), &ee].concat())],
        );
        let mut inner = ee.to_vec();
        inner.extend_from_slice(&[0x14, 0, 0, 0x20]);
        inner.extend_from_slice(&verify);
        inner.push(0x16);
        let mut aad = vec![0x17, 3, 3];
        aad.extend_from_slice(&(inner.len() as u16 + 16).to_be_bytes());
        let ct = Aes128Gcm::new_from_slice(&key)
            .unwrap()
            .encrypt(
                iv.as_slice().into(),
                Payload {
                    msg: &inner,
                    aad: &aad,
                },
            )
            .unwrap();
        c.write_all(&[aad, ct].concat()).await.unwrap();

        let mut after = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), c.read_to_end(&mut after))
            .await;
        after.len()
    }
}

#[tokio::test]
async fn a_server_that_skips_its_certificate_is_refused() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(certless::serve(listener));
    let ca = der(&ca("aimdb broker CA").pem());
    static CERTLESS: tls::Counters = tls::Counters::new();
    let mut connect = device_tls(port, "localhost", ca).counters(&CERTLESS);
    let e = handshake(&mut connect)
        .await
        .expect_err("a server without a certificate was trusted");
    assert!(matches!(e, ConnectError::NoServerCertificate), "{e:?}");
    assert_eq!(CERTLESS.snapshot().no_server_certificate, 1);
    assert_eq!(CERTLESS.snapshot().handshakes, 0);
    // The server's Finished was accepted by embedded-tls (the client
    // answered with its own) but no application data followed.
    let after = within("the scripted server", server).await.unwrap();
    assert!(
        after <= 64,
        "the client sent {after} bytes: application data?"
    );
}
