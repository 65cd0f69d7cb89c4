//! Launchers of `kernels_gpu::knn_tf32`, the TF32 prefilter of exact kNN search. The CPU has no
//! prefilter: the twin of all four is the exact search, [`crate::backend::cpu::knn::CpuKnn::nearest`], whose answer the prefilter must give.

use crate::backend::cuda::{CudaBackend, Mapped};
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::knn::{PairMetric, SELECT_BLOCK};
use kernels_gpu::knn_tf32::candidates::{
    CANDIDATE_BLOCK, CANDIDATE_SHARED_BYTES, KNN_TF32_CANDIDATES, candidates_grid,
};
use kernels_gpu::knn_tf32::tf32_scan_grid;
use kernels_gpu::knn_tf32::{
    KNN_TF32_RERANK, KNN_TF32_SCAN, KNN_TF32_SCAN_WG, KNN_TF32_THRESHOLD, RERANK_SHARED_BYTES,
    TF32_BLOCK, TF32_CAP, THRESHOLD_SHARED_BYTES, tf32_scan_shared_bytes, wg_scan_shared_bytes,
};

/// `knn_tf32_threshold`: every query row's `k` group keys → the same rows' exact keys, the
/// largest exact distance → the squared threshold `t_sq`; clears the candidate counts.
pub(crate) struct KnnTf32Threshold<'a> {
    pub q: &'a CudaSlice<f32>,
    pub q_norms: &'a CudaSlice<f32>,
    pub x: &'a CudaSlice<f32>,
    pub x_norms: &'a CudaSlice<f32>,
    pub d: u32,
    /// Passed as its id.
    pub metric: PairMetric,
    pub k: u32,
    pub best: &'a mut CudaSlice<u64>,
    pub t_sq: &'a mut CudaSlice<f32>,
    pub counts: &'a mut CudaSlice<u32>,
}

impl KnnTf32Threshold<'_> {
    /// Launches one block for each of the `rows` query rows.
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        let (d, k) = (self.d as usize, self.k as usize);
        debug_assert!(self.q.len() >= rows * d && self.q_norms.len() >= rows);
        debug_assert!(self.best.len() >= rows * k);
        debug_assert!(self.t_sq.len() >= rows && self.counts.len() >= rows);
        let id = self.metric.id();
        let f = gpu.function(KNN_TF32_THRESHOLD.name)?;
        let mut l = gpu.launch_kernel(KNN_TF32_THRESHOLD, &f);
        l.arg(self.q)
            .arg(self.q_norms)
            .arg(self.x)
            .arg(self.x_norms);
        l.arg(&self.d).arg(&id).arg(&self.k).arg(self.best);
        l.arg(self.t_sq).arg(self.counts);
        l.run(rows, SELECT_BLOCK, THRESHOLD_SHARED_BYTES)
    }
}

/// `knn_tf32_rerank`: the exact distances of every query row's candidates that the threshold
/// step did not compute, merged with its `k` exact keys (selected by `method`, a
/// `kernels_gpu::select` method); flags the rows whose candidates overflowed.
pub(crate) struct KnnTf32Rerank<'a> {
    pub q: &'a CudaSlice<f32>,
    pub q_norms: &'a CudaSlice<f32>,
    pub x: &'a CudaSlice<f32>,
    pub x_norms: &'a CudaSlice<f32>,
    pub d: u32,
    /// Passed as its id.
    pub metric: PairMetric,
    pub k: u32,
    pub best: &'a mut CudaSlice<u64>,
    pub counts: &'a mut CudaSlice<u32>,
    pub cand: &'a CudaSlice<u32>,
    pub overflow: &'a Mapped<u32>,
    pub method: u32,
}

impl KnnTf32Rerank<'_> {
    /// Launches one block for each of the `rows` query rows.
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        let (d, k) = (self.d as usize, self.k as usize);
        debug_assert!(self.q.len() >= rows * d && self.q_norms.len() >= rows);
        debug_assert!(self.best.len() >= rows * k && self.counts.len() >= rows);
        debug_assert!(self.cand.len() >= rows * TF32_CAP && self.overflow.len() >= rows);
        let id = self.metric.id();
        let f = gpu.function(KNN_TF32_RERANK.name)?;
        let mut l = gpu.launch_kernel(KNN_TF32_RERANK, &f);
        l.arg(self.q)
            .arg(self.q_norms)
            .arg(self.x)
            .arg(self.x_norms);
        l.arg(&self.d).arg(&id).arg(&self.k).arg(self.best);
        l.arg(self.counts)
            .arg(self.cand)
            .arg(self.overflow.device())
            .arg(&self.method);
        l.run(rows, SELECT_BLOCK, RERANK_SHARED_BYTES)
    }
}

