//! `Auto`'s clock: the GPU's time in a search's kernels, without the host's work around them.

use crate::backend::cuda::{CudaBackend, cuda};
use crate::error::Result;
use cudarc::driver::CudaEvent;
use std::cell::RefCell;

/// CUDA events around each batch's kernels of a search (and of its exact fallbacks): from the
/// batch's queries on the device to its answer ready, before the download. Every path of a
/// shape uploads the same queries and downloads an answer of the same size, so what tells paths
/// apart is this span; the host's part (the answer's split, first-touched pages) varies with
/// the host's stalls, which reach milliseconds in a Python process (CUPTI, 2026-11-28) and,
/// inside the timed span, flipped `Auto`'s choice in 1 of 10 processes.
#[derive(Default)]
pub(super) struct KernelClock {
    spans: RefCell<Vec<(CudaEvent, CudaEvent)>>,
}

impl KernelClock {
    /// Records the end of a span begun with `start` (events of `gpu`'s compute stream).
    pub(super) fn add(&self, start: CudaEvent, gpu: &CudaBackend) -> Result<()> {
        let end = gpu.mark()?;
        self.spans.borrow_mut().push((start, end));
        Ok(())
    }

    /// The spans' total in milliseconds, once the search's work is done.
    pub(super) fn total_ms(&self) -> Result<f64> {
        let spans = self.spans.borrow();
        (spans.iter()).try_fold(0.0, |sum, (start, end)| {
            let ms = (start.elapsed_ms(end)).map_err(|e| cuda("timing with events", e))?;
            Ok(sum + f64::from(ms))
        })
    }
}
