//! Uploads of rows through page-locked memory: two staging buffers, the CPU filling one (on
//! several threads) while the GPU copies from the other. The driver's path for pageable memory
//! stages through a small buffer of its own, one piece at a time: 6.9 GB/s measured on the H100
//! machine, where streamed kNN and k-means upload every row at every pass.

use super::{CudaBackend, cuda};
use crate::error::Result;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, DevicePtrMut, PinnedHostSlice, result};
use rayon::prelude::*;
use std::sync::Arc;

/// Bytes of each staging buffer: one copy's piece.
const PIECE_BYTES: usize = 16 << 20;

/// Values a CPU thread copies at a time while filling a buffer.
const FILL_GRAIN: usize = 1 << 18;

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
    pub(crate) fn write_rows(
        &self,
        host: &[f32],
        dev: &mut CudaSlice<f32>,
        at: usize,
        what: &str,
    ) -> Result<()> {
        if host.is_empty() {
            return Ok(());
        }
        let err = |e| cuda(&format!("copying {what} to the GPU"), e);
        self.ctx.bind_to_thread().map_err(err)?;
        let mut staging = self
            .upload_staging
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if staging.is_none() {
            *staging = Some(UploadStaging::new(&self.ctx)?);
        }
        let staging = staging.as_mut().expect("made above");
        let per_piece = PIECE_BYTES / size_of::<f32>();
        let mut view = dev.slice_mut(at..at + host.len());
        let (dst, _written) = view.device_ptr_mut(&self.stream);
        for (p, piece) in host.chunks(per_piece).enumerate() {
            let slot = p % 2;
            // The copy last queued from this buffer must be done before the CPU refills it (an
            // event never recorded is done).
            staging.copied[slot].synchronize().map_err(err)?;
            let buffer = staging.buffers[slot]
                .as_mut_ptr()
                .map_err(err)?
                .cast::<f32>();
            // SAFETY: the buffer holds PIECE_BYTES page-aligned bytes, room for `piece`, and no
            // copy reads it now (waited for above).
            let staged = unsafe { std::slice::from_raw_parts_mut(buffer, piece.len()) };
            fill(staged, piece);
            let offset = (p * PIECE_BYTES) as u64;
            // SAFETY: source and destination hold `piece.len()` values; the buffer is not
            // written again before `copied[slot]` says this copy is done.
            unsafe { result::memcpy_htod_async(dst + offset, staged, self.stream.cu_stream()) }
                .map_err(err)?;
            staging.copied[slot].record(&self.stream).map_err(err)?;
        }
        Ok(())
    }
}

/// Copies `from` into `to` on the rayon threads: one thread's copy does not keep up with the
/// link.
fn fill(to: &mut [f32], from: &[f32]) {
    (to.par_chunks_mut(FILL_GRAIN))
        .zip(from.par_chunks(FILL_GRAIN))
        .for_each(|(t, f)| t.copy_from_slice(f));
}
