//! Launchers of `kernels_gpu::small`.

use crate::backend::cuda::{CudaBackend, Mapped};
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::launch::{BLOCK, REDUCE_BLOCK};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::small::SMALL_STEPS;
use kernels_gpu::small::{
    FINALIZE_SHARED_BYTES, KMEANS_FINALIZE_SMALL, SMALL_L1_KERNELS, SMALL_L2_KERNELS,
};

/// `kmeans_small_{l2,l1}_{0..3}`: one fused small Lloyd step (assign and/or accumulate, by
/// `mode`) with the centroids in shared memory. CPU twins: the assign of
/// [`crate::backend::cpu::kmeans::nearest`] and the sums of
/// [`crate::backend::cpu::kmeans::accumulate`].
pub(crate) struct KmeansSmall<'a> {
    pub x: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub centroids: &'a CudaSlice<f32>,
    pub k: u32,
    pub labels: &'a mut CudaSlice<u32>,
    pub min_dist: &'a mut CudaSlice<f32>,
    pub changed: &'a mut CudaSlice<u32>,
    pub block_inertia: &'a mut CudaSlice<i64>,
    pub inertia_scale: f32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub scales: &'a CudaSlice<f32>,
    pub sums: &'a mut CudaSlice<i64>,
    pub counts: &'a mut CudaSlice<u64>,
    pub mode: u32,
}

impl KmeansSmall<'_> {
    /// Launches the kernel of `metric` and shape `SMALL_STEPS[shape]`.
    pub(crate) fn launch(
        self,
        gpu: &CudaBackend,
        metric: AssignMetric,
        shape: usize,
    ) -> Result<()> {
        let kernel = match metric {
            AssignMetric::SqL2 => SMALL_L2_KERNELS[shape],
            AssignMetric::L1 => SMALL_L1_KERNELS[shape],
        };
        let step = SMALL_STEPS[shape];
        let (n, d, k) = (self.n as usize, self.d as usize, self.k as usize);
        let grid = step.grid(n);
        debug_assert!(d <= step.max_d && self.x.len() >= n * d && self.centroids.len() >= k * d);
        debug_assert!(self.labels.len() >= n && self.min_dist.len() >= n);
        debug_assert!(self.block_inertia.len() >= grid);
        debug_assert!(self.weights.is_none_or(|w| w.len() >= n) && self.scales.len() >= d);
        debug_assert!(self.sums.len() >= k * d && self.counts.len() >= k);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x)
            .arg(&self.n)
            .arg(&self.d)
            .arg(self.centroids)
            .arg(&self.k);
        l.arg(self.labels).arg(self.min_dist).arg(self.changed);
        l.arg(self.block_inertia).arg(&self.inertia_scale);
        l.opt(self.weights)
            .arg(self.scales)
            .arg(self.sums)
            .arg(self.counts);
        l.arg(&self.mode);
        l.run(grid, BLOCK, step.layout(k, d).bytes)
    }
}

/// `kmeans_finalize_small`: the small step's means, sizes and four summary numbers in one block;
/// zeroes the sums and counts for the next step. CPU twins:
/// [`crate::backend::cpu::partial::Partial::finish`] and
/// [`crate::backend::cpu::kmeans::CpuLloyd::total`].
pub(crate) struct KmeansFinalizeSmall<'a> {
    pub sums: &'a mut CudaSlice<i64>,
    pub counts: &'a mut CudaSlice<u64>,
    pub k: u32,
    pub d: u32,
    pub inv_scales: &'a CudaSlice<f64>,
    pub current: &'a CudaSlice<f32>,
    pub next: &'a mut CudaSlice<f32>,
    pub sizes: &'a mut CudaSlice<u64>,
    pub changed: &'a mut CudaSlice<u32>,
    pub block_inertia: &'a CudaSlice<i64>,
    pub blocks: u32,
    pub out: &'a Mapped<f64>,
}

impl KmeansFinalizeSmall<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (k, d) = (self.k as usize, self.d as usize);
        debug_assert!(self.sums.len() >= k * d && self.counts.len() >= k);
        debug_assert!(self.inv_scales.len() >= d && self.sizes.len() >= k);
        debug_assert!(self.current.len() >= k * d && self.next.len() >= k * d);
        debug_assert!(self.block_inertia.len() >= self.blocks as usize && self.out.len() >= 4);
        let f = gpu.function(KMEANS_FINALIZE_SMALL.name)?;
        let mut l = gpu.launch_kernel(KMEANS_FINALIZE_SMALL, &f);
        l.arg(self.sums).arg(self.counts).arg(&self.k).arg(&self.d);
        l.arg(self.inv_scales)
            .arg(self.current)
            .arg(self.next)
            .arg(self.sizes);
        l.arg(self.changed)
            .arg(self.block_inertia)
            .arg(&self.blocks);
        l.arg(self.out.device());
        l.run(1, REDUCE_BLOCK, FINALIZE_SHARED_BYTES)
    }
}
