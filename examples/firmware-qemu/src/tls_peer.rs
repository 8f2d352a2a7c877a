//! The other end of a TLS 1.3 connection, as small as b3's TLS row needs:
//! one handshake with the device's TLS layer (P-256 key exchange,
//! `TLS_AES_128_GCM_SHA256`, an ECDSA P-256 certificate for `localhost`
//! that build.rs makes for each build, self-signed, so it is also the
//! CA the device checks it against), then application records sealed and
//! opened with the traffic keys (RFC 8446 §7).
//!
//! Test firmware only: it checks nothing of the client's (not its
//! Finished, not its extensions) and sends no alerts.

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::Aes128Gcm;
use hmac::{Hmac, Mac};
use p256::ecdh::EphemeralSecret;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{DerSignature, SigningKey};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::pkcs8::DecodePrivateKey;
use p256::PublicKey;
use rand_core::{CryptoRng, RngCore};
use sha2::{Digest, Sha256};

/// The certificate (DER), and the CA the device is given.
pub const CERT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tls-peer-cert.der"));
/// Its key (PKCS#8 DER).
const KEY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tls-peer-key.der"));

const HANDSHAKE: u8 = 0x16;
const APPLICATION_DATA: u8 = 0x17;
const CHANGE_CIPHER_SPEC: u8 = 0x14;

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let Ok(mut m) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
        return [0; 32];
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// HKDF-Expand-Label with one hash of output at most (RFC 8446 §7.1).
fn expand_label(secret: &[u8], label: &[u8], context: &[u8], out: &mut [u8]) {
    let mut info = [0u8; 2 + 1 + 6 + 16 + 1 + 32];
    let [hi, lo] = (out.len() as u16).to_be_bytes();
    info[..3].copy_from_slice(&[hi, lo, 6 + label.len() as u8]);
    info[3..9].copy_from_slice(b"tls13 ");
    info[9..9 + label.len()].copy_from_slice(label);
    let mut n = 9 + label.len();
    info[n] = context.len() as u8;
    n += 1;
    info[n..n + context.len()].copy_from_slice(context);
    n += context.len();
    let block = hmac(secret, &[&info[..n], &[1]]);
    out.copy_from_slice(&block[..out.len()]);
}

fn derive(secret: &[u8], label: &[u8], transcript: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    expand_label(secret, label, transcript, &mut out);
    out
}

/// One direction's traffic keys and record sequence number.
struct Keys {
    aead: Aes128Gcm,
    iv: [u8; 12],
    seq: u64,
}

impl Keys {
    fn new(secret: &[u8; 32]) -> Self {
        let (mut key, mut iv) = ([0u8; 16], [0u8; 12]);
        expand_label(secret, b"key", b"", &mut key);
        expand_label(secret, b"iv", b"", &mut iv);
        Self {
            aead: Aes128Gcm::new(&key.into()),
            iv,
            seq: 0,
        }
    }

    fn nonce(&mut self) -> [u8; 12] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        self.seq += 1;
        n
    }

    /// `content` of type `ty` as one record in `out`: its length.
    fn seal(&mut self, content: &[u8], ty: u8, out: &mut [u8]) -> usize {
        let len = content.len() + 1 + 16;
        let [hi, lo] = (len as u16).to_be_bytes();
        out[..5].copy_from_slice(&[APPLICATION_DATA, 3, 3, hi, lo]);
        out[5..5 + content.len()].copy_from_slice(content);
        out[5 + content.len()] = ty;
        let nonce = self.nonce();
        let (head, body) = out.split_at_mut(5);
        let (plain, tag) = body[..len].split_at_mut(content.len() + 1);
        let Ok(t) = self
            .aead
            .encrypt_in_place_detached(&nonce.into(), head, plain)
        else {
            return 0;
        };
        tag.copy_from_slice(&t);
        5 + len
    }

    /// The content of the record `record` (header included), opened in
    /// place, without its padding and type byte.
    fn open<'r>(&mut self, record: &'r mut [u8]) -> Option<&'r [u8]> {
        let (head, body) = record.split_at_mut(5);
        let split = body.len().checked_sub(16)?;
        let (cipher, tag) = body.split_at_mut(split);
        let nonce = self.nonce();
        self.aead
            .decrypt_in_place_detached(&nonce.into(), head, cipher, (&*tag).into())
            .ok()?;
        let end = cipher.iter().rposition(|&b| b != 0)?;
        Some(&cipher[..end])
    }
}

