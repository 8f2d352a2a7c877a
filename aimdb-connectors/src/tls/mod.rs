//! TLS 1.3 under any [`Connect`], with no heap (feature `embedded-tls`):
//! [`TlsConnect`], the device side of TLS to an MQTT broker.
//!
//! A layer, not a connector: `TlsConnect` wraps the transport's own
//! `Connect` (embassy-net's `embassy_net::TcpConnect`,
//! a UART pair, a tokio socket in a test) and opens a TLS session over each
//! connection it makes. The engines and the runner never know about it.
//! [embedded-tls](https://crates.io/crates/embedded-tls) does the protocol
//! (TLS 1.3, `TLS_AES_128_GCM_SHA256`, P-256 key exchange); this module adds
//! what a device needs around it:
//!
//! - **The broker is checked.** Its certificate chain must end at the CA
//!   certificate the firmware holds (ECDSA P-256 signatures), name the
//!   server name you give (a `dNSName` in the subject alternative names, or
//!   the common name), and be valid now if the device knows the time
//!   ([`WallClock`]). A server that skips its Certificate or
//!   CertificateVerify message is refused
//!   ([`ConnectError::NoServerCertificate`]): embedded-tls alone would let
//!   such a handshake through. A chain longer than
//!   [`TlsConnect::max_chain`] (one by default: the broker's certificate
//!   signed by the CA itself) is refused ([`ConnectError::ChainTooLong`]):
//!   embedded-tls checks signatures along a chain but not that each signer
//!   is a CA, so an intermediate would let any certificate the CA issued (a
//!   device's own) sign a broker certificate. Give the firmware the CA that
//!   signs broker certificates, not the one that signs devices'.
//! - **A client certificate** ([`Identity`], ECDSA P-256) for brokers that
//!   identify devices by certificate.
//! - **Cancel-safe halves.** The runner drops a pending read or write and
//!   calls again; embedded-tls would lose a half-read record header or
//!   write a record twice. So the session's socket side goes through two
//!   staging buffers: a record reaches embedded-tls only once it has
//!   arrived whole, and an encrypted record leaves from the staging buffer
//!   at the socket's pace.
//!
//! # Buffers and what they cost
//!
//! Two slices, both yours: `rx` and `tx`, each split in two equal halves
//! (embedded-tls's record buffer and the staging buffer). The receiving
//! half must hold the largest record the broker sends: 16,640 B per half
//! without the max-fragment-length extension (33,280 B in all). With
//! [`TlsConnect::max_fragment_length`] the broker promises smaller records:
//! `Bits12` (4,096 B of payload) needs 4,096 + 256 + 5 B per half, so 8,722
//! B for `rx`; smaller fragments fail on brokers that split a handshake
//! message across records (embedded-tls does not join them). mosquitto
//! (OpenSSL) honours the extension. The sending half holds what embedded-
//! tls encrypts in one record: 128 B of overhead plus the payload, so a
//! `tx` of 2 × 1,280 B sends records of up to 1,152 B (larger writes are
//! split) and also fits a client certificate of about 900 B in the
//! handshake.
//!
//! # Threads
//!
//! The two halves share the session through a `RefCell`, one poll at a
//! time, as an embassy executor runs them: a connector over `TlsConnect`
//! is not `Send` (pinned in `tests/auto_traits.rs`). On a tokio host use
//! `mqtt::TlsConnect` (feature `tls`: rustls, `Send`), or run
//! this one with `tokio_io::run_on_thread`.
//!
//! # Entropy and time
//!
//! The key exchange needs a cryptographic random number generator: pass
//! yours (`rand_core` 0.6 `RngCore + CryptoRng`, e.g. a ChaCha20 generator
//! seeded from the chip's RNG). Validity periods are checked only when the
//! clock type knows the time: [`WallClock`] returns none until the firmware
//! sets it (from SNTP, the broker, a build-time floor), and embedded-tls's
//! `NoClock` never does. A device that cannot know the date accepts an
//! expired broker certificate; keep broker certificates short-lived and
//! rotate the CA if that matters.
//!
//! # Example
//!
//! ```no_run
//! # async fn f(tcp: aimdb_connectors::loopback::Pair<embassy_sync::blocking_mutex::raw::NoopRawMutex, 64>) {
//! use aimdb_connectors::tls::{Counters, Identity, TlsConnect, WallClock};
//! use aimdb_connectors::tls::MaxFragmentLength;
//! # struct Rng;
//! # impl rand_core::RngCore for Rng {
//! #     fn next_u32(&mut self) -> u32 { 4 }
//! #     fn next_u64(&mut self) -> u64 { 4 }
//! #     fn fill_bytes(&mut self, d: &mut [u8]) { d.fill(4) }
//! #     fn try_fill_bytes(&mut self, d: &mut [u8]) -> Result<(), rand_core::Error> { d.fill(4); Ok(()) }
//! # }
//! # impl rand_core::CryptoRng for Rng {}
//! static TLS: Counters = Counters::new();
//! const CA: &[u8] = &[]; // include_bytes!("broker-ca.der")
//! const CERT: &[u8] = &[]; // include_bytes!("device.der")
//! const KEY: &[u8] = &[]; // include_bytes!("device.key.der")
//!
//! let (mut rx, mut tx) = ([0u8; 8722], [0u8; 2560]);
//! let tcp = tcp.a(); // embassy_net::TcpConnect::new(...) on a device
//! let connect = TlsConnect::new(tcp, "broker.example", CA, Rng, &mut rx, &mut tx)
//!     .max_fragment_length(MaxFragmentLength::Bits12)
//!     .identity(Identity::from_der(CERT, KEY).unwrap())
//!     .clock::<WallClock>()
//!     .counters(&TLS);
//! // `connect` goes to `mqtt::Mqtt::new` like any other `Connect`.
//! # let _ = connect;
//! # }
//! ```
#![forbid(unsafe_code)]

