//! Topic names and MQTT-style filters (MQTT 3.1.1 §4.7), validated once and
//! matched without allocating.
//!
//! - Levels are separated by `/`; empty levels are levels (`a//b` has three).
//! - In a filter, `+` matches exactly one level and `#` matches the rest,
//!   including the parent level itself (`a/#` matches `a`). Each must fill a
//!   whole level and `#` must be last.
//! - Topics starting with `$` are not matched by filters whose first level
//!   is a wildcard (`#` does not match `$SYS/uptime`).
//! - Limits: at most [`MAX_TOPIC_LEN`] bytes and [`MAX_LEVELS`] levels; no
//!   NUL; valid UTF-8.
//!
//! ```
//! use aimdb_core::topic::{Filter, Topic};
//! let f = Filter::new("sensors/+/temp").unwrap();
//! assert!(f.matches(Topic::new("sensors/kitchen/temp").unwrap()));
//! assert!(!f.matches(Topic::new("sensors/kitchen/hum").unwrap()));
//! ```
#![forbid(unsafe_code)]

use core::fmt;

/// Longest topic or filter, in bytes. MQTT allows 65,535; devices and the
/// fixed scratch buffers here do not need more than this.
pub const MAX_TOPIC_LEN: usize = 256;
/// Most levels in a topic or filter.
pub const MAX_LEVELS: usize = 32;

/// Why a topic name or filter was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TopicError {
    /// Zero bytes long.
    Empty,
    /// Longer than [`MAX_TOPIC_LEN`] bytes.
    TooLong,
    /// More than [`MAX_LEVELS`] levels.
    TooManyLevels,
    /// Contains a NUL character.
    Nul,
    /// Not valid UTF-8.
    NotUtf8,
    /// A topic *name* (something published) contains `+` or `#`.
    WildcardInName,
    /// `#` is not the last level of a filter.
    HashNotLast,
    /// `+` or `#` shares its level with other characters.
    WildcardNotAlone,
}

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty topic",
            Self::TooLong => "topic longer than MAX_TOPIC_LEN",
            Self::TooManyLevels => "topic has more than MAX_LEVELS levels",
            Self::Nul => "topic contains NUL",
            Self::NotUtf8 => "topic is not UTF-8",
            Self::WildcardInName => "wildcard in a topic name",
            Self::HashNotLast => "'#' is not the last level",
            Self::WildcardNotAlone => "wildcard shares a level with other characters",
        })
    }
}
impl core::error::Error for TopicError {}

fn check_common(s: &str) -> Result<(), TopicError> {
    if s.is_empty() {
        return Err(TopicError::Empty);
    }
    if s.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong);
    }
    let mut levels = 1;
    for b in s.bytes() {
        match b {
            0 => return Err(TopicError::Nul),
            b'/' => levels += 1,
            _ => {}
        }
    }
    if levels > MAX_LEVELS {
        return Err(TopicError::TooManyLevels);
    }
    Ok(())
}

/// A validated topic name: what a message is published to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic<'a>(&'a str);

impl<'a> Topic<'a> {
    /// Validates a topic name.
    pub fn new(s: &'a str) -> Result<Self, TopicError> {
        check_common(s)?;
        if s.bytes().any(|b| b == b'+' || b == b'#') {
            return Err(TopicError::WildcardInName);
        }
        Ok(Self(s))
    }

    /// [`Self::from_bytes`] and [`topic_hash`] of the same bytes, in one
    /// classifying pass for the common case (ASCII, no NUL, no wildcard,
    /// not too deep); anything else takes the full path, so the result and
    /// the error are exactly those of `from_bytes`.
    pub(crate) fn from_bytes_hashed(b: &'a [u8]) -> Result<(Self, u32), TopicError> {
        if !b.is_empty() && b.len() <= MAX_TOPIC_LEN {
            let mut odd = 0u8;
            let mut slashes = 0usize;
            for &c in b {
                let k = CLASS[c as usize];
                odd |= k & ODD;
                slashes += (k & SLASH) as usize;
            }
            if odd == 0 && slashes < MAX_LEVELS {
                if let Some(s) = crate::sync::ascii_str(b) {
                    return Ok((Self(s), topic_hash(b)));
                }
            }
        }
        Self::from_bytes(b).map(|t| (t, topic_hash(b)))
    }

