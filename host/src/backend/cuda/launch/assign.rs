//! Launchers of `kernels_gpu::assign` and `kernels_gpu::assign_tf32`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::assign::{ASSIGN_WIDE, AssignTile};
use kernels_gpu::assign::{
    KMEANS_ASSIGN_L1_NARROW, KMEANS_ASSIGN_L1_WIDE, KMEANS_ASSIGN_L2_NARROW, KMEANS_ASSIGN_L2_WIDE,
};
use kernels_gpu::assign_tf32::bound::TF32_CENTROID_TERMS;
use kernels_gpu::assign_tf32::{KMEANS_ASSIGN_L2_TF32, tf32_grid, tf32_shared_bytes};
use kernels_gpu::launch::BLOCK;
use kernels_gpu::math::AssignMetric;

/// `kmeans_assign_{l2,l1}_{wide,narrow}`: every point's nearest centroid and distance, the
/// changed labels and per-block inertia; with `sums` and `counts`, the update's global sums too.
/// CPU twins: [`crate::backend::cpu::kmeans::nearest`] (and its register-tiled form
/// [`crate::backend::cpu::kmeans::tiled::assign_rows`]), [`crate::backend::cpu::kmeans::accumulate`].
pub(crate) struct KmeansAssign<'a> {
    pub x: &'a CudaSlice<f32>,
    pub x_sq_norms: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub centroids: &'a CudaSlice<f32>,
    pub c_sq_norms: &'a CudaSlice<f32>,
    pub k: u32,
    pub labels: &'a mut CudaSlice<u32>,
    pub min_dist: &'a mut CudaSlice<f32>,
    pub changed: &'a mut CudaSlice<u32>,
    pub block_inertia: &'a mut CudaSlice<i64>,
    pub inertia_scale: f32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub scales: &'a CudaSlice<f32>,
    pub sums: Option<&'a mut CudaSlice<i64>>,
    pub counts: Option<&'a mut CudaSlice<u64>>,
    pub centroids_t: &'a CudaSlice<f32>,
    pub k_padded: u32,
}

impl KmeansAssign<'_> {
    /// Launches the kernel of `metric` and `tile` with `shared` bytes of dynamic shared memory
    /// (at least `tile.shared_bytes()`).
    pub(crate) fn launch(
        self,
        gpu: &CudaBackend,
        metric: AssignMetric,
        tile: AssignTile,
        shared: usize,
    ) -> Result<()> {
        let kernel = match (metric, tile == ASSIGN_WIDE) {
            (AssignMetric::SqL2, true) => KMEANS_ASSIGN_L2_WIDE,
            (AssignMetric::SqL2, false) => KMEANS_ASSIGN_L2_NARROW,
            (AssignMetric::L1, true) => KMEANS_ASSIGN_L1_WIDE,
            (AssignMetric::L1, false) => KMEANS_ASSIGN_L1_NARROW,
        };
        let (n, d, k, k_padded) = (
            self.n as usize,
            self.d as usize,
            self.k as usize,
            self.k_padded as usize,
        );
        let grid = tile.grid(n);
        debug_assert!(self.x.len() >= n * d && self.x_sq_norms.len() >= n);
        debug_assert!(self.centroids.len() >= k * d && self.c_sq_norms.len() >= k);
        debug_assert!(self.labels.len() >= n && self.min_dist.len() >= n);
        debug_assert!(self.block_inertia.len() >= grid && shared >= tile.shared_bytes());
        debug_assert!(self.weights.is_none_or(|w| w.len() >= n) && self.scales.len() >= d);
        debug_assert!(self.sums.as_ref().is_none_or(|s| s.len() >= k * d));
        debug_assert!(self.counts.as_ref().is_none_or(|c| c.len() >= k));
        debug_assert!(k_padded >= k && self.centroids_t.len() >= d * k_padded);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x).arg(self.x_sq_norms).arg(&self.n).arg(&self.d);
        l.arg(self.centroids).arg(self.c_sq_norms).arg(&self.k);
        l.arg(self.labels).arg(self.min_dist).arg(self.changed);
        l.arg(self.block_inertia).arg(&self.inertia_scale);
        l.opt(self.weights)
            .arg(self.scales)
            .opt(self.sums)
            .opt(self.counts);
        l.arg(self.centroids_t).arg(&self.k_padded);
        l.run(grid, BLOCK, shared)
    }
}

