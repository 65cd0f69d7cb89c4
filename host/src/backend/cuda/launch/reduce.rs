//! Launchers of `kernels_gpu::reduce`.

use crate::backend::cuda::{CudaBackend, Mapped};
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::launch::{BLOCK, REDUCE_BLOCK};
use kernels_gpu::reduce::shift_parts_grid;
use kernels_gpu::reduce::{
    KMEANS_SHIFT_PARTS, KMEANS_SUMMARY, SHIFT_PARTS_SHARED_BYTES, SUMMARY_SHARED_BYTES,
};

/// `kmeans_shift_parts`: `Σ (next − current)²` over the `len` coordinates, one f64 part per
/// `SHIFT_PART` of them. CPU twin: [`crate::backend::cpu::partial::squared_shift`].
pub(crate) struct KmeansShiftParts<'a> {
    pub next: &'a CudaSlice<f32>,
    pub current: &'a CudaSlice<f32>,
    pub len: u32,
    pub parts: &'a mut CudaSlice<f64>,
}

impl KmeansShiftParts<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let len = self.len as usize;
        let grid = shift_parts_grid(len);
        debug_assert!(self.next.len() >= len && self.current.len() >= len);
        debug_assert!(self.parts.len() >= grid);
        let f = gpu.function(KMEANS_SHIFT_PARTS.name)?;
        let mut l = gpu.launch_kernel(KMEANS_SHIFT_PARTS, &f);
        l.arg(self.next)
            .arg(self.current)
            .arg(&self.len)
            .arg(self.parts);
        l.run(grid, BLOCK, SHIFT_PARTS_SHARED_BYTES)
    }
}

/// `kmeans_summary`: the step's four numbers `[changed, empty, inertia, shift]`, reduced in one
/// block in a fixed order into mapped host memory; zeroes the counters. CPU twin:
/// [`crate::backend::cpu::kmeans::CpuLloyd::total`].
pub(crate) struct KmeansSummary<'a> {
    pub counters: &'a mut CudaSlice<u32>,
    pub block_inertia: &'a CudaSlice<i64>,
    pub blocks: u32,
    pub shift_parts: &'a CudaSlice<f64>,
    pub parts: u32,
    pub out: &'a Mapped<f64>,
}

impl KmeansSummary<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        debug_assert!(self.counters.len() >= 2 && self.out.len() >= 4);
        debug_assert!(self.block_inertia.len() >= self.blocks as usize);
        debug_assert!(self.shift_parts.len() >= self.parts as usize);
        let f = gpu.function(KMEANS_SUMMARY.name)?;
        let mut l = gpu.launch_kernel(KMEANS_SUMMARY, &f);
        l.arg(self.counters)
            .arg(self.block_inertia)
            .arg(&self.blocks);
        l.arg(self.shift_parts)
            .arg(&self.parts)
            .arg(self.out.device());
        l.run(1, REDUCE_BLOCK, SUMMARY_SHARED_BYTES)
    }
}
