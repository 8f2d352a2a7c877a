//! What the inbound table reports: a rejected frame ([`DispatchError`],
//! counted in [`Stats`](super::Stats)) and mistakes in its declaration
//! ([`ConfigErrors`], all at once).

use core::fmt;

use crate::codec::DecodeError;
use crate::topic::TopicError;

/// Why a frame was rejected. Each variant has its own counter in [`Stats`](super::Stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DispatchError {
    /// No route matches the topic.
    UnknownTopic,
    /// The topic bytes are not UTF-8.
    TopicNotUtf8,
    /// The topic is empty or contains NUL.
    InvalidTopic,
    /// The published topic contains `+` or `#`.
    WildcardInTopic,
    /// The topic is longer than `MAX_TOPIC_LEN` or deeper than `MAX_LEVELS`.
    TopicTooLong,
    /// The payload did not decode as the record's type.
    MalformedPayload(DecodeError),
    /// The payload is over the link's limit.
    PayloadTooLarge,
    /// A new key found its keyed table full.
    KeyTableFull,
    /// The key level is empty or longer than `KEY_MAX_LEN`.
    KeyInvalid,
}

impl DispatchError {
    /// The reason in a few words, without the decoder's detail (for logs
    /// that take only static strings, such as `defmt`'s).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::UnknownTopic => "no inbound route for topic",
            Self::TopicNotUtf8 => "topic is not UTF-8",
            Self::InvalidTopic => "invalid topic",
            Self::WildcardInTopic => "wildcard in published topic",
            Self::TopicTooLong => "topic too long",
            Self::MalformedPayload(_) => "malformed payload",
            Self::PayloadTooLarge => "payload over the route's limit",
            Self::KeyTableFull => "key table full",
            Self::KeyInvalid => "invalid key",
        }
    }
}

impl fmt::Display for DispatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MalformedPayload(e) => write!(f, "malformed payload: {e}"),
            e => f.write_str(e.as_str()),
        }
    }
}
impl core::error::Error for DispatchError {}

/// A configuration mistake found while building.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The filter is not a valid MQTT filter.
    InvalidFilter(TopicError),
    /// The same filter is already linked to the same target.
    Duplicate,
    /// A keyed route's key level is past the filter's last level.
    KeyLevelOutOfRange,
    /// A keyed route's key level is not a `+` level.
    KeyLevelNotWildcard,
    /// More than `N` routes.
    TooManyRoutes,
    /// The pattern filters need more than `NODES` trie nodes.
    TooManyNodes,
}

/// One configuration mistake: which link (in declaration order) and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigIssue<'a> {
    /// Index of the `link` call, counting from 0.
    pub index: usize,
    /// The filter given.
    pub filter: &'a str,
    /// What is wrong.
    pub error: ConfigError,
}

/// Every configuration mistake of a build (the first [`Self::KEPT`] in
/// full, and the total count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors<'a> {
    /// The first issues, in declaration order.
    pub issues: heapless::Vec<ConfigIssue<'a>, 16>,
    /// How many issues there were in all.
    pub total: usize,
}

impl ConfigErrors<'_> {
    /// Issues kept in full.
    pub const KEPT: usize = 16;
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidFilter(e) => write!(f, "invalid filter: {e}"),
            Self::Duplicate => f.write_str("the same filter is already linked to the same target"),
            Self::KeyLevelOutOfRange => f.write_str("key level past the filter's last level"),
            Self::KeyLevelNotWildcard => f.write_str("key level is not a `+` level"),
            Self::TooManyRoutes => f.write_str("more routes than the table's N"),
            Self::TooManyNodes => {
                f.write_str("the pattern filters need more trie nodes than the table's NODES")
            }
        }
    }
}
impl core::error::Error for ConfigError {}

impl fmt::Display for ConfigErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} inbound configuration error(s)", self.total)?;
        for i in &self.issues {
            write!(f, "; link {} `{}`: {}", i.index, i.filter, i.error)?;
        }
        Ok(())
    }
}
impl core::error::Error for ConfigErrors<'_> {}
