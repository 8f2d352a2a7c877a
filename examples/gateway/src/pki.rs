//! Certificates for a run, made in memory (rcgen, ECDSA P-256) and written
//! to a directory of the run: a CA and a broker certificate for
//! `localhost` it signed. Nothing is kept after the run.

use std::path::{Path, PathBuf};

use crate::broker::Tls;

/// What [`make`] wrote.
#[derive(Debug)]
pub struct Pki {
    /// The broker's files.
    pub tls: Tls,
    /// The CA certificate in DER, as a device holds it.
    pub ca_der: PathBuf,
}

/// A CA and a broker certificate for `localhost` in `dir`: `ca.pem`,
/// `ca.der`, `broker.pem`, `broker.key`.
pub fn make(dir: &Path) -> Result<Pki, String> {
    let e = |e: rcgen::Error| format!("making certificates: {e}");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "aimdb e2e CA");
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().map_err(e)?)
        .map_err(e)?;
    let key = rcgen::KeyPair::generate().map_err(e)?;
    let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).map_err(e)?;
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let cert = leaf.signed_by(&key, &ca).map_err(e)?;
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf, String> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    };
    Ok(Pki {
        tls: Tls {
            ca: write("ca.pem", ca.pem().as_bytes())?,
            cert: write("broker.pem", cert.pem().as_bytes())?,
            key: write("broker.key", key.serialize_pem().as_bytes())?,
        },
        ca_der: write("ca.der", ca.der())?,
    })
}
