//! What a command shows: one view per command, rendered for people (a
//! table or lines: [`View::text`]) or as JSON (`--json`: its `Serialize`).

use aimdb_core::record::Kind;
use serde::{Serialize, Serializer};

use crate::Fail;

/// A command's output.
pub trait View: Serialize {
    /// The view as text for people.
    fn text(&self) -> String;
}

/// `view` as text, or as one line of JSON (object keys sorted).
pub fn render(view: &impl View, json: bool) -> Result<String, Fail> {
    if !json {
        return Ok(view.text());
    }
    let v = serde_json::to_value(view).map_err(|e| Fail::Other(format!("JSON output: {e}")))?;
    Ok(format!("{v}\n"))
}

/// Prints `view` as [`render`] makes it.
pub fn show(view: &impl View, json: bool) -> Result<(), Fail> {
    print!("{}", render(view, json)?);
    Ok(())
}

/// A record kind as shown: `latest`, `ring`, `mailbox`.
pub fn kind_name(k: Kind) -> String {
    format!("{k:?}").to_lowercase()
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Cuts `s` to `max` characters.
pub fn clip(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// `v` rounded to one decimal (JSON rates and times).
pub fn one_decimal<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((v * 10.0).round() / 10.0)
}

/// As [`one_decimal`], for an optional value.
pub fn one_decimal_opt<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => one_decimal(v, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Probe {
        zeta: u8,
        #[serde(serialize_with = "one_decimal")]
        alpha: f64,
        #[serde(serialize_with = "one_decimal_opt")]
        rate: Option<f64>,
    }

    impl View for Probe {
        fn text(&self) -> String {
            format!("zeta {}\n", self.zeta)
        }
    }

    #[test]
    fn json_is_one_line_with_sorted_keys_and_rounded_decimals() {
        let p = Probe {
            zeta: 1,
            alpha: 2.26,
            rate: Some(0.04),
        };
        assert_eq!(
            render(&p, true).unwrap(),
            "{\"alpha\":2.3,\"rate\":0.0,\"zeta\":1}\n"
        );
        assert_eq!(render(&p, false).unwrap(), "zeta 1\n");
    }

    #[test]
    fn clip_cuts_with_an_ellipsis() {
        assert_eq!(clip("abcdef".into(), 4), "abc…");
        assert_eq!(clip("abc".into(), 4), "abc");
    }
}
