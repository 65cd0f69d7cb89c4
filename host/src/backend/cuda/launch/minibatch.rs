//! Launchers of `kernels_gpu::minibatch`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::launch::BLOCK;
use kernels_gpu::math::AssignMetric;
use kernels_gpu::minibatch::{
    KMEANS_MINIBATCH_ASSIGN_L1, KMEANS_MINIBATCH_ASSIGN_L2, KMEANS_MINIBATCH_SHIFT,
    KMEANS_MINIBATCH_UPDATE, UPDATE_THREADS, assign_blocks, assign_shared_bytes,
};
use kernels_gpu::minibatch::{shift_grid, update_grid};

/// `kmeans_minibatch_assign_{l2,l1}`: the batch rows' nearest centroids and distances, their
/// fixed-point sums and counts. CPU twin: [`crate::backend::cpu::minibatch::assign_rows`].
pub(crate) struct KmeansMinibatchAssign<'a> {
    pub x: &'a CudaSlice<f32>,
    pub d: u32,
    pub rows: &'a CudaSlice<u32>,
    pub batch: u32,
    pub centroids_t: &'a CudaSlice<f32>,
    pub k_padded: u32,
    pub c_sq_norms: &'a CudaSlice<f32>,
    pub k: u32,
    pub scales: &'a CudaSlice<f32>,
    pub sums: &'a mut CudaSlice<i64>,
    pub counts: &'a mut CudaSlice<u32>,
    pub distances: &'a mut CudaSlice<f32>,
}

impl KmeansMinibatchAssign<'_> {
    /// Launches the kernel of `metric`.
    pub(crate) fn launch(self, gpu: &CudaBackend, metric: AssignMetric) -> Result<()> {
        let kernel = match metric {
            AssignMetric::SqL2 => KMEANS_MINIBATCH_ASSIGN_L2,
            AssignMetric::L1 => KMEANS_MINIBATCH_ASSIGN_L1,
        };
        let (d, batch, k, k_padded) = (
            self.d as usize,
            self.batch as usize,
            self.k as usize,
            self.k_padded as usize,
        );
        debug_assert!(self.rows.len() >= batch && self.distances.len() >= batch);
        debug_assert!(
            k_padded >= k && self.centroids_t.len() >= d * k_padded && self.c_sq_norms.len() >= k
        );
        debug_assert!(self.scales.len() >= d && self.sums.len() >= k * d && self.counts.len() >= k);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x).arg(&self.d).arg(self.rows).arg(&self.batch);
        l.arg(self.centroids_t)
            .arg(&self.k_padded)
            .arg(self.c_sq_norms)
            .arg(&self.k);
        l.arg(self.scales)
            .arg(self.sums)
            .arg(self.counts)
            .arg(self.distances);
        let threads = BLOCK as usize;
        l.run(assign_blocks(batch), BLOCK, assign_shared_bytes(threads))
    }
}

/// `kmeans_minibatch_update`: moves every centroid that got batch rows to the mean of all rows
/// it has received, one block per centroid; clears the batch sums. CPU twin:
/// [`crate::backend::cpu::minibatch::update_row`].
pub(crate) struct KmeansMinibatchUpdate<'a> {
    pub current: &'a CudaSlice<f32>,
    pub next: &'a mut CudaSlice<f32>,
    pub d: u32,
    pub sums: &'a mut CudaSlice<i64>,
    pub batch_counts: &'a mut CudaSlice<u32>,
    pub counts: &'a mut CudaSlice<u64>,
    pub inv_scales: &'a CudaSlice<f64>,
    pub report: &'a mut CudaSlice<u32>,
}

impl KmeansMinibatchUpdate<'_> {
    /// Launches one block for each of the `k` centroids.
    pub(crate) fn launch(self, gpu: &CudaBackend, k: usize) -> Result<()> {
        let d = self.d as usize;
        debug_assert!(self.current.len() >= k * d && self.next.len() >= k * d);
        debug_assert!(self.sums.len() >= k * d && self.batch_counts.len() >= k);
        debug_assert!(self.counts.len() >= k && self.report.len() >= k);
        debug_assert!(self.inv_scales.len() >= d);
        let f = gpu.function(KMEANS_MINIBATCH_UPDATE.name)?;
        let mut l = gpu.launch_kernel(KMEANS_MINIBATCH_UPDATE, &f);
        l.arg(self.current)
            .arg(self.next)
            .arg(&self.d)
            .arg(self.sums);
        l.arg(self.batch_counts)
            .arg(self.counts)
            .arg(self.inv_scales);
        l.arg(self.report);
        l.run(update_grid(k), UPDATE_THREADS, 0)
    }
}

/// `kmeans_minibatch_shift`: every centroid's squared shift `‖next − current‖²`. CPU twin:
/// `shifts` of [`crate::backend::cpu::minibatch::CpuMiniBatch`].
pub(crate) struct KmeansMinibatchShift<'a> {
    pub next: &'a CudaSlice<f32>,
    pub current: &'a CudaSlice<f32>,
    pub k: u32,
    pub d: u32,
    pub out: &'a mut CudaSlice<f64>,
}

impl KmeansMinibatchShift<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (k, d) = (self.k as usize, self.d as usize);
        debug_assert!(self.next.len() >= k * d && self.current.len() >= k * d);
        debug_assert!(self.out.len() >= k);
        let f = gpu.function(KMEANS_MINIBATCH_SHIFT.name)?;
        let mut l = gpu.launch_kernel(KMEANS_MINIBATCH_SHIFT, &f);
        l.arg(self.next)
            .arg(self.current)
            .arg(&self.k)
            .arg(&self.d)
            .arg(self.out);
        l.run(shift_grid(k), BLOCK, 0)
    }
}
