//! Launcher of `kernels_gpu::norms`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::launch::BLOCK;
use kernels_gpu::norms::ROW_SQ_NORMS;
use kernels_gpu::norms::row_sq_norms_grid;

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
        let (n, d) = (self.n as usize, self.d as usize);
        debug_assert!(self.x.len() >= n * d && self.out.len() >= n);
        let f = gpu.function(ROW_SQ_NORMS.name)?;
        let mut l = gpu.launch_kernel(ROW_SQ_NORMS, &f);
        l.arg(self.x).arg(&self.n).arg(&self.d).arg(self.out);
        l.run(row_sq_norms_grid(n), BLOCK, 0)
    }
}