/// Where the handshake is.
enum State {
    /// Waiting for the ClientHello.
    Hello,
    /// The flight is out; the client's Finished comes next (skipped).
    Finished,
    /// Application data both ways.
    Open,
}

/// The server's side of one connection.
pub struct Peer {
    state: State,
    client: Option<Keys>,
    server: Option<Keys>,
}

impl Default for Peer {
    fn default() -> Self {
        Self::new()
    }
}

impl Peer {
    pub const fn new() -> Self {
        Self {
            state: State::Hello,
            client: None,
            server: None,
        }
    }

    /// Whether application data flows.
    pub fn open(&self) -> bool {
        matches!(self.state, State::Open)
    }

    /// Takes one whole record from the client. During the handshake the
    /// answer goes to `out` (its length returned); once open, the
    /// record's content is opened into `record` and its length returned
    /// as `Err` (nothing to send).
    pub fn take(
        &mut self,
        record: &mut [u8],
        rng: &mut (impl RngCore + CryptoRng),
        out: &mut [u8],
    ) -> Result<usize, usize> {
        match (&self.state, record.first().copied()) {
            (_, Some(CHANGE_CIPHER_SPEC)) => Ok(0),
            (State::Hello, Some(HANDSHAKE)) => Ok(self.hello(&record[5..], rng, out)),
            (State::Finished, Some(APPLICATION_DATA)) => {
                self.state = State::Open;
                Ok(0)
            }
            (State::Open, Some(APPLICATION_DATA)) => {
                let content = self.client.as_mut().and_then(|k| k.open(record));
                Err(content.map_or(0, <[u8]>::len))
            }
            _ => Ok(0),
        }
    }

    /// `data` as one application-data record in `out`: its length.
    pub fn seal(&mut self, data: &[u8], out: &mut [u8]) -> usize {
        self.server
            .as_mut()
            .map_or(0, |k| k.seal(data, APPLICATION_DATA, out))
    }

