//! Launchers of `kernels_gpu::radius`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaView};
use kernels_gpu::radius::{KNN_RADIUS_COUNT, KNN_RADIUS_FILL, RADIUS_BLOCK, RADIUS_SHARED_BYTES};

/// `knn_radius_count`: `counts[q] +=` the distances of row `q` (`dist[q · ld ..]`, `cols` of
/// them) that are `≤ radius`, for `q < rows`; a block per row. CPU twin:
/// `backend::cpu::knn::radius` (`CpuKnn::radius_keys`).
pub(crate) struct KnnRadiusCount<'a> {
    pub dist: &'a CudaView<'a, f32>,
    pub ld: u64,
    pub cols: u32,
    pub first_index: u32,
    pub radius: f32,
    pub counts: &'a mut CudaSlice<u32>,
}

impl KnnRadiusCount<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        debug_assert!(self.counts.len() >= rows);
        debug_assert!(rows == 0 || self.dist.len() >= (rows - 1) * self.ld as usize);
        let f = gpu.function(KNN_RADIUS_COUNT.name)?;
        let mut l = gpu.launch_kernel(KNN_RADIUS_COUNT, &f);
        l.arg(self.dist).arg(&self.ld).arg(&self.cols);
        l.arg(&self.first_index).arg(&self.radius).arg(self.counts);
        l.run(rows, RADIUS_BLOCK, RADIUS_SHARED_BYTES)
    }
}

/// `knn_radius_fill`: the keys of row `q`'s distances `≤ radius` (training row `first_index +
/// column`) written from `keys[at[q]]` on, `at[q]` advanced past them, for `q < rows`; a block
/// per row. CPU twin: `backend::cpu::knn::radius` (`CpuKnn::radius_keys`).
pub(crate) struct KnnRadiusFill<'a> {
    pub dist: &'a CudaView<'a, f32>,
    pub ld: u64,
    pub cols: u32,
    pub first_index: u32,
    pub radius: f32,
    pub at: &'a mut CudaSlice<u64>,
    pub keys: &'a mut CudaSlice<u64>,
}

impl KnnRadiusFill<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        debug_assert!(self.at.len() >= rows);
        debug_assert!(rows == 0 || self.dist.len() >= (rows - 1) * self.ld as usize);
        let f = gpu.function(KNN_RADIUS_FILL.name)?;
        let mut l = gpu.launch_kernel(KNN_RADIUS_FILL, &f);
        l.arg(self.dist).arg(&self.ld).arg(&self.cols);
        l.arg(&self.first_index).arg(&self.radius);
        l.arg(self.at).arg(self.keys);
        l.run(rows, RADIUS_BLOCK, RADIUS_SHARED_BYTES)
    }
}
