//! A device buffer that a streamed batch frees between its turns
//! ([`crate::backend::Residency::release_rows`]): its values go to host memory when later turns read
//! them, else only its length is kept and the buffer comes back as zeros. Between turns a batch
//! then holds no device memory at all.

use super::{CudaBackend, alloc_error};
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};

pub(crate) enum Slot<T> {
    /// On the device.
    Device(CudaSlice<T>),
    /// Freed, its values in host memory.
    Host(Vec<T>),
    /// Freed; it comes back as this many zeros.
    Freed(usize),
}

impl<T: DeviceRepr + ValidAsZeroBits + Clone> Slot<T> {
    /// The buffer on the device; an error (a bug, not a crash) while it is freed.
    pub(crate) fn dev(&self) -> Result<&CudaSlice<T>> {
        match self {
            Slot::Device(buf) => Ok(buf),
            _ => Err(parked()),
        }
    }

    pub(crate) fn dev_mut(&mut self) -> Result<&mut CudaSlice<T>> {
        match self {
            Slot::Device(buf) => Ok(buf),
            _ => Err(parked()),
        }
    }

    /// The values kept in host memory while the buffer is freed.
    pub(crate) fn host(&self) -> Option<&[T]> {
        match self {
            Slot::Host(values) => Some(values),
            _ => None,
        }
    }

    /// Frees the device buffer, copying its values to host memory first with `keep` (waits for
    /// the work queued before).
    pub(crate) fn park(&mut self, gpu: &CudaBackend, keep: bool, what: &str) -> Result<()> {
        if let Slot::Device(buf) = self {
            *self = match keep {
                true => Slot::Host(gpu.download(buf, buf.len(), what)?),
                false => Slot::Freed(buf.len()),
            };
        }
        Ok(())
    }

    /// Puts the buffer back on the device: its kept values, or zeros.
    pub(crate) fn restore(&mut self, gpu: &CudaBackend, what: &str) -> Result<()> {
        let buf = match self {
            Slot::Device(_) => return Ok(()),
            Slot::Host(values) => gpu.upload(values, what)?,
            Slot::Freed(len) => gpu.zeros(*len, what)?,
        };
        *self = Slot::Device(buf);
        Ok(())
    }

    /// [`Slot::restore_beside`] of a freed slot from `values` (which the host holds anyway).
    pub(crate) fn refill_beside(
        &mut self,
        gpu: &CudaBackend,
        values: &[T],
        what: &str,
    ) -> Result<()> {
        if let Slot::Freed(_) = self {
            let buf = (gpu.copy_stream()?.clone_htod(values))
                .map_err(|e| alloc_error(what, std::mem::size_of_val(values), e))?;
            *self = Slot::Device(buf);
        }
        Ok(())
    }

    /// [`Slot::restore`] of kept values on the copy stream, beside the compute stream's work
    /// (order what reads them after it with [`CudaBackend::copies_done`]). The buffer is freed on
    /// the copy stream: park it only once the work that read it is done (a download waits).
    pub(crate) fn restore_beside(&mut self, gpu: &CudaBackend, what: &str) -> Result<()> {
        if let Slot::Host(values) = self {
            let buf = (gpu.copy_stream()?.clone_htod(values))
                .map_err(|e| alloc_error(what, std::mem::size_of_val(values.as_slice()), e))?;
            *self = Slot::Device(buf);
        }
        Ok(())
    }
}

/// The device buffer of an optional slot (sample weights: `None` for one unit each).
pub(crate) fn dev_opt<T: DeviceRepr + ValidAsZeroBits + Clone>(
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