    /// Validates raw bytes from a transport (UTF-8 first).
    pub fn from_bytes(b: &'a [u8]) -> Result<Self, TopicError> {
        if b.len() > MAX_TOPIC_LEN {
            return Err(TopicError::TooLong);
        }
        let s = core::str::from_utf8(b).map_err(|_| TopicError::NotUtf8)?;
        Self::new(s)
    }

    /// The topic text.
    pub fn as_str(&self) -> &'a str {
        self.0
    }

    /// Its levels.
    pub fn levels(&self) -> core::str::Split<'a, char> {
        self.0.split('/')
    }

    /// Whether it is a `$`-topic (never matched by a leading wildcard).
    pub fn is_system(&self) -> bool {
        self.0.starts_with('$')
    }
}

impl fmt::Display for Topic<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A validated topic filter (may contain `+` and `#`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Filter<'a>(&'a str);

impl<'a> Filter<'a> {
    /// Validates a filter.
    pub fn new(s: &'a str) -> Result<Self, TopicError> {
        check_common(s)?;
        let mut levels = s.split('/').peekable();
        while let Some(level) = levels.next() {
            let wild = level.bytes().any(|b| b == b'+' || b == b'#');
            if wild && level.len() != 1 {
                return Err(TopicError::WildcardNotAlone);
            }
            if level == "#" && levels.peek().is_some() {
                return Err(TopicError::HashNotLast);
            }
        }
        Ok(Self(s))
    }

    /// The filter text.
    pub fn as_str(&self) -> &'a str {
        self.0
    }

    /// Its levels.
    pub fn levels(&self) -> core::str::Split<'a, char> {
        self.0.split('/')
    }

    /// Whether it contains `+` or `#`.
    pub fn has_wildcards(&self) -> bool {
        self.0.bytes().any(|b| b == b'+' || b == b'#')
    }

    /// MQTT 3.1.1 §4.7 matching, allocation-free.
    pub fn matches(&self, topic: Topic<'_>) -> bool {
        if topic.is_system() && self.0.starts_with(['+', '#']) {
            return false;
        }
        let mut f = self.levels();
        let mut t = topic.levels();
        loop {
            match (f.next(), t.next()) {
                (Some("#"), _) => return true,
                (Some("+"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }
}

impl fmt::Display for Filter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Byte class bit: NUL, `+`, `#` or non-ASCII (the fast scan gives up).
const ODD: u8 = 1;
/// Byte class bit: `/`.
const SLASH: u8 = 2;
/// Byte classes for [`Topic::from_bytes_hashed`].
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = match i as u8 {
            0 | b'+' | b'#' | 0x80..=0xff => ODD,
            b'/' => SLASH,
            _ => 0,
        };
        i += 1;
    }
    t
};

/// The hash of a whole topic or exact filter (the inbound exact table's
/// key): eight bytes per multiply, so its latency is a few cycles per word
/// instead of per byte, and its cost barely moves with the topic length.
pub(crate) fn topic_hash(bytes: &[u8]) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(a)).wrapping_mul(K);
        h ^= h >> 29;
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut a = [0u8; 8];
        a[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(a)).wrapping_mul(K);
    }
    h ^= h >> 32;
    h.wrapping_mul(K) as u32 ^ (h >> 29) as u32
}

