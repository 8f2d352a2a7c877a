//! Reference rules for topic names and filters, written from the module
//! docs of `aimdb_core::topic` (MQTT 3.1.1 §4.7) rather than from its code:
//! plain `Vec`s, every rule checked on its own, no fast paths.

use aimdb_core::topic::{TopicError, MAX_LEVELS, MAX_TOPIC_LEN};

/// Every rule `bytes` breaks as a topic *name*. Empty means valid.
///
/// The implementation reports one error; which one it picks when several
/// rules are broken is its own business, so callers check membership.
pub fn topic_violations(bytes: &[u8]) -> Vec<TopicError> {
    let mut v = common_violations(bytes);
    if bytes.contains(&b'+') || bytes.contains(&b'#') {
        v.push(TopicError::WildcardInName);
    }
    v
}

/// Every rule `s` breaks as a topic *filter*. Empty means valid.
pub fn filter_violations(s: &str) -> Vec<TopicError> {
    let mut v = common_violations(s.as_bytes());
    let levels: Vec<&str> = s.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        let wild = level.contains('+') || level.contains('#');
        if wild && *level != "+" && *level != "#" {
            v.push(TopicError::WildcardNotAlone);
        }
        if *level == "#" && i + 1 != levels.len() {
            v.push(TopicError::HashNotLast);
        }
    }
    v
}

fn common_violations(bytes: &[u8]) -> Vec<TopicError> {
    let mut v = Vec::new();
    if bytes.is_empty() {
        v.push(TopicError::Empty);
    }
    if bytes.len() > MAX_TOPIC_LEN {
        v.push(TopicError::TooLong);
    }
    if bytes.iter().filter(|&&b| b == b'/').count() + 1 > MAX_LEVELS {
        v.push(TopicError::TooManyLevels);
    }
    if bytes.contains(&0) {
        v.push(TopicError::Nul);
    }
    if core::str::from_utf8(bytes).is_err() {
        v.push(TopicError::NotUtf8);
    }
    v
}

/// Whether filter `f` matches topic `t` (both already valid), stated as a
/// length condition plus a per-level condition instead of a walk:
///
/// - `$`-topics are not matched by a filter whose first level is `+`/`#`;
/// - a filter ending in `#` matches when the topic has at least as many
///   levels as the filter before `#`, and those agree;
/// - otherwise the level counts are equal and every level agrees;
/// - a level agrees when the filter's is `+` or the two are equal.
pub fn matches(f: &str, t: &str) -> bool {
    let fl: Vec<&str> = f.split('/').collect();
    let tl: Vec<&str> = t.split('/').collect();
    if t.starts_with('$') && (fl[0] == "+" || fl[0] == "#") {
        return false;
    }
    let agree = |n: usize| (0..n).all(|i| fl[i] == "+" || fl[i] == tl[i]);
    if fl.last() == Some(&"#") {
        let n = fl.len() - 1;
        tl.len() >= n && agree(n)
    } else {
        fl.len() == tl.len() && agree(fl.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_agrees_with_spec_examples() {
        assert!(matches("sport/#", "sport"));
        assert!(matches("#", "a/b"));
        assert!(!matches("#", "$SYS/a"));
        assert!(matches("$SYS/#", "$SYS"));
        assert!(!matches("sport/+", "sport"));
        assert!(matches("+/+", "/finance"));
        assert!(!matches("+", "/finance"));
        assert!(filter_violations("a/#/b").contains(&TopicError::HashNotLast));
        assert!(filter_violations("a+").contains(&TopicError::WildcardNotAlone));
        assert!(topic_violations(b"a/+").contains(&TopicError::WildcardInName));
        assert!(topic_violations(b"a/b").is_empty());
    }
}
