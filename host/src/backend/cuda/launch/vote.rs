//! Launcher of `kernels_gpu::vote`.

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::CudaSlice;
use kernels_gpu::knn::VoteRule;
use kernels_gpu::vote::KNN_VOTE;
use kernels_gpu::vote::{VOTE_BLOCK, vote_block_bytes, vote_grid};

/// `knn_vote`: every query's class from its `k` neighbour keys (uniform or distance-weighted,
/// times the training rows' weights, ties decided by `rule`), and with `proba` every class's share; `per_block` queries
/// per block, their histograms in shared memory, or in `scratch` when given. CPU twin:
/// [`crate::backend::cpu::knn_vote`].
pub(crate) struct KnnVote<'a> {
    pub best: &'a CudaSlice<u64>,
    pub rows: u32,
    pub k: u32,
    pub labels: &'a CudaSlice<u32>,
    pub row_weights: Option<&'a CudaSlice<f32>>,
    pub classes: u32,
    pub rule: VoteRule,
    pub scale: f32,
    pub per_block: u32,
    pub pred: &'a mut CudaSlice<u32>,
    pub proba: Option<&'a mut CudaSlice<f32>>,
    pub scratch: Option<&'a mut CudaSlice<u64>>,
}

impl KnnVote<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let (rows, k) = (self.rows as usize, self.k as usize);
        let (classes, per_block) = (self.classes as usize, self.per_block as usize);
        let grid = vote_grid(rows, per_block);
        let shared = match self.scratch {
            Some(_) => 0,
            None => vote_block_bytes(per_block, classes),
        };
        debug_assert!(self.best.len() >= rows * k && self.pred.len() >= rows);
        debug_assert!(
            self.proba
                .as_ref()
                .is_none_or(|p| p.len() >= rows * classes)
        );
        debug_assert!(
            self.scratch
                .as_ref()
                .is_none_or(|s| s.len() * 8 >= grid * vote_block_bytes(1, classes))
        );
        let rule = self.rule.flags();
        let f = gpu.function(KNN_VOTE.name)?;
        let mut l = gpu.launch_kernel(KNN_VOTE, &f);
        l.arg(self.best)
            .arg(&self.rows)
            .arg(&self.k)
            .arg(self.labels);
        l.opt(self.row_weights)
            .arg(&self.classes)
            .arg(&rule)
            .arg(&self.scale);
        l.arg(&self.per_block)
            .arg(self.pred)
            .opt(self.proba)
            .opt(self.scratch);
        l.run(grid, VOTE_BLOCK, shared)
    }
}
