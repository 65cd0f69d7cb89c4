//! Uploads of rows through page-locked memory: two staging buffers, the CPU filling one (on
//! several threads) while the GPU copies from the other. The driver's path for pageable memory
//! stages through a small buffer of its own, one piece at a time: 6.9 GB/s measured on the H100
//! machine, where streamed kNN and k-means upload every row at every pass.

use super::shelf::Shelf;
use super::{CudaBackend, cuda};
use crate::error::Result;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, PinnedHostSlice,
    result,
};
use rayon::prelude::*;
use std::sync::Arc;

/// Bytes of each staging buffer: one copy's piece.
const PIECE_BYTES: usize = 16 << 20;

/// Values a CPU thread copies at a time while filling a buffer.
const FILL_GRAIN: usize = 1 << 18;

/// Uploads up to this size skip the staging buffers: filling one first costs more than the
/// driver's own path saves (1.2 MB of queries on the H100 machine: 108 µs pageable, against
/// 87 µs to fill page-locked memory plus 33 µs to copy it; from 4.9 MB on, staging wins).
/// Filling in 64 KiB grains on all threads was slower still: a search's first kernel started
/// ~250 µs later (session 15).
const DIRECT_BYTES: usize = 2 << 20;

/// The two buffers and, for each, the end of the last copy queued from it.
pub(super) struct UploadStaging {
    buffers: [PinnedHostSlice<u8>; 2],
    copied: [CudaEvent; 2],
}

impl UploadStaging {
    fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let err = |e| cuda("allocating page-locked memory for uploads", e);
        super::injected_oom("the upload staging buffers", 2 * PIECE_BYTES)?;
        // SAFETY: flags 0 (cached, for the CPU to write); every byte a copy reads is written
        // first (`CudaBackend::write_rows`).
        let buffer = || unsafe { ctx.alloc_pinned_with_flags::<u8>(PIECE_BYTES, 0) }.map_err(err);
        let event = || ctx.new_event(None).map_err(err);
        Ok(UploadStaging {
            buffers: [buffer()?, buffer()?],
            copied: [event()?, event()?],
        })
    }
}

impl CudaBackend {
    /// Queues the copy of `host` into `dev[at..at + host.len()]` through the staging buffers;
    /// `host` may change once this returns (its values are in page-locked memory or copied).
    pub(crate) fn write_rows<T: DeviceRepr + Copy + Send + Sync>(
        &self,
        host: &[T],
        dev: &mut CudaSlice<T>,
        at: usize,
        what: &str,
    ) -> Result<()> {
        self.write_rows_on(&self.stream, &self.upload_staging, host, dev, at, what)
    }

    /// Makes the compute stream's staging buffers ahead of an upload of `bytes` that will go
    /// through them (allocating page-locked memory takes milliseconds).
    pub(crate) fn reserve_upload(&self, bytes: usize) -> Result<()> {
        if bytes <= DIRECT_BYTES {
            return Ok(());
        }
        self.upload_staging.lend(|old| self.ready(old)).map(drop)
    }

    /// `host` (through the staging buffers) then `tail` in new device memory, queued on the
    /// compute stream.
    pub(crate) fn upload_rows<T: DeviceRepr + Copy + Send + Sync>(
        &self,
        host: &[T],
        tail: &[T],
        what: &str,
    ) -> Result<CudaSlice<T>> {
        self.upload_on(&self.stream, &self.upload_staging, host, tail, what)
    }

    /// [`CudaBackend::upload_rows`] on the copy stream, beside whatever the compute stream runs
    /// meanwhile; with the event that marks the copies done, which work on the compute stream
    /// must wait for ([`CudaBackend::wait_for`]). The memory's frees go on the copy stream: free
    /// it only once the work that read it is done.
    pub(crate) fn upload_beside<T: DeviceRepr + Copy + Send + Sync>(
        &self,
        host: &[T],
        tail: &[T],
        what: &str,
    ) -> Result<(CudaSlice<T>, CudaEvent)> {
        let dev = self.upload_rows_beside(host, tail, what)?;
        Ok((dev, self.copies_done(what)?))
    }

    /// [`CudaBackend::upload_rows`] on the copy stream, through its own staging buffers; order
    /// later work after it with [`CudaBackend::copies_done`].
    pub(crate) fn upload_rows_beside<T: DeviceRepr + Copy + Send + Sync>(
        &self,
        host: &[T],
        tail: &[T],
        what: &str,
    ) -> Result<CudaSlice<T>> {
        self.upload_on(self.copy_stream()?, &self.copy_staging, host, tail, what)
    }