mod session;
mod verify;

use core::cell::RefCell;
use core::fmt;
use core::marker::PhantomData;
use core::pin::pin;

use embedded_tls::pki::CertVerifier;
use embedded_tls::{Certificate, TlsConfig, TlsConnection, TlsContext};
use p256::ecdsa::SigningKey;
use rand_core::CryptoRngCore;

pub use embedded_tls::{MaxFragmentLength, NoClock, TlsClock, TlsError};

use crate::connect::{Connect, ConnectFailure, Connection};
pub use session::{Error, Rx, Session, Tx};
use session::{Staged, Wire};
use verify::{Guard, Provider};

/// The one cipher suite offered: every TLS 1.3 server has it.
type Suite = embedded_tls::Aes128GcmSha256;

aimdb_core::counter_set! {
    /// What the TLS layer saw, readable from any task while it runs.
    pub struct Counters;
    /// A copy of [`Counters`] at one moment.
    pub struct Stats {
        /// Handshakes that completed with the broker's certificate checked.
        handshakes,
        /// Handshakes refused for the broker's certificate: not signed by
        /// the CA, another name, expired or not yet valid, unparsable.
        certificate_refused,
        /// Handshakes where the server skipped its Certificate or
        /// CertificateVerify message.
        no_server_certificate,
        /// Handshakes refused for a chain longer than allowed.
        chain_too_long,
        /// Handshakes that failed otherwise (alert, protocol, I/O, closed).
        handshake_failed,
        /// Sessions ended after the handshake by the broker's records: one
        /// that failed to decrypt or parse, an alert, one larger than the
        /// receive buffers (an orderly close and transport errors are not
        /// counted here).
        session_errors,
    }
}

/// A client certificate and its ECDSA P-256 key, presented when the broker
/// asks for one.
#[derive(Clone)]
pub struct Identity<'a> {
    cert: &'a [u8],
    key: SigningKey,
}

impl<'a> Identity<'a> {
    /// The certificate in DER and its private key in DER, PKCS#8
    /// (`openssl pkey -outform der`) or SEC1 (`openssl ec -outform der`).
    /// A key whose public half the certificate does not hold is refused
    /// here, not at the broker.
    pub fn from_der(cert_der: &'a [u8], key_der: &[u8]) -> Result<Self, IdentityError> {
        use p256::pkcs8::DecodePrivateKey;
        let secret = p256::SecretKey::from_pkcs8_der(key_der)
            .or_else(|_| p256::SecretKey::from_sec1_der(key_der))
            .map_err(|_| IdentityError::Key)?;
        let key = SigningKey::from(&secret);
        let point = key.verifying_key().to_encoded_point(false);
        if !cert_der.windows(point.len()).any(|w| w == point.as_bytes()) {
            return Err(IdentityError::NotTheCertificatesKey);
        }
        Ok(Self {
            cert: cert_der,
            key,
        })
    }
}

impl fmt::Debug for Identity<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("cert_len", &self.cert.len())
            .finish_non_exhaustive()
    }
}

/// Why an [`Identity`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum IdentityError {
    /// The key is not a P-256 private key in PKCS#8 or SEC1 DER.
    Key,
    /// The certificate does not hold the key's public half.
    NotTheCertificatesKey,
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Key => "client key is not a P-256 private key in PKCS#8 or SEC1 DER",
            Self::NotTheCertificatesKey => "client certificate does not hold the key's public half",
        })
    }
}
impl core::error::Error for IdentityError {}

