//! The retained manifest: what a node has, as one JSON message a plain
//! MQTT client can read.

use core::task::{Context, Poll};

use super::{Connector, Description};
use crate::codec::{Encode, EncodeError};
use crate::presence::Cursor;
use crate::record::{Kind, RecvError, Source};

/// The manifest's source: one value at start and again after each
/// reconnect (it is a `Latest` source, so the route is retained). Link it
/// with [`ManifestJson`] on the node's manifest topic; see
/// [`Responder::manifest`](super::Responder::manifest).
#[derive(Debug)]
pub struct Manifests {
    manifest: Manifest,
    due: bool,
}

impl Manifests {
    pub(crate) const fn new(
        table: &'static [Description],
        connectors: &'static [Connector],
    ) -> Self {
        Self {
            manifest: Manifest { table, connectors },
            due: true,
        }
    }
}

/// The table and the connectors as a manifest value (encoded by
/// [`ManifestJson`]).
#[derive(Debug, Clone, Copy)]
pub struct Manifest {
    pub(crate) table: &'static [Description],
    pub(crate) connectors: &'static [Connector],
}

impl Source for Manifests {
    type Item = Manifest;

    fn name(&self) -> &'static str {
        "aimdb/manifest"
    }

    /// Ready once per link; never woken otherwise (the table is `static`).
    fn poll_recv(&mut self, _cx: &mut Context<'_>) -> Poll<Result<Manifest, RecvError>> {
        if core::mem::take(&mut self.due) {
            Poll::Ready(Ok(self.manifest))
        } else {
            Poll::Pending
        }
    }

    fn replay(&mut self) {
        self.due = true;
    }

    fn kind(&self) -> Kind {
        Kind::Latest
    }
}

/// Writes a [`Manifest`] as JSON, without `core::fmt`:
///
/// ```json
/// {"records":[{"name":"readings","kind":"ring","type":"Reading",
///   "topics":["dev/readings"],"schema_hash":"5f0e…"},
///  {"name":"cmd","kind":"mailbox","type":"Command","topics":["dev/cmd"],
///   "schema_hash":"…","writable":true}],
///  "backlogs":["mqtt"]}
/// ```
///
/// `backlogs` names the connectors with a durable backlog (those given
/// one with [`Connector::backlog`]; empty when none has one): their
/// values survive an outage and a reboot, and `stats` reports how far
/// behind they are. A reader that finds no `backlogs` key reads a node
/// that does not say.
///
/// About 110 bytes per record: size the routes' payload buffer for it
/// (a manifest that does not fit is an encode error, counted on the
/// route, and nothing is sent).
#[derive(Debug, Clone, Copy, Default)]
pub struct ManifestJson;

impl Encode<Manifest> for ManifestJson {
    fn encode(&self, value: &Manifest, buf: &mut [u8]) -> Result<usize, EncodeError> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut w = Cursor { buf, len: 0 };
        w.put(br#"{"records":["#)?;
        for (i, d) in value.table.iter().enumerate() {
            if i > 0 {
                w.put(b",")?;
            }
            w.put(br#"{"name":"#)?;
            w.put_str(d.name)?;
            w.put(br#","kind":""#)?;
            w.put(match d.kind {
                Kind::Latest => b"latest".as_slice(),
                Kind::Ring => b"ring",
                Kind::Mailbox => b"mailbox",
            })?;
            w.put(br#"","type":"#)?;
            w.put_str(d.schema.name)?;
            w.put(br#","topics":["#)?;
            for (j, t) in d.topics.iter().enumerate() {
                if j > 0 {
                    w.put(b",")?;
                }
                w.put_str(t)?;
            }
            w.put(br#"],"schema_hash":""#)?;
            for b in d.schema_hash {
                w.put(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])?;
            }
            w.put(b"\"")?;
            if d.writable {
                w.put(br#","writable":true"#)?;
            }
            w.put(b"}")?;
        }
        w.put(br#"],"backlogs":["#)?;
        let mut first = true;
        for c in value.connectors.iter().filter(|c| c.backlog.is_some()) {
            if !core::mem::take(&mut first) {
                w.put(b",")?;
            }
            w.put_str(c.name)?;
        }
        w.put(b"]}")?;
        Ok(w.len)
    }
}
