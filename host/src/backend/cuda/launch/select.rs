//! Launchers of `kernels_gpu::select`: the streaming selections (a block per query row merges a
//! tile into its running k keys) and the global bitonic sort of whole rows.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaView};
use kernels_gpu::knn::{SELECT_BLOCK, SELECT_CAP};
use kernels_gpu::select::{
    BY_KMIN, BY_RADIX, KNN_BITONIC_MERGE_GLOBAL, KNN_BITONIC_MERGE_LOCAL, KNN_SELECT_BITONIC,
    KNN_SELECT_KEYS_BITONIC, KNN_SELECT_KEYS_KMIN, KNN_SELECT_KEYS_RADIX, KNN_SELECT_KMIN,
    KNN_SELECT_RADIX, KNN_SORT_CHUNKS, KNN_TAKE, SORT_SHARED_BYTES, select_method_shared_bytes,
};
use kernels_gpu::select::{merge_global_grid, sort_chunks_grid, take_grid};

/// `knn_select_kmin` / `_bitonic` / `_radix`: merges a tile of distances (`cols` per row, row
/// stride `ld`, training rows from `first_index`) into every row's running `k` keys. CPU twin:
/// [`crate::backend::cpu::knn::Nearest::offer`].
pub(crate) struct KnnSelect<'a> {
    pub dist: &'a CudaView<'a, f32>,
    pub ld: u64,
    pub cols: u32,
    pub first_index: u32,
    pub best: &'a mut CudaSlice<u64>,
    pub k: u32,
    /// Whether `best` starts empty (the first tile).
    pub fresh: bool,
}

impl KnnSelect<'_> {
    /// Launches one block per query row (`rows`), selecting by `method` (a
    /// `kernels_gpu::select` method: `BY_KMIN`, `BY_BITONIC`, `BY_RADIX`).
    pub(crate) fn launch(self, gpu: &CudaBackend, method: u32, rows: usize) -> Result<()> {
        let kernel = match method {
            BY_KMIN => KNN_SELECT_KMIN,
            BY_RADIX => KNN_SELECT_RADIX,
            _ => KNN_SELECT_BITONIC,
        };
        let (ld, cols, k) = (self.ld as usize, self.cols as usize, self.k as usize);
        debug_assert!(k >= 1 && k + cols <= SELECT_CAP && self.best.len() >= rows * k);
        debug_assert!(rows == 0 || self.dist.len() >= (rows - 1) * ld + cols);
        let fresh = u32::from(self.fresh);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.dist)
            .arg(&self.ld)
            .arg(&self.cols)
            .arg(&self.first_index);
        l.arg(self.best).arg(&self.k).arg(&fresh);
        l.run(rows, SELECT_BLOCK, select_method_shared_bytes(method, k))
    }
}

/// `knn_select_keys_kmin` / `_bitonic` / `_radix`: [`KnnSelect`] for a tile of ready keys
/// (the prefilter's group minima). CPU twin: [`crate::backend::cpu::knn::Nearest::offer`].
pub(crate) struct KnnSelectKeys<'a> {
    pub keys: &'a CudaView<'a, u64>,
    pub ld: u64,
    pub cols: u32,
    pub best: &'a mut CudaSlice<u64>,
    pub k: u32,
    /// Whether `best` starts empty (the first tile).
    pub fresh: bool,
}

impl KnnSelectKeys<'_> {
    /// As [`KnnSelect::launch`].
    pub(crate) fn launch(self, gpu: &CudaBackend, method: u32, rows: usize) -> Result<()> {
        let kernel = match method {
            BY_KMIN => KNN_SELECT_KEYS_KMIN,
            BY_RADIX => KNN_SELECT_KEYS_RADIX,
            _ => KNN_SELECT_KEYS_BITONIC,
        };
        let (ld, cols, k) = (self.ld as usize, self.cols as usize, self.k as usize);
        debug_assert!(k >= 1 && k + cols <= SELECT_CAP && self.best.len() >= rows * k);
        debug_assert!(rows == 0 || self.keys.len() >= (rows - 1) * ld + cols);
        let fresh = u32::from(self.fresh);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.keys).arg(&self.ld).arg(&self.cols);
        l.arg(self.best).arg(&self.k).arg(&fresh);
        l.run(rows, SELECT_BLOCK, select_method_shared_bytes(method, k))
    }
}