/// Opens the inner transport, then a TLS 1.3 session over it with the
/// broker's certificate checked; see the [module docs](self).
///
/// `K` is the clock validity periods are checked with, `CHAIN` the bytes
/// kept of the broker's certificate chain while it is checked (the
/// certificates as sent, 2,048 by default).
pub struct TlsConnect<'d, C, R, K = NoClock, const CHAIN: usize = 2048> {
    inner: C,
    rng: R,
    server_name: &'d str,
    ca: &'d [u8],
    identity: Option<Identity<'d>>,
    max_fragment_length: Option<MaxFragmentLength>,
    max_chain: usize,
    record_rx: &'d mut [u8],
    record_tx: &'d mut [u8],
    wire: RefCell<Wire<'d>>,
    counters: Option<&'d Counters>,
    _clock: PhantomData<K>,
}

impl<'d, C: Connect, R: CryptoRngCore> TlsConnect<'d, C, R> {
    /// TLS over `inner` to a broker whose certificate the CA certificate
    /// `ca_der` (DER) signed and that is valid for `server_name` (also
    /// sent as SNI). `rx` and `tx` are split in halves; see the module docs
    /// for their sizes.
    pub fn new(
        inner: C,
        server_name: &'d str,
        ca_der: &'d [u8],
        rng: R,
        rx: &'d mut [u8],
        tx: &'d mut [u8],
    ) -> Self {
        let (record_rx, wire_rx) = rx.split_at_mut(rx.len() / 2);
        let (record_tx, wire_tx) = tx.split_at_mut(tx.len() / 2);
        Self {
            inner,
            rng,
            server_name,
            ca: ca_der,
            identity: None,
            max_fragment_length: None,
            max_chain: 1,
            record_rx,
            record_tx,
            wire: RefCell::new(Wire::new(wire_rx, wire_tx)),
            counters: None,
            _clock: PhantomData,
        }
    }
}

impl<'d, C: Connect, R: CryptoRngCore, K: TlsClock, const CHAIN: usize>
    TlsConnect<'d, C, R, K, CHAIN>
{
    /// Presents `identity` when the broker asks for a client certificate.
    pub fn identity(mut self, identity: Identity<'d>) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Asks the broker for records of at most this payload (RFC 6066); see
    /// the module docs.
    pub fn max_fragment_length(mut self, length: MaxFragmentLength) -> Self {
        self.max_fragment_length = Some(length);
        self
    }

    /// Accepts chains of up to `certificates` (the broker's own included;
    /// 1 by default). Above 1, the CA must sign nothing but brokers and
    /// their intermediates; see the module docs.
    pub fn max_chain(mut self, certificates: usize) -> Self {
        self.max_chain = certificates.max(1);
        self
    }

    /// Counts handshakes and their failures in `counters`.
    pub fn counters(mut self, counters: &'d Counters) -> Self {
        self.counters = Some(counters);
        self
    }

    /// Checks validity periods against `K2` (e.g. [`WallClock`]).
    pub fn clock<K2: TlsClock>(self) -> TlsConnect<'d, C, R, K2, CHAIN> {
        TlsConnect {
            inner: self.inner,
            rng: self.rng,
            server_name: self.server_name,
            ca: self.ca,
            identity: self.identity,
            max_fragment_length: self.max_fragment_length,
            max_chain: self.max_chain,
            record_rx: self.record_rx,
            record_tx: self.record_tx,
            wire: self.wire,
            counters: self.counters,
            _clock: PhantomData,
        }
    }

    /// The transport under the TLS layer.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C, R, K, const CHAIN: usize> fmt::Debug for TlsConnect<'_, C, R, K, CHAIN> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnect")
            .field("server_name", &self.server_name)
            .field("identity", &self.identity.is_some())
            .field("max_chain", &self.max_chain)
            .finish_non_exhaustive()
    }
}

