//! The one shape of a configuration error: a table built from a list of
//! links reports every mistake at once, each with the link's position, its
//! name and what is wrong (`E`: the module's own `ConfigError`).

use core::fmt;

/// One configuration mistake: which link and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigIssue<'a, E> {
    /// Index of the `link` call, counting from 0.
    pub index: usize,
    /// What the link is called: an inbound link's filter, an outbound
    /// route's record name.
    pub name: &'a str,
    /// What is wrong.
    pub error: E,
}

/// Every configuration mistake of a build: the first [`Self::KEPT`] in
/// full, in declaration order, and how many there were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors<'a, E> {
    /// The first issues, in declaration order.
    pub issues: heapless::Vec<ConfigIssue<'a, E>, 16>,
    /// How many issues there were in all.
    pub total: usize,
}

impl<'a, E> ConfigErrors<'a, E> {
    /// Issues kept in full.
    pub const KEPT: usize = 16;

    /// No issue yet.
    pub(crate) const fn new() -> Self {
        Self {
            issues: heapless::Vec::new(),
            total: 0,
        }
    }

    /// Records one issue (kept if fewer than [`Self::KEPT`] are).
    pub(crate) fn push(&mut self, index: usize, name: &'a str, error: E) {
        self.total += 1;
        let _ = self.issues.push(ConfigIssue { index, name, error });
    }
}

impl<E: fmt::Display> fmt::Display for ConfigErrors<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} configuration error(s)", self.total)?;
        for i in &self.issues {
            write!(f, "; link {} `{}`: {}", i.index, i.name, i.error)?;
        }
        Ok(())
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for ConfigErrors<'_, E> {}