/// `kmeans_assign_l2_tf32` (sm_80 and later): the squared-L2 assignment of [`KmeansAssign`]
/// through a TF32 tensor-core shortlist re-scored exactly: the same labels and distances. CPU
/// twin: the exact [`crate::backend::cpu::kmeans::nearest`] (the CPU has no TF32 path).
pub(crate) struct KmeansAssignL2Tf32<'a> {
    pub x: &'a CudaSlice<f32>,
    pub x_sq_norms: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub centroids: &'a CudaSlice<f32>,
    pub c_sq_norms: &'a CudaSlice<f32>,
    /// The centroids' error-bound terms ([`Tf32CentroidTerms`]).
    pub c_terms: &'a CudaSlice<f32>,
    pub k: u32,
    pub labels: &'a mut CudaSlice<u32>,
    pub min_dist: &'a mut CudaSlice<f32>,
    pub changed: &'a mut CudaSlice<u32>,
    pub block_inertia: &'a mut CudaSlice<i64>,
    pub inertia_scale: f32,
    pub weights: Option<&'a CudaSlice<f32>>,
}

impl KmeansAssignL2Tf32<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (n, d, k) = (self.n as usize, self.d as usize, self.k as usize);
        let grid = tf32_grid(n);
        debug_assert!(self.x.len() >= n * d && self.x_sq_norms.len() >= n);
        debug_assert!(self.centroids.len() >= k * d && self.c_sq_norms.len() >= k);
        debug_assert!(self.c_terms.len() >= 2 * k);
        debug_assert!(self.labels.len() >= n && self.min_dist.len() >= n);
        debug_assert!(self.block_inertia.len() >= grid);
        debug_assert!(self.weights.is_none_or(|w| w.len() >= n));
        let f = gpu.function(KMEANS_ASSIGN_L2_TF32.name)?;
        let mut l = gpu.launch_kernel(KMEANS_ASSIGN_L2_TF32, &f);
        l.arg(self.x).arg(self.x_sq_norms).arg(&self.n).arg(&self.d);
        l.arg(self.centroids).arg(self.c_sq_norms).arg(self.c_terms);
        l.arg(&self.k);
        l.arg(self.labels).arg(self.min_dist).arg(self.changed);
        l.arg(self.block_inertia)
            .arg(&self.inertia_scale)
            .opt(self.weights);
        l.run(grid, BLOCK, tf32_shared_bytes())
    }
}

/// `tf32_centroid_terms` (sm_80 and later): each centroid's norm and TF32 residual term, the
/// centroid half of `kmeans_assign_l2_tf32`'s error bound (`out`: `k` norms, then `k` terms), a
/// thread per centroid. CPU twin: [`kernels_gpu::assign_tf32::bound::RowTerms::centroid`].
pub(crate) struct Tf32CentroidTerms<'a> {
    pub centroids: &'a CudaSlice<f32>,
    pub k: u32,
    pub d: u32,
    pub out: &'a mut CudaSlice<f32>,
}

impl Tf32CentroidTerms<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (k, d) = (self.k as usize, self.d as usize);
        debug_assert!(self.centroids.len() >= k * d && self.out.len() >= 2 * k);
        let f = gpu.function(TF32_CENTROID_TERMS.name)?;
        let mut l = gpu.launch_kernel(TF32_CENTROID_TERMS, &f);
        l.arg(self.centroids)
            .arg(&self.k)
            .arg(&self.d)
            .arg(self.out);
        l.run(k.div_ceil(BLOCK as usize), BLOCK, 0)
    }
}