/// `knn_tf32_scan` (sm_80 and later): the tensor-core pass over `m` queries × `n` training rows,
/// `tiles` training tiles per block. `mode` `SCAN_GROUPS` writes every group's minimum key to
/// `gkeys` (row stride `ldg`), and with `approx` (row stride `lda`) every approximation for
/// [`KnnTf32Candidates`]; `SCAN_CANDIDATES` appends the rows that may be nearer than
/// `t_sq` to `cand` and counts them.
pub(crate) struct KnnTf32Scan<'a> {
    pub q: &'a CudaSlice<f32>,
    pub q_norms: &'a CudaSlice<f32>,
    pub m: u32,
    pub x: &'a CudaSlice<f32>,
    pub x_norms: &'a CudaSlice<f32>,
    pub x_roots: &'a CudaSlice<f32>,
    pub n: u32,
    pub d: u32,
    pub xc: u32,
    pub tiles: u32,
    pub mode: u32,
    pub group: u32,
    pub gkeys: &'a mut CudaSlice<u64>,
    pub ldg: u64,
    pub approx: Option<&'a mut CudaSlice<f32>>,
    pub lda: u64,
    pub t_sq: &'a CudaSlice<f32>,
    pub counts: &'a mut CudaSlice<u32>,
    pub cand: &'a mut CudaSlice<u32>,
    pub c1: f32,
    /// Hopper's `knn_tf32_scan_wg` (warpgroup `mma`; `d % 4 == 0`) instead of `knn_tf32_scan`.
    pub wgmma: bool,
}

impl KnnTf32Scan<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (m, n, d) = (self.m as usize, self.n as usize, self.d as usize);
        let tiles = self.tiles as usize;
        debug_assert!(self.q.len() >= m * d && self.q_norms.len() >= m);
        debug_assert!(self.x.len() >= n * d && self.x_norms.len() >= n);
        debug_assert!(self.gkeys.len() >= m * self.ldg as usize && self.t_sq.len() >= m);
        debug_assert!(self.counts.len() >= m && self.cand.len() >= m * TF32_CAP);
        debug_assert!(
            self.approx
                .as_ref()
                .is_none_or(|a| a.len() >= m * self.lda as usize)
        );
        let (kernel, shared) = match self.wgmma {
            true => (KNN_TF32_SCAN_WG, wg_scan_shared_bytes(self.xc as usize)),
            false => (KNN_TF32_SCAN, tf32_scan_shared_bytes(self.xc as usize)),
        };
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.q).arg(self.q_norms).arg(&self.m);
        l.arg(self.x)
            .arg(self.x_norms)
            .arg(self.x_roots)
            .arg(&self.n)
            .arg(&self.d);
        l.arg(&self.xc)
            .arg(&self.tiles)
            .arg(&self.mode)
            .arg(&self.group);
        l.arg(self.gkeys).arg(&self.ldg);
        l.opt(self.approx).arg(&self.lda).arg(self.t_sq);
        l.arg(self.counts).arg(self.cand).arg(&self.c1);
        let grid = tf32_scan_grid(m, n, tiles);
        l.run(grid, TF32_BLOCK, shared)
    }
}

/// `knn_tf32_candidates`: step 4 from the approximations the first scan stored (`rows × lda`):
/// appends the training rows that may be nearer than `t_sq` to `cand` and counts them.
pub(crate) struct KnnTf32Candidates<'a> {
    pub approx: &'a CudaSlice<f32>,
    pub lda: u64,
    pub rows: u32,
    pub n: u32,
    pub q_norms: &'a CudaSlice<f32>,
    pub x_norms: &'a CudaSlice<f32>,
    pub x_roots: &'a CudaSlice<f32>,
    pub t_sq: &'a CudaSlice<f32>,
    pub c1: f32,
    pub counts: &'a mut CudaSlice<u32>,
    pub cand: &'a mut CudaSlice<u32>,
}

impl KnnTf32Candidates<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (rows, n) = (self.rows as usize, self.n as usize);
        debug_assert!(self.approx.len() >= rows * self.lda as usize && self.lda as usize >= n);
        debug_assert!(self.q_norms.len() >= rows && self.t_sq.len() >= rows);
        debug_assert!(self.x_norms.len() >= n && self.x_roots.len() >= n);
        debug_assert!(self.counts.len() >= rows && self.cand.len() >= rows * TF32_CAP);
        let f = gpu.function(KNN_TF32_CANDIDATES.name)?;
        let mut l = gpu.launch_kernel(KNN_TF32_CANDIDATES, &f);
        l.arg(self.approx)
            .arg(&self.lda)
            .arg(&self.rows)
            .arg(&self.n);
        l.arg(self.q_norms).arg(self.x_norms).arg(self.x_roots);
        l.arg(self.t_sq)
            .arg(&self.c1)
            .arg(self.counts)
            .arg(self.cand);
        l.run(
            candidates_grid(rows, n),
            CANDIDATE_BLOCK,
            CANDIDATE_SHARED_BYTES,
        )
    }
}
