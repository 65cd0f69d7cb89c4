//! A device buffer that a streamed batch frees between its turns
//! ([`crate::backend::Residency::release_rows`]): its values go to host memory when later turns read
//! them, else only its length is kept and the buffer comes back as zeros. Between turns a batch
//! then holds no device memory at all. The host memory stays with the slot from turn to turn, so
//! parking again writes into pages already faulted in, and every copy of a large slot goes
//! through the page-locked staging buffers ([`CudaBackend::download_into`],
//! [`CudaBackend::upload_rows`]); the bytes count in [`crate::backend::traffic`].

use super::CudaBackend;
use crate::backend::traffic;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use rayon::prelude::*;

/// Values a CPU thread compares at a time in [`Slot::park_changes`].
const CHANGE_GRAIN: usize = 1 << 16;

pub(crate) struct Slot<T> {
    /// The buffer, while on the device.
    dev: Option<CudaSlice<T>>,
    /// While freed with `kept`, the buffer's values; otherwise spare memory for the next park.
    host: Vec<T>,
    kept: bool,
    /// Whether the device buffer still holds the zeros it was made with (nothing took it
    /// mutably since): parking it then copies nothing back.
    zeros: bool,
    len: usize,
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync> Slot<T> {
    /// A slot on the device.
    pub(crate) fn device(buf: CudaSlice<T>) -> Self {
        Slot {
            len: buf.len(),
            dev: Some(buf),
            host: Vec::new(),
            kept: false,
            zeros: false,
        }
    }

    /// A slot of `len` zeros on the device.
    pub(crate) fn zeros(gpu: &CudaBackend, len: usize, what: &str) -> Result<Self> {
        Ok(Slot {
            zeros: true,
            ..Slot::device(gpu.zeros(len, what)?)
        })
    }

    /// The buffer on the device; an error (a bug, not a crash) while it is freed.
    pub(crate) fn dev(&self) -> Result<&CudaSlice<T>> {
        self.dev.as_ref().ok_or_else(parked)
    }

    /// The buffer on the device, for work that may write it.
    pub(crate) fn dev_mut(&mut self) -> Result<&mut CudaSlice<T>> {
        self.zeros = false;
        self.dev.as_mut().ok_or_else(parked)
    }

    /// The values kept in host memory while the buffer is freed.
    pub(crate) fn host(&self) -> Option<&[T]> {
        (self.dev.is_none() && self.kept).then_some(&self.host[..])
    }

    /// Whether the buffer is freed without its values (it comes back as zeros).
    pub(crate) fn is_freed(&self) -> bool {
        self.dev.is_none() && !self.kept
    }

    /// Forgets the values kept while freed: the next use writes them all.
    pub(crate) fn discard(&mut self) {
        self.kept = false;
    }

    /// Replaces the values of a freed slot by `values` (as many as it holds), which go up with
    /// the next restore; `false` (nothing done) while the buffer is on the device.
    pub(crate) fn set_host(&mut self, values: &[T]) -> bool {
        if self.dev.is_some() || values.len() != self.len {
            return false;
        }
        self.host.clear();
        self.host.extend_from_slice(values);
        self.kept = true;
        true
    }

    /// Frees the device buffer, copying its values to host memory first with `keep` (waits for
    /// the work queued before).
    pub(crate) fn park(&mut self, gpu: &CudaBackend, keep: bool, what: &str) -> Result<()> {
        if let Some(buf) = &self.dev {
            if keep && self.zeros {
                // Zeroed pages, mapped when first touched.
                self.host = vec![T::default(); self.len];
            } else if keep {
                gpu.download_into(buf, buf.len(), &mut self.host, what)?;
                traffic::down(size_of_val(&self.host[..]));
            }
            (self.kept, self.zeros) = (keep, false);
            self.dev = None;
        }
        Ok(())
    }

    /// Puts the buffer back on the device: its kept values, or zeros.
    pub(crate) fn restore(&mut self, gpu: &CudaBackend, what: &str) -> Result<()> {
        if self.dev.is_some() {
            return Ok(());
        }
        let buf = match self.kept {
            true => {
                traffic::up(size_of_val(&self.host[..]));
                gpu.upload_rows(&self.host, &[], what)?
            }
            false => gpu.zeros(self.len, what)?,
        };
        self.zeros = !self.kept;
        (self.dev, self.kept) = (Some(buf), false);
        Ok(())
    }

    /// Puts the buffer back on the device as zeros, for kernels that write every value before
    /// they read it, and leaves its kept values in host memory for [`Slot::park_changes`]:
    /// nothing goes up. `false` (and [`Slot::restore`]) where nothing was kept.
    pub(crate) fn restore_blank(&mut self, gpu: &CudaBackend, what: &str) -> Result<bool> {
        if self.dev.is_some() || !self.kept {
            self.restore(gpu, what)?;
            return Ok(false);
        }
        (self.dev, self.kept) = (Some(gpu.zeros(self.len, what)?), false);
        self.zeros = true;
        Ok(true)
    }

    /// [`Slot::park`] with `keep` after [`Slot::restore_blank`]: also counts the values that
    /// differ from those the host held, at the indices where `counts` says so (waits for the
    /// work queued before).
    pub(crate) fn park_changes(
        &mut self,
        gpu: &CudaBackend,
        what: &str,
        counts: impl Fn(usize) -> bool + Sync,
    ) -> Result<u64>
    where
        T: PartialEq,
    {
        let Some(buf) = self.dev.take() else {
            return Err(parked());
        };
        let (host, mut at, mut changed) = (&mut self.host, 0, 0);
        host.resize(self.len, T::default());
        gpu.download_each(&buf, self.len, what, |part| {
            let old = &mut host[at..at + part.len()];
            changed += (old.par_chunks_mut(CHANGE_GRAIN))
                .zip(part.par_chunks(CHANGE_GRAIN))
                .enumerate()
                .map(|(c, (old, new))| {
                    let first = at + c * CHANGE_GRAIN;
                    let moved = (old.iter().zip(new).enumerate())
                        .filter(|&(i, (o, v))| o != v && counts(first + i))
                        .count();
                    old.copy_from_slice(new);
                    moved as u64
                })
                .sum::<u64>();
            at += part.len();
        })?;
        traffic::down(size_of_val(&self.host[..]));
        self.kept = true;
        Ok(changed)
    }

    /// [`Slot::restore`] of a freed slot from `values` (which the host holds anyway).
    pub(crate) fn refill(&mut self, gpu: &CudaBackend, values: &[T], what: &str) -> Result<()> {
        if self.is_freed() {
            traffic::up(size_of_val(values));
            self.dev = Some(gpu.upload_rows(values, &[], what)?);
            self.zeros = false;
        }
        Ok(())
    }

    /// [`Slot::restore_beside`] of a freed slot from `values` (which the host holds anyway).
    pub(crate) fn refill_beside(
        &mut self,
        gpu: &CudaBackend,
        values: &[T],
        what: &str,
    ) -> Result<()> {
        if self.is_freed() {
            traffic::up(size_of_val(values));
            self.dev = Some(gpu.upload_rows_beside(values, &[], what)?);
            self.zeros = false;
        }
        Ok(())
    }

    /// [`Slot::restore`] of kept values on the copy stream, beside the compute stream's work
    /// (order what reads them after it with [`CudaBackend::copies_done`]). The buffer is freed on
    /// the copy stream: park it only once the work that read it is done (a download waits).
    pub(crate) fn restore_beside(&mut self, gpu: &CudaBackend, what: &str) -> Result<()> {
        if self.host().is_some() {
            traffic::up(size_of_val(&self.host[..]));
            self.dev = Some(gpu.upload_rows_beside(&self.host, &[], what)?);
            (self.kept, self.zeros) = (false, false);
        }
        Ok(())
    }
}

/// The device buffer of an optional slot (sample weights: `None` for one unit each).
pub(crate) fn dev_opt<T: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync>(
    slot: &Option<Slot<T>>,
) -> Result<Option<&CudaSlice<T>>> {
    slot.as_ref().map(Slot::dev).transpose()
}

fn parked() -> Error {
    Error::Cuda {
        context: "running a k-means step".into(),
        message: "a buffer was used while its batch was off the GPU".into(),
    }
}