    /// ServerHello, then EncryptedExtensions, Certificate,
    /// CertificateVerify and Finished in one record.
    fn hello(&mut self, ch: &[u8], rng: &mut (impl RngCore + CryptoRng), out: &mut [u8]) -> usize {
        let Some((sid, client_share)) = key_share(ch) else {
            return 0;
        };
        let Ok(client_key) = PublicKey::from_sec1_bytes(client_share) else {
            return 0;
        };
        let secret = EphemeralSecret::random(rng);
        let shared = secret.diffie_hellman(&client_key);
        let point = secret.public_key().to_encoded_point(false);
        let share = point.as_bytes();

        // ServerHello.
        let mut sh = [0u8; 160];
        let mut n = 4;
        sh[n..n + 2].copy_from_slice(&[3, 3]);
        n += 2;
        rng.fill_bytes(&mut sh[n..n + 32]);
        n += 32;
        sh[n] = sid.len() as u8;
        sh[n + 1..n + 1 + sid.len()].copy_from_slice(sid);
        n += 1 + sid.len();
        sh[n..n + 3].copy_from_slice(&[0x13, 0x01, 0]);
        n += 3;
        let ext_len = 6 + 8 + share.len();
        sh[n..n + 2].copy_from_slice(&(ext_len as u16).to_be_bytes());
        n += 2;
        sh[n..n + 6].copy_from_slice(&[0, 0x2b, 0, 2, 3, 4]);
        n += 6;
        let [h, l] = (4 + share.len() as u16).to_be_bytes();
        let [sh_, sl] = (share.len() as u16).to_be_bytes();
        sh[n..n + 8].copy_from_slice(&[0, 0x33, h, l, 0, 0x17, sh_, sl]);
        n += 8;
        sh[n..n + share.len()].copy_from_slice(share);
        n += share.len();
        let body = (n - 4) as u32;
        sh[..4].copy_from_slice(&[2, (body >> 16) as u8, (body >> 8) as u8, body as u8]);
        let sh = &sh[..n];
        let [rh, rl] = (sh.len() as u16).to_be_bytes();
        out[..5].copy_from_slice(&[HANDSHAKE, 3, 3, rh, rl]);
        out[5..5 + sh.len()].copy_from_slice(sh);
        let mut at = 5 + sh.len();

        let mut transcript = Sha256::new();
        transcript.update(ch);
        transcript.update(sh);
        let early = hmac(&[0; 32], &[&[0; 32]]);
        let empty: [u8; 32] = Sha256::digest([]).into();
        let hs = hmac(
            &derive(&early, b"derived", &empty),
            &[shared.raw_secret_bytes()],
        );
        let hash: [u8; 32] = transcript.clone().finalize().into();
        let s_hs = derive(&hs, b"s hs traffic", &hash);

        // EncryptedExtensions, Certificate, CertificateVerify, Finished.
        let mut flight = [0u8; 1024];
        let mut f = 0;
        let mut push = |bytes: &[u8], transcript: &mut Sha256| {
            flight[f..f + bytes.len()].copy_from_slice(bytes);
            transcript.update(bytes);
            f += bytes.len();
        };
        push(&[8, 0, 0, 2, 0, 0], &mut transcript);
        let list = CERT.len() + 3 + 2;
        let body = 1 + 3 + list;
        push(&handshake_header(11, body), &mut transcript);
        push(&[0], &mut transcript);
        push(&u24(list), &mut transcript);
        push(&u24(CERT.len()), &mut transcript);
        push(CERT, &mut transcript);
        push(&[0, 0], &mut transcript);
        let hash: [u8; 32] = transcript.clone().finalize().into();
        let Ok(key) = SigningKey::from_pkcs8_der(KEY) else {
            return 0;
        };
        let mut signed = [0x20u8; 64 + 34 + 32];
        signed[64..98].copy_from_slice(b"TLS 1.3, server CertificateVerify\0");
        signed[98..].copy_from_slice(&hash);
        let signature: DerSignature = key.sign(&signed);
        let sig = signature.as_bytes();
        push(&handshake_header(15, 4 + sig.len()), &mut transcript);
        push(&[4, 3], &mut transcript);
        push(&(sig.len() as u16).to_be_bytes(), &mut transcript);
        push(sig, &mut transcript);
        let hash: [u8; 32] = transcript.clone().finalize().into();
        let mut finished_key = [0u8; 32];
        expand_label(&s_hs, b"finished", b"", &mut finished_key);
        let verify = hmac(&finished_key, &[&hash]);
        push(&handshake_header(20, 32), &mut transcript);
        push(&verify, &mut transcript);
        at += Keys::new(&s_hs).seal(&flight[..f], HANDSHAKE, &mut out[at..]);

        // The application traffic keys: the transcript through the
        // server's Finished.
        let hash: [u8; 32] = transcript.finalize().into();
        let master = hmac(&derive(&hs, b"derived", &empty), &[&[0; 32]]);
        self.client = Some(Keys::new(&derive(&master, b"c ap traffic", &hash)));
        self.server = Some(Keys::new(&derive(&master, b"s ap traffic", &hash)));
        self.state = State::Finished;
        at
    }
}

fn u24(n: usize) -> [u8; 3] {
    [(n >> 16) as u8, (n >> 8) as u8, n as u8]
}

fn handshake_header(ty: u8, len: usize) -> [u8; 4] {
    let [a, b, c] = u24(len);
    [ty, a, b, c]
}

/// The legacy session id and the P-256 key share of a ClientHello
/// (handshake message, header included).
fn key_share(ch: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut p = 4 + 2 + 32;
    let sid_len = *ch.get(p)? as usize;
    let sid = ch.get(p + 1..p + 1 + sid_len)?;
    p += 1 + sid_len;
    p += 2 + usize::from(u16::from_be_bytes([*ch.get(p)?, *ch.get(p + 1)?]));
    p += 1 + *ch.get(p)? as usize;
    let end = p + 2 + usize::from(u16::from_be_bytes([*ch.get(p)?, *ch.get(p + 1)?]));
    p += 2;
    while p + 4 <= end {
        let kind = u16::from_be_bytes([ch[p], ch[p + 1]]);
        let len = usize::from(u16::from_be_bytes([ch[p + 2], ch[p + 3]]));
        let body = ch.get(p + 4..p + 4 + len)?;
        if kind == 0x33 {
            let mut q = 2;
            while q + 4 <= body.len() {
                let group = u16::from_be_bytes([body[q], body[q + 1]]);
                let kl = usize::from(u16::from_be_bytes([body[q + 2], body[q + 3]]));
                if group == 0x17 {
                    return Some((sid, body.get(q + 4..q + 4 + kl)?));
                }
                q += 4 + kl;
            }
        }
        p += 4 + len;
    }
    None
}