/// # Cancel safety
///
/// A dropped `connect` (the connector's connect timeout) drops the
/// half-done handshake with the inner connection; the next call starts
/// over.
impl<'d, C, R, K, const CHAIN: usize> Connect for TlsConnect<'d, C, R, K, CHAIN>
where
    C: Connect,
    R: CryptoRngCore,
    K: TlsClock,
{
    type Connection<'c>
        = Session<'c, 'd, C::Connection<'c>>
    where
        Self: 'c;
    type Error = ConnectError<C::Error>;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let mut conn = self
            .inner
            .connect()
            .await
            .map_err(ConnectError::Transport)?;
        let wire = &self.wire;
        let mut tls: TlsConnection<'_, Staged<'_, 'd>, Suite> = TlsConnection::new(
            Staged::new(wire),
            &mut *self.record_rx,
            &mut *self.record_tx,
        );
        let mut config = TlsConfig::new().with_server_name(self.server_name);
        if let Some(mfl) = self.max_fragment_length {
            config = config.with_max_fragment_length(mfl);
        }
        let mut provider = Provider {
            rng: &mut self.rng,
            verifier: Guard::new(
                CertVerifier::<Suite, K, CHAIN>::new(Certificate::X509(self.ca)),
                self.ca,
                self.max_chain,
            ),
            identity: self.identity.as_ref(),
        };
        wire.borrow_mut().clear();
        let opened = {
            let (mut rx, mut tx) = conn.split();
            let open = pin!(tls.open(TlsContext::new(&config, &mut provider)));
            session::handshake(open, wire, &mut rx, &mut tx).await
        };
        let result = match opened {
            Ok(()) => provider.verifier.outcome(),
            Err(e) => Err(provider.verifier.refusal().unwrap_or(e)),
        };
        if let Some(c) = self.counters {
            count(c, &result);
        }
        result?;
        Ok(Session::new(conn, tls, wire, self.counters))
    }

    fn failure(error: &Self::Error) -> ConnectFailure {
        match error {
            ConnectError::Transport(e) => C::failure(e),
            _ => ConnectFailure::Tls,
        }
    }
}

fn count<E>(c: &Counters, result: &Result<(), ConnectError<E>>) {
    let field = match result {
        Ok(()) => &c.handshakes,
        Err(ConnectError::Transport(_)) => return,
        Err(ConnectError::Handshake(e)) if verify::refused_certificate(e) => &c.certificate_refused,
        Err(ConnectError::NoServerCertificate) => &c.no_server_certificate,
        Err(ConnectError::ChainTooLong) => &c.chain_too_long,
        Err(_) => &c.handshake_failed,
    };
    aimdb_core::counters::bump(field, 1);
}

/// Why one [`TlsConnect::connect`](Connect::connect) failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError<E> {
    /// The inner transport did not connect.
    Transport(E),
    /// The handshake failed: embedded-tls's reason. A broker certificate
    /// not signed by the CA, for another name, expired or not yet valid is
    /// `InvalidCertificate`; a broker that refused ours sends an alert
    /// (`HandshakeAborted`).
    Handshake(TlsError),
    /// The transport failed during the handshake.
    Io(embedded_io_async::ErrorKind),
    /// The server closed the connection during the handshake.
    Closed,
    /// The server finished the handshake without proving it holds a
    /// certificate the CA signed (no Certificate or CertificateVerify).
    NoServerCertificate,
    /// The server's chain has more certificates than
    /// [`TlsConnect::max_chain`].
    ChainTooLong,
}

impl<E: fmt::Debug> fmt::Display for ConnectError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "transport under TLS did not connect: {e:?}"),
            Self::Handshake(e) => write!(f, "TLS handshake failed: {e:?}"),
            Self::Io(k) => write!(f, "transport failed during the TLS handshake: {k:?}"),
            Self::Closed => f.write_str("server closed the connection during the TLS handshake"),
            Self::NoServerCertificate => {
                f.write_str("server did not prove a certificate (no Certificate/CertificateVerify)")
            }
            Self::ChainTooLong => f.write_str("server certificate chain longer than allowed"),
        }
    }
}
impl<E: fmt::Debug> core::error::Error for ConnectError<E> {}

/// A wall clock for validity periods: none until the firmware sets it.
///
/// Set it once the device knows the date (SNTP, the broker, an RTC) with
/// [`WallClock::set`]; until then certificates are checked for everything
/// but their validity period. Seconds since 1970 in 32 bits (until 2106).
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

static UNIX_SECONDS: portable_atomic::AtomicU32 = portable_atomic::AtomicU32::new(0);

impl WallClock {
    /// The time now, in seconds since 1970-01-01 UTC; 0 forgets it.
    pub fn set(unix_seconds: u32) {
        UNIX_SECONDS.store(unix_seconds, portable_atomic::Ordering::Relaxed);
    }

    /// The time last set, if any.
    pub fn get() -> Option<u32> {
        match UNIX_SECONDS.load(portable_atomic::Ordering::Relaxed) {
            0 => None,
            s => Some(s),
        }
    }
}

impl TlsClock for WallClock {
    fn now() -> Option<u64> {
        Self::get().map(u64::from)
    }
}
