//! TLS to the broker on hosts (feature `tls`): [`TlsConnect`].
//!
//! A [`Connect`] that opens TCP, runs a rustls client handshake over it
//! (tokio-rustls, `ring` crypto provider) and hands the connector the TLS
//! stream as `embedded-io-async` through
//! [`FromTokio`](embedded_io_adapters::tokio_1::FromTokio). The broker's
//! certificate is checked against the CA certificate(s) you give
//! ([`TlsConnect::with_ca_pem`]) or whatever your own
//! [`rustls::ClientConfig`] trusts ([`TlsConnect::new`]), and against the
//! server name (a DNS name or an IP address the certificate must list).
//! A broker that identifies clients by certificate gets one from
//! [`TlsConnect::with_client_pem`].
//! Username and password are MQTT's, not TLS's: set
//! [`Config::credentials`](super::Config::credentials); TLS keeps them off
//! the wire in clear.
//!
//! A failed handshake (untrusted certificate, wrong name, no common
//! protocol) is a failed connection attempt like a refused TCP connect: the
//! connector counts it in
//! [`Counters::connect_failures`](super::Counters::connect_failures) and
//! retries under its [`Reconnect`](crate::reconnect::Reconnect) policy.
//! [`TlsConnectError::tls`] tells which rustls error it was when you call
//! [`Connect::connect`] yourself.
//!
//! # Firmware
//!
//! Devices use [`tls::TlsConnect`](crate::tls::TlsConnect) (feature
//! `embedded-tls`): the same three settings (the CA, the server name, an
//! optional client certificate) over any [`Connect`], with no heap and
//! TLS 1.3 only, so the broker must offer TLS 1.3.

use std::fmt;
use std::io;
use std::sync::Arc;

use ::tokio::io::{ReadHalf, WriteHalf};
use ::tokio::net::TcpStream;
use embedded_io_adapters::tokio_1::FromTokio;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::connect::{io_failure, Connect, ConnectFailure};
use crate::tokio_io::TcpConnect;

/// Opens TCP to the broker at `addr`, then TLS with a fixed server name.
#[derive(Clone)]
pub struct TlsConnect {
    tcp: TcpConnect,
    tls: TlsConnector,
    server_name: ServerName<'static>,
}

impl TlsConnect {
    /// TLS with your own client configuration (trust store, client
    /// certificate, protocol versions, …). `server_name` is the DNS name or
    /// IP address the broker's certificate must be valid for; it is also
    /// sent as SNI when it is a name.
    pub fn new(
        addr: impl fmt::Display,
        server_name: &str,
        config: Arc<ClientConfig>,
    ) -> Result<Self, TlsSetupError> {
        let server_name = ServerName::try_from(server_name)
            .map_err(|_| TlsSetupError::ServerName)?
            .to_owned();
        Ok(Self {
            tcp: TcpConnect::new(addr),
            tls: TlsConnector::from(config),
            server_name,
        })
    }

    /// TLS trusting exactly the CA certificate(s) in `ca_pem` (every
    /// `CERTIFICATE` block; other blocks are skipped), with rustls's safe
    /// default protocol versions (TLS 1.3 and 1.2) and no client
    /// certificate. See [`tls_client_config`] for the configuration it builds.
    pub fn with_ca_pem(
        addr: impl fmt::Display,
        server_name: &str,
        ca_pem: &[u8],
    ) -> Result<Self, TlsSetupError> {
        Self::new(addr, server_name, Arc::new(tls_client_config(ca_pem)?))
    }

    /// As [`Self::with_ca_pem`], and presenting a client certificate: the
    /// chain in `cert_pem` (the client's certificate first) and its private
    /// key in `key_pem` (PKCS#8, SEC1 or PKCS#1 PEM). A broker that takes
    /// the certificate's identity as the user name
    /// (`use_identity_as_username` in mosquitto) applies its ACL to it.
    /// See [`tls_client_config_with_cert`].
    pub fn with_client_pem(
        addr: impl fmt::Display,
        server_name: &str,
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<Self, TlsSetupError> {
        let config = tls_client_config_with_cert(ca_pem, cert_pem, key_pem)?;
        Self::new(addr, server_name, Arc::new(config))
    }

    /// As [`Self::with_ca_pem`] and [`Self::with_client_pem`], from the DER
    /// files a device holds (the device's `tls::TlsConnect` takes the
    /// same): the CA certificate, and optionally a client certificate
    /// with its key (PKCS#8, SEC1 or PKCS#1 DER).
    pub fn with_der(
        addr: impl fmt::Display,
        server_name: &str,
        ca_der: &[u8],
        client: Option<(&[u8], &[u8])>,
    ) -> Result<Self, TlsSetupError> {
        let builder = trusting_der(ca_der)?;
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let key =
                    PrivateKeyDer::try_from(key.to_vec()).map_err(|_| TlsSetupError::ClientKey)?;
                builder
                    .with_client_auth_cert(std::vec![CertificateDer::from(cert.to_vec())], key)
                    .map_err(|_| TlsSetupError::ClientKey)?
            }
        };
        Self::new(addr, server_name, Arc::new(config))
    }

    /// The name the broker's certificate is checked against.
    pub fn server_name(&self) -> &ServerName<'static> {
        &self.server_name
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        self.tcp.addr()
    }
}

