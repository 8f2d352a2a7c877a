//! What the commands ask a node beyond one answer: whole listings,
//! descriptions kept past their answer, values decoded with a schema.

use aimdb_core::record::Kind;
use aimdb_core::remote::proto::{Body, Codec, Host, Info};
use aimdb_core::remote::Op;
use postcard_schema::schema::owned::OwnedNamedType;
use serde_json::Value;

use crate::transport::Client;
use crate::Fail;

/// A record's description, kept beyond its answer.
pub struct RecordInfo {
    pub name: String,
    pub kind: Kind,
    pub capacity: u16,
    pub writable: bool,
    pub codec: Codec,
    pub topics: Vec<String>,
    pub schema_hash: [u8; 8],
    pub schema: OwnedNamedType,
}

impl From<Info<'_, Host>> for RecordInfo {
    fn from(i: Info<'_, Host>) -> Self {
        Self {
            name: i.name.into(),
            kind: i.kind,
            capacity: i.capacity,
            writable: i.writable,
            codec: i.codec,
            topics: i.topics.iter().map(|t| t.to_string()).collect(),
            schema_hash: i.schema_hash,
            schema: i.schema,
        }
    }
}

impl RecordInfo {
    /// The value decoded with the record's schema.
    pub fn decode(&self, bytes: &[u8]) -> Result<Value, Fail> {
        postcard_dyn::from_slice_dyn(&self.schema, bytes).map_err(|e| {
            Fail::Schema(format!(
                "value does not decode with the schema of `{}` ({}): {e:?}",
                self.name, self.schema.name
            ))
        })
    }

    /// The schema as Rust-like text: the type, then the named types it
    /// uses.
    pub fn schema_text(&self) -> String {
        let mut s = self.schema.to_pseudocode();
        let mut used: Vec<_> = self
            .schema
            .all_used_types()
            .into_iter()
            .filter(|t| t != &self.schema)
            .map(|t| t.to_pseudocode())
            .filter(|t| t.contains('{') || t.contains('('))
            .collect();
        used.sort();
        for u in used {
            s.push('\n');
            s.push_str(&u);
        }
        s
    }
}

pub fn unexpected(body: &Body<'_, Host>) -> Fail {
    Fail::Other(format!("unexpected answer: {body:?}"))
}

/// Every described record's name, from every page of the listing.
pub async fn list_all(c: &mut Client) -> Result<Vec<String>, Fail> {
    let mut all = Vec::new();
    loop {
        let from = u16::try_from(all.len()).unwrap_or(u16::MAX);
        let reply = c.call(Op::List { from }).await?;
        match reply.body()? {
            Body::List {
                total,
                from,
                entries,
            } => {
                let next = usize::from(from) + entries.len();
                let done = entries.is_empty() || next >= usize::from(total);
                all.truncate(usize::from(from));
                all.extend(entries.iter().map(|e| e.name.to_string()));
                if done {
                    return Ok(all);
                }
            }
            b => return Err(unexpected(&b)),
        }
    }
}

/// One record's description.
pub async fn info(c: &mut Client, record: &str) -> Result<RecordInfo, Fail> {
    let reply = c.call(Op::Describe { record }).await?;
    match reply.body()? {
        Body::Describe(i) => Ok(i.into()),
        b => Err(unexpected(&b)),
    }
}
