//! Mistakes in an inbound table's declaration ([`ConfigErrors`], all at
//! once). A rejected frame is the contract's
//! [`DispatchError`](crate::connector::DispatchError).

use core::fmt;

use crate::topic::TopicError;

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
