//! The broker's certificate, checked: embedded-tls's `rustpki` verifier
//! inside a guard that makes the handshake prove it ran, and the crypto
//! provider that hands embedded-tls the generator, the verifier and the
//! client identity.

use embedded_tls::{
    Certificate, CertificateEntryRef, CertificateRef, CertificateVerifyRef, CryptoProvider,
    SignatureScheme, TlsCipherSuite, TlsError, TlsVerifier,
};
use p256::ecdsa::{DerSignature, SigningKey};
use rand_core::CryptoRngCore;

use super::{ConnectError, Identity, Suite};

/// Wraps a verifier; remembers whether the server's Certificate and
/// CertificateVerify were both checked, and refuses a chain longer than
/// allowed. A chain that ends with the CA's own certificate (OpenSSL
/// servers such as mosquitto send it) is checked without it: the CA is the
/// trust anchor the device holds, not a link of the chain.
///
/// embedded-tls accepts a handshake in which the server sends neither
/// message (the verifier is then never called), so "the verifier said no
/// error" is not "the server proved who it is": [`Guard::outcome`] is.
pub(crate) struct Guard<'a, V> {
    inner: V,
    ca: &'a [u8],
    max_chain: usize,
    certificate: bool,
    signature: bool,
    too_long: bool,
}

impl<'a, V> Guard<'a, V> {
    pub(crate) fn new(inner: V, ca: &'a [u8], max_chain: usize) -> Self {
        Self {
            inner,
            ca,
            max_chain,
            certificate: false,
            signature: false,
            too_long: false,
        }
    }

    /// After a completed handshake: `Ok` only if both messages were
    /// checked.
    pub(crate) fn outcome<E>(&self) -> Result<(), ConnectError<E>> {
        if self.certificate && self.signature {
            Ok(())
        } else {
            Err(ConnectError::NoServerCertificate)
        }
    }

    /// After a failed handshake: the reason the guard itself refused.
    pub(crate) fn refusal<E>(&self) -> Option<ConnectError<E>> {
        self.too_long.then_some(ConnectError::ChainTooLong)
    }
}

impl<V: TlsVerifier<Suite>> TlsVerifier<Suite> for Guard<'_, V> {
    fn set_hostname_verification(&mut self, hostname: &str) -> Result<(), TlsError> {
        self.inner.set_hostname_verification(hostname)
    }

    fn verify_certificate(
        &mut self,
        transcript: &<Suite as TlsCipherSuite>::Hash,
        mut cert: CertificateRef,
    ) -> Result<(), TlsError> {
        let anchor =
            matches!(cert.entries.last(), Some(CertificateEntryRef::X509(der)) if *der == self.ca);
        if anchor && cert.entries.len() > 1 {
            cert.entries.pop();
        }
        let entries = cert.entries.len();
        self.inner.verify_certificate(transcript, cert)?;
        // A chain that verifies but is longer than allowed: its
        // intermediates were never checked to be CAs.
        if entries > self.max_chain {
            self.too_long = true;
            return Err(TlsError::InvalidCertificate);
        }
        self.certificate = true;
        Ok(())
    }

    fn verify_signature(&mut self, verify: CertificateVerifyRef) -> Result<(), TlsError> {
        if !self.certificate {
            return Err(TlsError::InvalidHandshake);
        }
        self.inner.verify_signature(verify)?;
        self.signature = true;
        Ok(())
    }
}

/// A handshake error that means "the broker's certificate was refused".
pub(crate) fn refused_certificate(e: &TlsError) -> bool {
    matches!(
        e,
        TlsError::InvalidCertificate
            | TlsError::InvalidCertificateEntry
            | TlsError::InvalidSignature
            | TlsError::InvalidSignatureScheme
    )
}

/// What embedded-tls asks for during one handshake.
pub(crate) struct Provider<'p, R, V> {
    pub(crate) rng: &'p mut R,
    pub(crate) verifier: Guard<'p, V>,
    pub(crate) identity: Option<&'p Identity<'p>>,
}

impl<R: CryptoRngCore, V: TlsVerifier<Suite>> CryptoProvider for Provider<'_, R, V> {
    type CipherSuite = Suite;
    type Signature = DerSignature;

    fn rng(&mut self) -> impl CryptoRngCore {
        &mut *self.rng
    }

    fn verifier(&mut self) -> Result<&mut impl TlsVerifier<Suite>, TlsError> {
        Ok(&mut self.verifier)
    }

    fn signer(
        &mut self,
    ) -> Result<(impl signature::SignerMut<DerSignature>, SignatureScheme), TlsError> {
        let identity = self.identity.ok_or(TlsError::InvalidPrivateKey)?;
        let key: SigningKey = identity.key.clone();
        Ok((key, SignatureScheme::EcdsaSecp256r1Sha256))
    }

    fn client_cert(&mut self) -> Option<Certificate<impl AsRef<[u8]>>> {
        self.identity.map(|i| Certificate::X509(i.cert))
    }
}
