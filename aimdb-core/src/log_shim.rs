//! The crate's one logging shim: `defmt`, `log`, or nothing.
#![allow(unused_macros)]

#[cfg(feature = "defmt")]
macro_rules! warn_ {
    ($($t:tt)*) => { defmt::warn!($($t)*) };
}
#[cfg(feature = "log")]
macro_rules! warn_ {
    ($($t:tt)*) => { log::warn!($($t)*) };
}
#[cfg(not(any(feature = "defmt", feature = "log")))]
macro_rules! warn_ {
    ($($t:tt)*) => {{}};
}

#[cfg(feature = "defmt")]
macro_rules! debug_ {
    ($($t:tt)*) => { defmt::debug!($($t)*) };
}
#[cfg(feature = "log")]
macro_rules! debug_ {
    ($($t:tt)*) => { log::debug!($($t)*) };
}
#[cfg(not(any(feature = "defmt", feature = "log")))]
macro_rules! debug_ {
    ($($t:tt)*) => {{}};
}
