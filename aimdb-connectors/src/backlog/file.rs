//! NOR flash semantics over a file, so a host process keeps its backlog
//! in the same queue (and the same fault model) as a device.
//!
//! Writes land in the operating system's page cache before the call
//! returns, so they survive the process being killed (SIGKILL, a panic,
//! an abort). To survive the host losing power as well, open with
//! [`FileFlash::synced`]: every write and erase is then followed by
//! `fdatasync`, at the cost of a disk flush per stored value.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::vec;

use embedded_storage_async::nor_flash::{
    ErrorType, MultiwriteNorFlash, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// A file of `pages` × `PAGE` bytes as NOR flash: erased bytes read
/// `0xff`, a write can only clear bits (the AND of old and new, as
/// [`MultiwriteNorFlash`] promises). `PAGE` is the erase size (4 KiB by
/// default; a device's page size to read its flash image on a host).
#[derive(Debug)]
pub struct FileFlash<const PAGE: usize = 4096> {
    file: File,
    capacity: u32,
    sync: bool,
}

/// A failed file operation, or an address outside the file.
#[derive(Debug)]
pub struct FileError(NorFlashErrorKind);

impl NorFlashError for FileError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

impl From<io::Error> for FileError {
    fn from(_: io::Error) -> Self {
        FileError(NorFlashErrorKind::Other)
    }
}

impl<const PAGE: usize> FileFlash<PAGE> {
    /// Bytes per erase page.
    pub const PAGE: usize = PAGE;

    /// Opens (or creates, erased) the file at `path` with `pages` pages.
    /// A file of another length is refused.
    pub fn open(path: impl AsRef<Path>, pages: u32) -> io::Result<Self> {
        let capacity = pages * Self::PAGE as u32;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        if len == 0 {
            let erased = vec![0xffu8; capacity as usize];
            file.write_all_at(&erased, 0)?;
            file.sync_data()?;
        } else if len != u64::from(capacity) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "backlog file has another size",
            ));
        }
        Ok(Self {
            file,
            capacity,
            sync: false,
        })
    }

    /// As [`Self::open`], with every write and erase flushed to the disk.
    pub fn synced(path: impl AsRef<Path>, pages: u32) -> io::Result<Self> {
        Ok(Self {
            sync: true,
            ..Self::open(path, pages)?
        })
    }

    fn check(&self, offset: u32, len: usize) -> Result<(), FileError> {
        match offset.checked_add(len as u32) {
            Some(end) if end <= self.capacity => Ok(()),
            _ => Err(FileError(NorFlashErrorKind::OutOfBounds)),
        }
    }

    fn flushed(&self) -> Result<(), FileError> {
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

impl<const PAGE: usize> ErrorType for FileFlash<PAGE> {
    type Error = FileError;
}

impl<const PAGE: usize> ReadNorFlash for FileFlash<PAGE> {
    const READ_SIZE: usize = 1;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FileError> {
        self.check(offset, bytes.len())?;
        self.file.read_exact_at(bytes, u64::from(offset))?;
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity as usize
    }
}

impl<const PAGE: usize> NorFlash for FileFlash<PAGE> {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = PAGE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FileError> {
        let aligned = |a: u32| (a as usize).is_multiple_of(Self::PAGE);
        if from > to || !aligned(from) || !aligned(to) {
            return Err(FileError(NorFlashErrorKind::NotAligned));
        }
        self.check(from, (to - from) as usize)?;
        let erased = [0xffu8; PAGE];
        for page in (from..to).step_by(PAGE) {
            self.file.write_all_at(&erased, u64::from(page))?;
        }
        self.flushed()
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FileError> {
        if !(offset as usize).is_multiple_of(Self::WRITE_SIZE)
            || !bytes.len().is_multiple_of(Self::WRITE_SIZE)
        {
            return Err(FileError(NorFlashErrorKind::NotAligned));
        }
        self.check(offset, bytes.len())?;
        let mut word = [0u8; 64];
        for (i, chunk) in bytes.chunks(word.len()).enumerate() {
            let at = u64::from(offset) + (i * word.len()) as u64;
            let old = &mut word[..chunk.len()];
            self.file.read_exact_at(old, at)?;
            for (o, n) in old.iter_mut().zip(chunk) {
                *o &= n;
            }
            self.file.write_all_at(old, at)?;
        }
        self.flushed()
    }
}

impl<const PAGE: usize> MultiwriteNorFlash for FileFlash<PAGE> {}
