//! outbound
#![forbid(unsafe_code)]
/// x
pub struct Routes;