/// 32-bit FNV-1a: small, no tables, good enough spread for topic and key
/// tables whose entries are verified by comparison anyway.
pub(crate) const fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_scan_agrees_with_from_bytes() {
        let long = [b'a'; MAX_TOPIC_LEN + 1];
        let deep = [b'/'; MAX_LEVELS];
        let deep_ok = [b'/'; MAX_LEVELS - 1];
        let cases: [&[u8]; 15] = [
            b"",
            b"a",
            b"a/b",
            b"a/+",
            b"#",
            b"a/#",
            b"a\0b",
            "t/\u{e9}/x".as_bytes(),
            &[0xff, b'a'],
            b"$SYS/x",
            b"/",
            b"//",
            &long,
            &deep,
            &deep_ok,
        ];
        for t in cases {
            let fast = Topic::from_bytes_hashed(t);
            assert_eq!(fast.map(|(t, _)| t), Topic::from_bytes(t), "{t:?}");
            if let Ok((_, h)) = fast {
                assert_eq!(h, topic_hash(t));
            }
        }
        assert_ne!(topic_hash(b"dev/0001/value"), topic_hash(b"dev/0002/value"));
    }

    fn m(filter: &str, topic: &str) -> bool {
        Filter::new(filter)
            .unwrap()
            .matches(Topic::new(topic).unwrap())
    }

    #[test]
    fn spec_examples_4_7() {
        // §4.7.1.2 multi-level wildcard
        assert!(m("sport/tennis/player1/#", "sport/tennis/player1"));
        assert!(m("sport/tennis/player1/#", "sport/tennis/player1/ranking"));
        assert!(m(
            "sport/tennis/player1/#",
            "sport/tennis/player1/score/wimbledon"
        ));
        assert!(!m("sport/tennis/player1/#", "sport/tennis/player2"));
        assert!(m("sport/#", "sport"));
        assert!(m("#", "sport/tennis"));
        // §4.7.1.3 single-level wildcard
        assert!(m("sport/tennis/+", "sport/tennis/player1"));
        assert!(m("sport/tennis/+", "sport/tennis/player2"));
        assert!(!m("sport/tennis/+", "sport/tennis/player1/ranking"));
        assert!(!m("sport/+", "sport"));
        assert!(m("sport/+", "sport/"));
        assert!(m("+/+", "/finance"));
        assert!(m("/+", "/finance"));
        assert!(!m("+", "/finance"));
        assert!(m("+/tennis/#", "sport/tennis/player1"));
        // §4.7.2 topics beginning with $
        assert!(!m("#", "$SYS/broker/clients"));
        assert!(!m("+/monitor/Clients", "$SYS/monitor/Clients"));
        assert!(m("$SYS/#", "$SYS/monitor/Clients"));
        assert!(m("$SYS/monitor/+", "$SYS/monitor/Clients"));
        // empty levels are levels
        assert!(m("a//b", "a//b"));
        assert!(m("a/+/b", "a//b"));
        assert!(!m("a/b", "a//b"));
        // exact, case-sensitive
        assert!(!m("ACCOUNTS", "Accounts"));
    }

    #[test]
    fn topic_errors() {
        assert_eq!(Topic::new(""), Err(TopicError::Empty));
        assert_eq!(Topic::new("a/+/b"), Err(TopicError::WildcardInName));
        assert_eq!(Topic::new("a/#"), Err(TopicError::WildcardInName));
        assert_eq!(Topic::new("a\0b"), Err(TopicError::Nul));
        let long = "x".repeat(MAX_TOPIC_LEN + 1);
        assert_eq!(Topic::new(&long), Err(TopicError::TooLong));
        assert!(Topic::new(&long[..MAX_TOPIC_LEN]).is_ok());
        let deep = "a/".repeat(MAX_LEVELS) + "a";
        assert_eq!(Topic::new(&deep), Err(TopicError::TooManyLevels));
        assert_eq!(Topic::from_bytes(b"a/\xff"), Err(TopicError::NotUtf8));
        assert_eq!(Topic::from_bytes(b"a/b").map(|t| t.as_str()), Ok("a/b"));
    }

    #[test]
    fn filter_errors() {
        assert_eq!(Filter::new(""), Err(TopicError::Empty));
        assert_eq!(Filter::new("a/#/b"), Err(TopicError::HashNotLast));
        assert_eq!(Filter::new("a/b#"), Err(TopicError::WildcardNotAlone));
        assert_eq!(Filter::new("a+/b"), Err(TopicError::WildcardNotAlone));
        assert_eq!(Filter::new("a/++"), Err(TopicError::WildcardNotAlone));
        assert_eq!(Filter::new("a\0"), Err(TopicError::Nul));
        assert!(Filter::new("+/+/#").is_ok());
        assert!(Filter::new("#").is_ok());
        assert!(Filter::new("+").is_ok());
        assert!(Filter::new("/").is_ok());
    }
}
