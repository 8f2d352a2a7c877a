//! A NOR flash that counts what the backlog costs it: bytes written and
//! pages erased (write amplification, flash life).

use embedded_storage_async::nor_flash::{ErrorType, MultiwriteNorFlash, NorFlash, ReadNorFlash};

use super::Counters;
use aimdb_core::counters::bump;

/// `F`, with its writes and erases counted in a backlog's [`Counters`].
#[derive(Debug)]
pub struct Metered<'c, F> {
    flash: F,
    counters: &'c Counters,
}

impl<'c, F> Metered<'c, F> {
    /// Counts `flash`'s writes and erases into `counters`.
    pub fn new(flash: F, counters: &'c Counters) -> Self {
        Self { flash, counters }
    }

    /// The flash itself.
    pub fn into_inner(self) -> F {
        self.flash
    }

    fn count<T, E>(&self, r: &Result<T, E>) {
        if r.is_err() {
            bump(&self.counters.flash_errors, 1);
        }
    }
}

impl<F: ErrorType> ErrorType for Metered<'_, F> {
    type Error = F::Error;
}

impl<F: ReadNorFlash> ReadNorFlash for Metered<'_, F> {
    const READ_SIZE: usize = F::READ_SIZE;

    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let r = self.flash.read(offset, bytes).await;
        self.count(&r);
        r
    }

    fn capacity(&self) -> usize {
        self.flash.capacity()
    }
}

impl<F: NorFlash> NorFlash for Metered<'_, F> {
    const WRITE_SIZE: usize = F::WRITE_SIZE;
    const ERASE_SIZE: usize = F::ERASE_SIZE;

    async fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let pages = (to.saturating_sub(from) as usize).div_ceil(F::ERASE_SIZE);
        bump(&self.counters.erases, pages as u32);
        let r = self.flash.erase(from, to).await;
        self.count(&r);
        r
    }

    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        bump(&self.counters.flash_bytes, bytes.len() as u32);
        let r = self.flash.write(offset, bytes).await;
        self.count(&r);
        r
    }
}

impl<F: MultiwriteNorFlash> MultiwriteNorFlash for Metered<'_, F> {}
