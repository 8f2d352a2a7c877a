//! NOR flash for the backlog under QEMU, which emulates no flash
//! controller for writes.
//!
//! - [`HostFlash`]: the flash is a file on the host, reached through
//!   semihosting. It outlives the QEMU process, so stopping QEMU and
//!   starting it again with the same file is a device reset that keeps
//!   its flash (what `outage-e2e` does mid-outage).
//! - [`RamFlash`]: the flash in RAM, for b3's instruction counts (no
//!   semihosting call inside a counted operation).
//!
//! Both behave as NOR flash with multiwrite: erased bytes read `0xff`, a
//! write ANDs (it can only clear bits).

use core::ffi::CStr;
use core::ops::Range;

use cortex_m_semihosting::{nr, syscall};
use embedded_storage_async::nor_flash::{
    ErrorType, MultiwriteNorFlash, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// Bytes per erase page (the LM3S6965's own flash page).
pub const PAGE: usize = 1024;

/// Pages of the durable demo firmware's flash (`device-backlog`,
/// `device-mqtt-backlog`) for the backlog, then for the boot counter.
pub const BACKLOG_PAGES: usize = 64;
/// See [`BACKLOG_PAGES`].
pub const BOOT_PAGES: usize = 2;

/// The durable demo firmware's flash: the host file `backlog.bin` in
/// QEMU's working directory ([`BACKLOG_PAGES`] + [`BOOT_PAGES`] pages of
/// 0xff, 66 KiB, which the host makes), with the backlog's range and the
/// boot counter's; `None` without such a file.
pub fn demo_backlog() -> Option<(HostFlash, Range<u32>, Range<u32>)> {
    let capacity = (BACKLOG_PAGES + BOOT_PAGES) * PAGE;
    let flash = HostFlash::open(c"backlog.bin", capacity)?;
    let backlog = 0..(BACKLOG_PAGES * PAGE) as u32;
    let boots = backlog.end..capacity as u32;
    Some((flash, backlog, boots))
}

/// A failed flash operation.
#[derive(Debug)]
pub struct FlashError(NorFlashErrorKind);

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

fn check(offset: u32, len: usize, capacity: usize) -> Result<usize, FlashError> {
    let at = offset as usize;
    match at.checked_add(len) {
        Some(end) if end <= capacity => Ok(at),
        _ => Err(FlashError(NorFlashErrorKind::OutOfBounds)),
    }
}

fn aligned(offset: u32, len: usize, to: usize) -> Result<(), FlashError> {
    if offset as usize % to == 0 && len % to == 0 {
        Ok(())
    } else {
        Err(FlashError(NorFlashErrorKind::NotAligned))
    }
}

/// A host file of `capacity` bytes as flash (the file must exist with
/// that size: the host makes it, erased).
pub struct HostFlash {
    handle: usize,
    capacity: usize,
}

impl HostFlash {
    /// Opens the host file `path` (relative to QEMU's working directory)
    /// for reading and writing; `None` if it cannot be opened or is
    /// shorter than `capacity`.
    pub fn open(path: &CStr, capacity: usize) -> Option<Self> {
        let name = path.to_bytes();
        // SAFETY: SYS_OPEN reads `name.len()` bytes of the NUL-terminated
        // string `path`, which outlives the call.
        let handle = unsafe { syscall!(OPEN, name.as_ptr(), nr::open::RW_BINARY, name.len()) };
        if handle as isize == -1 {
            return None;
        }
        // SAFETY: SYS_FLEN takes the handle SYS_OPEN returned.
        let len = unsafe { syscall!(FLEN, handle) };
        (len as isize >= capacity as isize).then_some(Self { handle, capacity })
    }

    fn seek(&self, at: usize) -> Result<(), FlashError> {
        // SAFETY: SYS_SEEK takes the open handle and an offset; it touches
        // no memory of ours.
        match unsafe { syscall!(SEEK, self.handle, at) } {
            0 => Ok(()),
            _ => Err(FlashError(NorFlashErrorKind::Other)),
        }
    }

    fn read_at(&self, at: usize, buf: &mut [u8]) -> Result<(), FlashError> {
        self.seek(at)?;
        // SAFETY: SYS_READ writes at most `buf.len()` bytes to `buf`,
        // borrowed mutably for the call; it returns how many it did not
        // read.
        match unsafe { syscall!(READ, self.handle, buf.as_mut_ptr(), buf.len()) } {
            0 => Ok(()),
            _ => Err(FlashError(NorFlashErrorKind::Other)),
        }
    }

    fn write_at(&self, at: usize, buf: &[u8]) -> Result<(), FlashError> {
        self.seek(at)?;
        // SAFETY: SYS_WRITE reads `buf.len()` bytes of `buf`, borrowed for
        // the call; it returns how many it did not write.
        match unsafe { syscall!(WRITE, self.handle, buf.as_ptr(), buf.len()) } {
            0 => Ok(()),
            _ => Err(FlashError(NorFlashErrorKind::Other)),
        }
    }
}

impl ErrorType for HostFlash {
    type Error = FlashError;
}

impl ReadNorFlash for HostFlash {
    const READ_SIZE: usize = 1;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        let at = check(offset, bytes.len(), self.capacity)?;
        self.read_at(at, bytes)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

impl NorFlash for HostFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        aligned(from, to.saturating_sub(from) as usize, PAGE)?;
        let at = check(from, (to - from) as usize, self.capacity)?;
        let erased = [0xffu8; 256];
        for chunk in (at..to as usize).step_by(erased.len()) {
            self.write_at(chunk, &erased)?;
        }
        Ok(())
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        aligned(offset, bytes.len(), 4)?;
        let at = check(offset, bytes.len(), self.capacity)?;
        let mut old = [0u8; 64];
        for (i, new) in bytes.chunks(old.len()).enumerate() {
            let here = at + i * old.len();
            let old = &mut old[..new.len()];
            self.read_at(here, old)?;
            for (o, n) in old.iter_mut().zip(new) {
                *o &= n;
            }
            self.write_at(here, old)?;
        }
        Ok(())
    }
}

impl MultiwriteNorFlash for HostFlash {}

/// `N` bytes of RAM as flash.
pub struct RamFlash<const N: usize> {
    mem: [u8; N],
}

impl<const N: usize> RamFlash<N> {
    /// Erased.
    pub const fn new() -> Self {
        Self { mem: [0xff; N] }
    }
}

impl<const N: usize> Default for RamFlash<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ErrorType for RamFlash<N> {
    type Error = FlashError;
}

impl<const N: usize> ReadNorFlash for RamFlash<N> {
    const READ_SIZE: usize = 1;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        let at = check(offset, bytes.len(), N)?;
        bytes.copy_from_slice(&self.mem[at..at + bytes.len()]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        N
    }
}

impl<const N: usize> NorFlash for RamFlash<N> {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        aligned(from, to.saturating_sub(from) as usize, PAGE)?;
        let at = check(from, (to - from) as usize, N)?;
        self.mem[at..to as usize].fill(0xff);
        Ok(())
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        aligned(offset, bytes.len(), 4)?;
        let at = check(offset, bytes.len(), N)?;
        for (m, b) in self.mem[at..].iter_mut().zip(bytes) {
            *m &= b;
        }
        Ok(())
    }
}

impl<const N: usize> MultiwriteNorFlash for RamFlash<N> {}