/// A rustls client configuration that trusts exactly the CA certificate(s)
/// in `ca_pem`: `ring` crypto provider, safe default protocol versions, no
/// client certificate. A starting point for [`TlsConnect::new`] when you
/// need to change something.
///
/// The provider is named explicitly rather than taken from rustls's
/// process-wide default, so this works whichever rustls crypto features
/// other crates in the build turn on.
pub fn tls_client_config(ca_pem: &[u8]) -> Result<ClientConfig, TlsSetupError> {
    Ok(trusting(ca_pem)?.with_no_client_auth())
}

/// [`tls_client_config`] presenting the client certificate chain in
/// `cert_pem` (every `CERTIFICATE` block, the client's own first) with the
/// private key in `key_pem` (the first `PRIVATE KEY`, `EC PRIVATE KEY` or
/// `RSA PRIVATE KEY` block). A key that does not belong to the
/// certificate is refused here, not at the broker.
pub fn tls_client_config_with_cert(
    ca_pem: &[u8],
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<ClientConfig, TlsSetupError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<std::vec::Vec<_>, _>>()
        .map_err(|_| TlsSetupError::ClientCertificate)?;
    if chain.is_empty() {
        return Err(TlsSetupError::ClientCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsSetupError::ClientKey)?;
    trusting(ca_pem)?
        .with_client_auth_cert(chain, key)
        .map_err(|_| TlsSetupError::ClientKey)
}

/// A client configuration builder trusting exactly the CA certificate
/// `ca_der`.
fn trusting_der(
    ca_der: &[u8],
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(ca_der.to_vec()))
        .map_err(|_| TlsSetupError::BadCaCertificate)?;
    with_roots(roots)
}

/// A client configuration builder trusting exactly the CAs in `ca_pem`.
fn trusting(
    ca_pem: &[u8],
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|_| TlsSetupError::Pem)?;
        roots
            .add(cert)
            .map_err(|_| TlsSetupError::BadCaCertificate)?;
    }
    if roots.is_empty() {
        return Err(TlsSetupError::NoCaCertificate);
    }
    with_roots(roots)
}

fn with_roots(
    roots: RootCertStore,
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| TlsSetupError::Provider)?
        .with_root_certificates(roots))
}

// By hand: `TlsConnector` has no `Debug`.
impl fmt::Debug for TlsConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnect")
            .field("tcp", &self.tcp)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Connect for TlsConnect {
    type Connection<'c> = (
        FromTokio<ReadHalf<TlsStream<TcpStream>>>,
        FromTokio<WriteHalf<TlsStream<TcpStream>>>,
    );
    type Error = TlsConnectError;

    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        let tcp = TcpStream::connect(self.tcp.addr())
            .await
            .map_err(TlsConnectError::Tcp)?;
        // MQTT packets are small and written whole: no Nagle delay.
        tcp.set_nodelay(true).map_err(TlsConnectError::Tcp)?;
        let stream = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(TlsConnectError::Handshake)?;
        // A TLS session does not split without a lock: tokio's.
        Ok(crate::tokio_io::split(stream))
    }

    fn failure(error: &TlsConnectError) -> ConnectFailure {
        match error {
            TlsConnectError::Tcp(e) => io_failure(e),
            TlsConnectError::Handshake(_) => ConnectFailure::Tls,
        }
    }
}

/// Why a [`TlsConnect`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsSetupError {
    /// The server name is neither a valid DNS name nor an IP address.
    ServerName,
    /// The CA PEM text could not be parsed.
    Pem,
    /// The CA PEM text holds no `CERTIFICATE` block.
    NoCaCertificate,
    /// A CA certificate is not usable as a trust anchor.
    BadCaCertificate,
    /// The crypto provider offers no safe protocol version.
    Provider,
    /// The client certificate PEM holds no parsable `CERTIFICATE` block.
    ClientCertificate,
    /// The client key PEM holds no parsable private key, or the key is not
    /// usable with the client certificate.
    ClientKey,
}

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ServerName => "TLS server name is not a DNS name or IP address",
            Self::Pem => "CA certificate PEM could not be parsed",
            Self::NoCaCertificate => "no CERTIFICATE block in the CA PEM",
            Self::BadCaCertificate => "CA certificate is not a usable trust anchor",
            Self::Provider => "TLS crypto provider has no safe protocol version",
            Self::ClientCertificate => {
                "no parsable CERTIFICATE block in the client certificate PEM"
            }
            Self::ClientKey => "client key PEM unparsable or not the client certificate's key",
        })
    }
}
impl core::error::Error for TlsSetupError {}

/// Why one [`TlsConnect::connect`](Connect::connect) failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsConnectError {
    /// The TCP connection failed.
    Tcp(io::Error),
    /// TCP connected, the TLS handshake failed (see [`Self::tls`]).
    Handshake(io::Error),
}

impl TlsConnectError {
    /// The rustls error behind a failed handshake, e.g.
    /// `InvalidCertificate(UnknownIssuer)` for a broker whose certificate
    /// no trusted CA signed. `None` for TCP errors and for handshakes cut
    /// off by plain I/O errors.
    pub fn tls(&self) -> Option<&rustls::Error> {
        match self {
            Self::Tcp(_) => None,
            Self::Handshake(e) => e.get_ref()?.downcast_ref(),
        }
    }
}

impl fmt::Display for TlsConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(e) => write!(f, "TCP connect to the MQTT broker failed: {e}"),
            Self::Handshake(e) => write!(f, "TLS handshake with the MQTT broker failed: {e}"),
        }
    }
}

impl core::error::Error for TlsConnectError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Tcp(e) | Self::Handshake(e) => Some(e),
        }
    }
}