    /// An event that marks the end of the work queued on the copy stream so far (`what` names
    /// that work in errors).
    pub(crate) fn copies_done(&self, what: &str) -> Result<CudaEvent> {
        let err = |e| cuda(&format!("copying {what} to the GPU"), e);
        let done = self.ctx.new_event(None).map_err(err)?;
        done.record(self.copy_stream()?).map_err(err)?;
        Ok(done)
    }

    fn upload_on<T: DeviceRepr + Copy + Send + Sync>(
        &self,
        stream: &Arc<CudaStream>,
        staging: &Shelf<UploadStaging>,
        host: &[T],
        tail: &[T],
        what: &str,
    ) -> Result<CudaSlice<T>> {
        let len = host.len() + tail.len();
        // SAFETY: both parts are written below, on `stream`, before anything reads them.
        let mut dev = unsafe { self.uninit_on(stream, len, what)? };
        self.write_rows_on(stream, staging, host, &mut dev, 0, what)?;
        if !tail.is_empty() {
            stream
                .memcpy_htod(tail, &mut dev.slice_mut(host.len()..len))
                .map_err(|e| cuda(&format!("copying {what} to the GPU"), e))?;
        }
        Ok(dev)
    }

    /// `staging`, or new buffers where there is none.
    fn ready(&self, staging: Option<UploadStaging>) -> Result<UploadStaging> {
        staging.map_or_else(|| UploadStaging::new(&self.ctx), Ok)
    }

    /// Makes the compute stream's later work wait for `event`.
    pub(crate) fn wait_for(&self, event: &CudaEvent) -> Result<()> {
        self.stream
            .wait(event)
            .map_err(|e| cuda("ordering work after an upload", e))
    }

    /// Queues the copy of `host` into `dev[at..]` on `stream` through `staging`'s buffers.
    fn write_rows_on<T: DeviceRepr + Copy + Send + Sync>(
        &self,
        stream: &CudaStream,
        staging: &Shelf<UploadStaging>,
        host: &[T],
        dev: &mut CudaSlice<T>,
        at: usize,
        what: &str,
    ) -> Result<()> {
        if host.is_empty() {
            return Ok(());
        }
        let err = |e| cuda(&format!("copying {what} to the GPU"), e);
        self.ctx.bind_to_thread().map_err(err)?;
        if size_of_val(host) <= DIRECT_BYTES {
            let mut view = dev.slice_mut(at..at + host.len());
            let (dst, _written) = view.device_ptr_mut(stream);
            // SAFETY: `dst` holds `host.len()` values; from pageable memory the driver has read
            // `host` before the call returns.
            return unsafe { result::memcpy_htod_async(dst, host, stream.cu_stream()) }
                .map_err(err);
        }
        let mut staging = staging.lend(|old| self.ready(old))?;
        let per_piece = PIECE_BYTES / size_of::<T>();
        let mut view = dev.slice_mut(at..at + host.len());
        let (dst, _written) = view.device_ptr_mut(stream);
        for (p, piece) in host.chunks(per_piece).enumerate() {
            let slot = p % 2;
            // The copy last queued from this buffer must be done before the CPU refills it (an
            // event never recorded is done).
            staging.copied[slot].synchronize().map_err(err)?;
            let buffer = staging.buffers[slot].as_mut_ptr().map_err(err)?.cast::<T>();
            // SAFETY: the buffer holds PIECE_BYTES page-aligned bytes, room for `piece`, and no
            // copy reads it now (waited for above).
            let staged = unsafe { std::slice::from_raw_parts_mut(buffer, piece.len()) };
            fill(staged, piece);
            let offset = (p * PIECE_BYTES) as u64;
            // SAFETY: source and destination hold `piece.len()` values; the buffer is not
            // written again before `copied[slot]` says this copy is done.
            unsafe { result::memcpy_htod_async(dst + offset, staged, stream.cu_stream()) }
                .map_err(err)?;
            staging.copied[slot].record(stream).map_err(err)?;
        }
        Ok(())
    }
}

/// Copies `from` into `to` on the rayon threads: one thread's copy does not keep up with the
/// link.
pub(super) fn fill<T: Copy + Send + Sync>(to: &mut [T], from: &[T]) {
    (to.par_chunks_mut(FILL_GRAIN))
        .zip(from.par_chunks(FILL_GRAIN))
        .for_each(|(t, f)| t.copy_from_slice(f));
}
