//! The crate's one logging shim: `log` (hosts), `defmt` (firmware), or
//! nothing (the default: the counters say everything, see
//! [`mqtt::Counters::last_error`](crate::mqtt::Counters::last_error)).
//! Arguments must be `Display` for `log` and `defmt::Format` for `defmt`;
//! the crate's error and cause types are both. With both features on
//! (`--all-features`), `log` is used.
#![allow(unused_macros)]

#[cfg(all(feature = "defmt", not(feature = "log")))]
macro_rules! log_info {
    ($($t:tt)*) => { defmt::info!($($t)*) };
}
#[cfg(feature = "log")]
macro_rules! log_info {
    ($($t:tt)*) => { log::info!($($t)*) };
}
// Without a backend the arguments are still type-checked (and so used),
// never evaluated.
#[cfg(not(any(feature = "defmt", feature = "log")))]
macro_rules! log_info {
    ($($t:tt)*) => {{
        if false {
            let _ = core::format_args!($($t)*);
        }
    }};
}

#[cfg(all(feature = "defmt", not(feature = "log")))]
macro_rules! log_warn {
    ($($t:tt)*) => { defmt::warn!($($t)*) };
}
#[cfg(feature = "log")]
macro_rules! log_warn {
    ($($t:tt)*) => { log::warn!($($t)*) };
}
#[cfg(not(any(feature = "defmt", feature = "log")))]
macro_rules! log_warn {
    ($($t:tt)*) => {{
        if false {
            let _ = core::format_args!($($t)*);
        }
    }};
}

/// Rate limit for repeated events (rejections, failed attempts): log the
/// 1st, 2nd, 4th, 8th, … occurrence, so a flood costs a log line per
/// doubling, not per event.
#[allow(dead_code)]
pub(crate) fn worth_logging(count: u32) -> bool {
    count.is_power_of_two()
}
