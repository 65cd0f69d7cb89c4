//! Launcher of `kernels_gpu::centroids`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::centroids::centroids_by_dimension_grid;
use kernels_gpu::centroids::{KMEANS_CENTROIDS_BY_DIMENSION, SHARED_BYTES};
use kernels_gpu::launch::BLOCK;

/// `kmeans_centroids_by_dimension`: `out` (`d × k_padded`) = the `k × d` centroids by dimension, and
/// with `norms` their squared norms. CPU twin: [`crate::backend::cpu::kmeans::CentroidBlocks::new`]
/// (the CPU's own layout: SIMD blocks of centroids).
pub(crate) struct KmeansCentroidsByDimension<'a> {
    pub centroids: &'a CudaSlice<f32>,
    pub k: u32,
    pub d: u32,
    pub k_padded: u32,
    pub out: &'a mut CudaSlice<f32>,
    pub norms: Option<&'a mut CudaSlice<f32>>,
}

impl KmeansCentroidsByDimension<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (k, d, k_padded) = (self.k as usize, self.d as usize, self.k_padded as usize);
        debug_assert!(
            k_padded >= k && self.centroids.len() >= k * d && self.out.len() >= d * k_padded
        );
        debug_assert!(self.norms.as_ref().is_none_or(|n| n.len() >= k));
        let f = gpu.function(KMEANS_CENTROIDS_BY_DIMENSION.name)?;
        let mut l = gpu.launch_kernel(KMEANS_CENTROIDS_BY_DIMENSION, &f);
        l.arg(self.centroids)
            .arg(&self.k)
            .arg(&self.d)
            .arg(&self.k_padded);
        l.arg(self.out).opt(self.norms);
        l.run(centroids_by_dimension_grid(k), BLOCK, SHARED_BYTES)
    }
}
