//! Mistakes in an inbound table's declaration, reported all at once as
//! [`ConfigErrors`](crate::ConfigErrors)`<ConfigError>`. A rejected frame is the contract's
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

/// Every mistake of an inbound table's declaration; each issue's name is
/// the filter.
pub type ConfigErrors<'a> = crate::ConfigErrors<'a, ConfigError>;
