//! Launchers of `kernels_gpu::update`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaViewMut};
use kernels_gpu::launch::BLOCK;
use kernels_gpu::update::{
    FINALIZE_SHARED_BYTES, KMEANS_ACCUMULATE_GLOBAL, KMEANS_ACCUMULATE_SHARED, KMEANS_FINALIZE,
    KMEANS_NORMALIZE_ROWS, accumulate_shared_bytes,
};
use kernels_gpu::update::{accumulate_global_grid, finalize_grid, normalize_rows_grid};

/// `kmeans_accumulate_shared`: per-block fixed-point sums and weights of the labelled points,
/// one part per block, in shared memory. CPU twin: [`crate::backend::cpu::kmeans::accumulate`].
pub(crate) struct KmeansAccumulateShared<'a> {
    pub x: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub labels: &'a CudaSlice<u32>,
    pub k: u32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub scales: &'a CudaSlice<f32>,
    pub part_sums: &'a mut CudaSlice<i64>,
    pub part_counts: &'a mut CudaSlice<u64>,
}

impl KmeansAccumulateShared<'_> {
    /// Launches `parts` blocks, one part of the sums each.
    pub(crate) fn launch(self, gpu: &CudaBackend, parts: usize) -> Result<()> {
        let (n, d, k) = (self.n as usize, self.d as usize, self.k as usize);
        debug_assert!(self.x.len() >= n * d && self.labels.len() >= n);
        debug_assert!(self.weights.is_none_or(|w| w.len() >= n) && self.scales.len() >= d);
        debug_assert!(self.part_sums.len() >= parts * k * d);
        debug_assert!(self.part_counts.len() >= parts * k);
        let f = gpu.function(KMEANS_ACCUMULATE_SHARED.name)?;
        let mut l = gpu.launch_kernel(KMEANS_ACCUMULATE_SHARED, &f);
        l.arg(self.x)
            .arg(&self.n)
            .arg(&self.d)
            .arg(self.labels)
            .arg(&self.k);
        l.opt(self.weights).arg(self.scales);
        l.arg(self.part_sums).arg(self.part_counts);
        l.run(parts, BLOCK, accumulate_shared_bytes(k, d))
    }
}

/// `kmeans_accumulate_global`: the fixed-point sums and weights of the labelled points, by
/// atomics on one global set. CPU twin: [`crate::backend::cpu::kmeans::accumulate`].
pub(crate) struct KmeansAccumulateGlobal<'a> {
    pub x: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub labels: &'a CudaSlice<u32>,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub scales: &'a CudaSlice<f32>,
    pub sums: &'a mut CudaSlice<i64>,
    pub counts: &'a mut CudaSlice<u64>,
}

impl KmeansAccumulateGlobal<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (n, d) = (self.n as usize, self.d as usize);
        debug_assert!(self.x.len() >= n * d && self.labels.len() >= n);
        debug_assert!(self.weights.is_none_or(|w| w.len() >= n) && self.scales.len() >= d);
        let f = gpu.function(KMEANS_ACCUMULATE_GLOBAL.name)?;
        let mut l = gpu.launch_kernel(KMEANS_ACCUMULATE_GLOBAL, &f);
        l.arg(self.x).arg(&self.n).arg(&self.d).arg(self.labels);
        l.opt(self.weights)
            .arg(self.scales)
            .arg(self.sums)
            .arg(self.counts);
        l.run(
            accumulate_global_grid(n, d, gpu.multiprocessors()),
            BLOCK,
            0,
        )
    }
}

/// `kmeans_finalize`: adds the `parts` partial sums in a fixed order and writes the means to
/// `new_centroids` (a cluster without weight keeps its old centroid and counts in `empty`).
/// CPU twin: [`crate::backend::cpu::partial::Partial::finish`].
pub(crate) struct KmeansFinalize<'a, 'v> {
    pub part_sums: &'a CudaSlice<i64>,
    pub part_counts: &'a CudaSlice<u64>,
    pub parts: u32,
    pub k: u32,
    pub d: u32,
    pub inv_scales: &'a CudaSlice<f64>,
    pub old_centroids: &'a CudaSlice<f32>,
    pub new_centroids: &'a mut CudaSlice<f32>,
    pub sizes: &'a mut CudaSlice<u64>,
    pub empty: &'a mut CudaViewMut<'v, u32>,
}

impl KmeansFinalize<'_, '_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (parts, k, d) = (self.parts as usize, self.k as usize, self.d as usize);
        debug_assert!(self.part_sums.len() >= parts * k * d);
        debug_assert!(self.part_counts.len() >= parts * k && self.inv_scales.len() >= d);
        debug_assert!(self.old_centroids.len() >= k * d && self.new_centroids.len() >= k * d);
        debug_assert!(self.sizes.len() >= k && !self.empty.is_empty());
        let f = gpu.function(KMEANS_FINALIZE.name)?;
        let mut l = gpu.launch_kernel(KMEANS_FINALIZE, &f);
        l.arg(self.part_sums).arg(self.part_counts);
        l.arg(&self.parts)
            .arg(&self.k)
            .arg(&self.d)
            .arg(self.inv_scales);
        l.arg(self.old_centroids).arg(self.new_centroids);
        l.arg(self.sizes).arg(self.empty);
        let grid = finalize_grid(k, d, parts, gpu.multiprocessors());
        l.run(grid, BLOCK, FINALIZE_SHARED_BYTES)
    }
}

/// `kmeans_normalize_rows`: scales every centroid with weight to unit norm (spherical k-means).
/// CPU twin: [`kernels_gpu::math::normalize`], called by
/// [`crate::backend::cpu::partial::Partial::finish`].
pub(crate) struct KmeansNormalizeRows<'a> {
    pub centroids: &'a mut CudaSlice<f32>,
    pub sizes: &'a CudaSlice<u64>,
    pub k: u32,
    pub d: u32,
}

impl KmeansNormalizeRows<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (k, d) = (self.k as usize, self.d as usize);
        debug_assert!(self.centroids.len() >= k * d && self.sizes.len() >= k);
        let f = gpu.function(KMEANS_NORMALIZE_ROWS.name)?;
        let mut l = gpu.launch_kernel(KMEANS_NORMALIZE_ROWS, &f);
        l.arg(self.centroids)
            .arg(self.sizes)
            .arg(&self.k)
            .arg(&self.d);
        l.run(normalize_rows_grid(k), BLOCK, 0)
    }
}
