//! Launchers of `kernels_gpu::radius`.

use crate::backend::cuda::{CudaBackend, Launch};
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaView};
use kernels_gpu::knn_tf32::TF32_CAP;
use kernels_gpu::radius::candidates::{
    KNN_RADIUS_TF32_COUNT, KNN_RADIUS_TF32_FILL, RADIUS_TF32_SHARED_BYTES,
};
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

/// Arguments of `knn_radius_tf32_count` and `knn_radius_tf32_fill`: query rows `first_row ..`
/// of the batch (`q`, `q_norms`), their candidates from `knn_tf32_scan` (`counts`, `cand`).
pub(crate) struct RadiusCandidates<'a> {
    pub q: &'a CudaSlice<f32>,
    pub q_norms: &'a CudaSlice<f32>,
    pub x: &'a CudaSlice<f32>,
    pub x_norms: &'a CudaSlice<f32>,
    pub d: u32,
    /// `PairMetric::id` of the metric.
    pub metric_id: u32,
    pub radius: f32,
    pub first_row: u32,
    pub counts: &'a CudaSlice<u32>,
    pub cand: &'a CudaSlice<u32>,
}

impl<'a> RadiusCandidates<'a> {
    /// The parameters both kernels share, first.
    fn push(&'a self, l: &mut Launch<'a>, rows: usize) {
        let end = self.first_row as usize + rows;
        debug_assert!(self.q.len() >= end * self.d as usize && self.q_norms.len() >= end);
        debug_assert!(self.counts.len() >= end && self.cand.len() >= end * TF32_CAP);
        l.arg(self.q)
            .arg(self.q_norms)
            .arg(self.x)
            .arg(self.x_norms);
        l.arg(&self.d).arg(&self.metric_id).arg(&self.radius);
        l.arg(&self.first_row).arg(self.counts).arg(self.cand);
    }
}

/// `knn_radius_tf32_count`: `found[b]` = the number of row `first_row + b`'s candidates within
/// the radius (exact distances), or `OVERFLOW`, for `b < rows`. CPU twin:
/// `backend::cpu::knn::radius` (`CpuKnn::radius_keys`).
pub(crate) struct KnnRadiusTf32Count<'a> {
    pub rows: RadiusCandidates<'a>,
    pub found: &'a mut CudaSlice<u32>,
}

impl KnnRadiusTf32Count<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        debug_assert!(self.found.len() >= rows);
        let f = gpu.function(KNN_RADIUS_TF32_COUNT.name)?;
        let mut l = gpu.launch_kernel(KNN_RADIUS_TF32_COUNT, &f);
        self.rows.push(&mut l, rows);
        l.arg(self.found);
        l.run(rows, RADIUS_BLOCK, RADIUS_TF32_SHARED_BYTES)
    }
}

/// `knn_radius_tf32_fill`: the keys of row `first_row + b`'s candidates within the radius
/// written from `keys[at[b]]` on, for `b < rows`. CPU twin: `backend::cpu::knn::radius`
/// (`CpuKnn::radius_keys`).
pub(crate) struct KnnRadiusTf32Fill<'a> {
    pub rows: RadiusCandidates<'a>,
    pub at: &'a CudaSlice<u64>,
    pub keys: &'a mut CudaSlice<u64>,
}

impl KnnRadiusTf32Fill<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        debug_assert!(self.at.len() >= rows);
        let f = gpu.function(KNN_RADIUS_TF32_FILL.name)?;
        let mut l = gpu.launch_kernel(KNN_RADIUS_TF32_FILL, &f);
        self.rows.push(&mut l, rows);
        l.arg(self.at).arg(self.keys);
        l.run(rows, RADIUS_BLOCK, RADIUS_TF32_SHARED_BYTES)
    }
}
