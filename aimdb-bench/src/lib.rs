//! Shared helpers for the bench binaries.