/// `knn_sort_chunks`: turns distance rows (`n` each, stride `ld`) into key rows of
/// `2^row_log2` (padded with empty keys) and sorts every `SELECT_CAP` chunk in shared memory.
/// CPU twin: [`crate::backend::cpu::knn::Nearest::finish`] (a sort of the kept keys).
pub(crate) struct KnnSortChunks<'a> {
    pub dist: &'a CudaSlice<f32>,
    pub ld: u64,
    pub n: u32,
    pub row_log2: u32,
    pub keys: &'a mut CudaSlice<u64>,
}

impl KnnSortChunks<'_> {
    /// Launches a block per chunk of `rows` rows.
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        let total = rows << self.row_log2;
        debug_assert!(total.is_multiple_of(SELECT_CAP) && self.keys.len() >= total);
        debug_assert!(
            rows == 0 || self.dist.len() >= (rows - 1) * self.ld as usize + self.n as usize
        );
        let f = gpu.function(KNN_SORT_CHUNKS.name)?;
        let mut l = gpu.launch_kernel(KNN_SORT_CHUNKS, &f);
        l.arg(self.dist)
            .arg(&self.ld)
            .arg(&self.n)
            .arg(&self.row_log2);
        l.arg(self.keys);
        l.run(sort_chunks_grid(total), SELECT_BLOCK, SORT_SHARED_BYTES)
    }
}

/// `knn_bitonic_merge_global`: one compare-exchange step (`size`, `stride ≥ SELECT_CAP`) of the
/// bitonic sort of every key row, over `pairs` pairs. CPU twin:
/// [`crate::backend::cpu::knn::Nearest::finish`].
pub(crate) struct KnnBitonicMergeGlobal<'a> {
    pub keys: &'a mut CudaSlice<u64>,
    pub pairs: u64,
    pub row_log2: u32,
    pub size: u64,
    pub stride: u64,
}

impl KnnBitonicMergeGlobal<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let pairs = self.pairs as usize;
        debug_assert!(self.keys.len() >= 2 * pairs && self.stride as usize >= SELECT_CAP);
        let f = gpu.function(KNN_BITONIC_MERGE_GLOBAL.name)?;
        let mut l = gpu.launch_kernel(KNN_BITONIC_MERGE_GLOBAL, &f);
        l.arg(self.keys).arg(&self.pairs).arg(&self.row_log2);
        l.arg(&self.size).arg(&self.stride);
        l.run(merge_global_grid(pairs), SELECT_BLOCK, 0)
    }
}

/// `knn_bitonic_merge_local`: the steps of merge `size` with strides below `SELECT_CAP`, a chunk
/// per block in shared memory. CPU twin: [`crate::backend::cpu::knn::Nearest::finish`].
pub(crate) struct KnnBitonicMergeLocal<'a> {
    pub keys: &'a mut CudaSlice<u64>,
    pub row_log2: u32,
    pub size: u64,
}

impl KnnBitonicMergeLocal<'_> {
    /// Launches a block per chunk of `rows` rows.
    pub(crate) fn launch(self, gpu: &CudaBackend, rows: usize) -> Result<()> {
        let total = rows << self.row_log2;
        debug_assert!(total.is_multiple_of(SELECT_CAP) && self.keys.len() >= total);
        let f = gpu.function(KNN_BITONIC_MERGE_LOCAL.name)?;
        let mut l = gpu.launch_kernel(KNN_BITONIC_MERGE_LOCAL, &f);
        l.arg(self.keys).arg(&self.row_log2).arg(&self.size);
        l.run(sort_chunks_grid(total), SELECT_BLOCK, SORT_SHARED_BYTES)
    }
}

/// `knn_take`: copies the first `k` keys of each of the `rows` sorted rows to `best`. CPU twin:
/// [`crate::backend::cpu::knn::Nearest::finish`].
pub(crate) struct KnnTake<'a> {
    pub keys: &'a CudaSlice<u64>,
    pub row_log2: u32,
    pub rows: u32,
    pub k: u32,
    pub best: &'a mut CudaSlice<u64>,
}

impl KnnTake<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (rows, k) = (self.rows as usize, self.k as usize);
        debug_assert!(self.keys.len() >= rows << self.row_log2 && self.best.len() >= rows * k);
        let f = gpu.function(KNN_TAKE.name)?;
        let mut l = gpu.launch_kernel(KNN_TAKE, &f);
        l.arg(self.keys)
            .arg(&self.row_log2)
            .arg(&self.rows)
            .arg(&self.k);
        l.arg(self.best);
        l.run(take_grid(rows, k), SELECT_BLOCK, 0)
    }
}
