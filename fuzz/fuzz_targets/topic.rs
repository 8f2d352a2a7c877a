//! Topic and filter parsing and matching against the reference rules.
//!
//! Invariants:
//! - `Topic::from_bytes` accepts exactly the byte strings that break no
//!   rule, and a rejection names a rule that is broken; `Topic::new` on the
//!   same text agrees;
//! - `Filter::new` likewise against the filter rules;
//! - an accepted topic/filter round-trips: same text, levels rejoin to it,
//!   `is_system` / `has_wildcards` agree with the text;
//! - `Filter::matches` equals the reference matcher, for the raw pair and
//!   for a topic made from the filter by filling its wildcards;
//! - a wildcard-free filter matches exactly the identical topic.
#![no_main]

use aimdb_core::topic::{Filter, Topic};
use aimdb_fuzz::reference;
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    filter: aimdb_fuzz::TopicIn,
    topic: aimdb_fuzz::TopicIn,
    /// Levels substituted for `+` (and appended for `#`).
    fill: Vec<Vec<u8>>,
}

fn check_topic(b: &[u8]) -> Option<Topic<'_>> {
    let broken = reference::topic_violations(b);
    let got = Topic::from_bytes(b);
    match got {
        Ok(t) => {
            assert!(broken.is_empty(), "accepted {b:?}, breaks {broken:?}");
            assert_eq!(t.as_str().as_bytes(), b);
            assert_eq!(t.levels().collect::<Vec<_>>().join("/").as_bytes(), b);
            assert_eq!(
                t.levels().count(),
                b.iter().filter(|&&c| c == b'/').count() + 1
            );
            assert_eq!(t.is_system(), b.first() == Some(&b'$'));
        }
        Err(e) => assert!(
            broken.contains(&e),
            "rejected {b:?} as {e:?}, breaks {broken:?}"
        ),
    }
    if let Ok(s) = core::str::from_utf8(b) {
        assert_eq!(Topic::new(s), got, "new and from_bytes disagree on {s:?}");
    }
    got.ok()
}

fn check_filter(s: &str) -> Option<Filter<'_>> {
    let broken = reference::filter_violations(s);
    match Filter::new(s) {
        Ok(f) => {
            assert!(
                broken.is_empty(),
                "accepted filter {s:?}, breaks {broken:?}"
            );
            assert_eq!(f.as_str(), s);
            assert_eq!(f.levels().collect::<Vec<_>>().join("/"), s);
            assert_eq!(f.has_wildcards(), s.contains(['+', '#']));
            Some(f)
        }
        Err(e) => {
            assert!(
                broken.contains(&e),
                "rejected filter {s:?} as {e:?}, breaks {broken:?}"
            );
            None
        }
    }
}

fn check_match(f: Filter<'_>, t: Topic<'_>) {
    let want = reference::matches(f.as_str(), t.as_str());
    assert_eq!(
        f.matches(t),
        want,
        "filter {:?} topic {:?}",
        f.as_str(),
        t.as_str()
    );
    if !f.has_wildcards() {
        assert_eq!(want, f.as_str() == t.as_str());
    }
}

/// The filter with each `+` replaced by a `fill` level and `#` by zero or
/// more of them: a topic it should usually match.
fn instantiate(f: &str, fill: &[Vec<u8>]) -> Vec<u8> {
    let mut fill = fill.iter().map(Vec::as_slice).cycle().take(fill.len() * 2);
    let mut levels: Vec<Vec<u8>> = Vec::new();
    for level in f.split('/') {
        match level {
            "+" => levels.push(fill.next().unwrap_or(b"x").to_vec()),
            "#" => levels.extend(fill.by_ref().take(3).map(<[u8]>::to_vec)),
            l => levels.push(l.as_bytes().to_vec()),
        }
    }
    levels.join(&b'/')
}

fuzz_target!(|input: Input| {
    let fb = input.filter.bytes();
    let tb = input.topic.bytes();
    let topic = check_topic(&tb);
    // The filter's bytes are also a topic candidate.
    check_topic(&fb);
    let Ok(fs) = core::str::from_utf8(&fb) else {
        return;
    };
    let Some(filter) = check_filter(fs) else {
        return;
    };
    if let Some(t) = topic {
        check_match(filter, t);
    }
    let made = instantiate(fs, &input.fill);
    if let Some(t) = check_topic(&made) {
        check_match(filter, t);
    }
});
