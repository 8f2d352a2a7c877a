//! [`ascii_str`]: bytes to `&str` without a UTF-8 decode when they are ASCII.

/// `b` as a `&str` if every byte is ASCII (checked a word at a time), else
/// `None`. Short ASCII topics are the inbound hot path; `str::from_utf8`
/// costs several instructions per byte on them.
#[inline]
pub(crate) fn ascii_str(b: &[u8]) -> Option<&str> {
    if !b.is_ascii() {
        return None;
    }
    // SAFETY: every byte is below 0x80 (checked just above), and a sequence
    // of ASCII bytes is valid UTF-8.
    Some(unsafe { core::str::from_utf8_unchecked(b) })
}
