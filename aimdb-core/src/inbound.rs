//! inbound
#![forbid(unsafe_code)]
/// x
pub struct Dispatch;
