//! The host, through semihosting (QEMU's `-semihosting-config
//! enable=on,target=native`): a file's bytes and the time. For the TLS
//! test device only: a real device holds its CA in flash, seeds its
//! generator from a hardware RNG and learns the date from SNTP or an RTC.

use cortex_m_semihosting::{nr, syscall, syscall1};

/// Reads the host file `path` (relative to QEMU's working directory) into
/// `buf`: the bytes read, or `None` if it cannot be opened.
pub fn read(path: &core::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    let name = path.to_bytes();
    // SAFETY: SYS_OPEN reads `name.len()` bytes of the NUL-terminated
    // string `path`, which outlives the call.
    let handle = unsafe { syscall!(OPEN, name.as_ptr(), nr::open::R_BINARY, name.len()) };
    if handle as isize == -1 {
        return None;
    }
    // SAFETY: SYS_READ writes at most `buf.len()` bytes to `buf`, which is
    // borrowed mutably for the call; it returns how many it did not read.
    let left = unsafe { syscall!(READ, handle, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: closes the handle SYS_OPEN returned above, once.
    unsafe { syscall!(CLOSE, handle) };
    buf.len().checked_sub(left)
}

/// The host's time, in seconds since 1970-01-01 UTC.
pub fn unix_time() -> u32 {
    // SAFETY: SYS_TIME takes no argument block and only returns a value.
    unsafe { syscall1!(TIME, 0) as u32 }
}
