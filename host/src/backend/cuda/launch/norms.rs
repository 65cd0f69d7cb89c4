//! Launchers of `kernels_gpu::norms`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaStream};
use kernels_gpu::launch::BLOCK;
use kernels_gpu::norms::{ROW_NORM_ROOTS, ROW_SQ_NORMS, row_sq_norms_grid};

/// `row_sq_norms`: `out[i] = ‖row i of x‖²` for the `n × d` matrix `x`, one thread per row.
/// CPU twin: [`crate::backend::cpu::kmeans::row_sq_norms`].
pub(crate) struct RowSqNorms<'a> {
    pub x: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub out: &'a mut CudaSlice<f32>,
}

impl RowSqNorms<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        self.launch_on(gpu, gpu.compute_stream())
    }

    /// The launch queued on `stream` (an index built beside a running search).
    pub(crate) fn launch_on(self, gpu: &CudaBackend, stream: &CudaStream) -> Result<()> {
        let (n, d) = (self.n as usize, self.d as usize);
        debug_assert!(self.x.len() >= n * d && self.out.len() >= n);
        let f = gpu.function(ROW_SQ_NORMS.name)?;
        let mut l = gpu.launch_kernel_on(stream, ROW_SQ_NORMS, &f);
        l.arg(self.x).arg(&self.n).arg(&self.d).arg(self.out);
        l.run(row_sq_norms_grid(n), BLOCK, 0)
    }
}

/// `row_norm_roots`: `out[i] = sqrt(sq_norms[i])`, one thread per value. CPU twin:
/// [`kernels_gpu::math::sqrt`].
pub(crate) struct RowNormRoots<'a> {
    pub sq_norms: &'a CudaSlice<f32>,
    pub n: u32,
    pub out: &'a mut CudaSlice<f32>,
}

impl RowNormRoots<'_> {
    /// The launch queued on `stream`.
    pub(crate) fn launch_on(self, gpu: &CudaBackend, stream: &CudaStream) -> Result<()> {
        let n = self.n as usize;
        debug_assert!(self.sq_norms.len() >= n && self.out.len() >= n);
        let f = gpu.function(ROW_NORM_ROOTS.name)?;
        let mut l = gpu.launch_kernel_on(stream, ROW_NORM_ROOTS, &f);
        l.arg(self.sq_norms).arg(&self.n).arg(self.out);
        l.run(row_sq_norms_grid(n), BLOCK, 0)
    }
}
