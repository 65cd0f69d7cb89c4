//! Launchers of `kernels_gpu::distance`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::distance::{PAIRWISE_DOT, PAIRWISE_L1};
use kernels_gpu::knn::{DIST_BLOCK, PairMetric, dist_blocks, dist_shared_bytes};
use kernels_gpu::lp::{PAIRWISE_CHEBYSHEV, PAIRWISE_MINKOWSKI};

/// `pairwise_dot` / `pairwise_l1` / `pairwise_chebyshev` / `pairwise_minkowski`: `out[i · ld + j] = dist(a row i, b row b_first + j)` for
/// `i < a_rows`, `j < b_cols`. CPU twin: [`crate::backend::cpu::knn::panel_distances`].
pub(crate) struct Pairwise<'a> {
    pub a: &'a CudaSlice<f32>,
    pub a_norms: &'a CudaSlice<f32>,
    pub a_rows: u32,
    pub b: &'a CudaSlice<f32>,
    pub b_norms: &'a CudaSlice<f32>,
    pub b_first: u32,
    pub b_cols: u32,
    pub d: u32,
    /// Picks the kernel (`pairwise_l1` for L1, the `lp` kernels for Chebyshev and Minkowski)
    /// and is passed as its id (Minkowski: its `p`).
    pub metric: PairMetric,
    pub out: &'a mut CudaSlice<f32>,
    pub ld: u64,
}

impl Pairwise<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (a_rows, b_cols, d) = (self.a_rows as usize, self.b_cols as usize, self.d as usize);
        let b_end = self.b_first as usize + b_cols;
        debug_assert!(self.a.len() >= a_rows * d && self.a_norms.len() >= a_rows);
        debug_assert!(self.b.len() >= b_end * d && self.b_norms.len() >= b_end);
        debug_assert!(b_cols <= self.ld as usize);
        debug_assert!(a_rows == 0 || self.out.len() >= (a_rows - 1) * self.ld as usize + b_cols);
        let shape = (dist_blocks(a_rows, b_cols), DIST_BLOCK, dist_shared_bytes());
        if self.metric.is_lp() {
            return self.launch_lp(gpu, shape);
        }
        let kernel = if self.metric.is_l1() {
            PAIRWISE_L1
        } else {
            PAIRWISE_DOT
        };
        let id = self.metric.id();
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.a).arg(self.a_norms).arg(&self.a_rows);
        l.arg(self.b)
            .arg(self.b_norms)
            .arg(&self.b_first)
            .arg(&self.b_cols);
        l.arg(&self.d).arg(&id).arg(self.out).arg(&self.ld);
        l.run(shape.0, shape.1, shape.2)
    }

    /// `pairwise_chebyshev` / `pairwise_minkowski` (no norms; Minkowski takes `p`).
    fn launch_lp(self, gpu: &CudaBackend, shape: (usize, u32, usize)) -> Result<()> {
        let (kernel, p) = match self.metric {
            PairMetric::Minkowski(p) => (PAIRWISE_MINKOWSKI, Some(p.get())),
            _ => (PAIRWISE_CHEBYSHEV, None),
        };
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.a).arg(&self.a_rows);
        l.arg(self.b).arg(&self.b_first).arg(&self.b_cols);
        l.arg(&self.d);
        if let Some(p) = &p {
            l.arg(p);
        }
        l.arg(self.out).arg(&self.ld);
        l.run(shape.0, shape.1, shape.2)
    }
}
