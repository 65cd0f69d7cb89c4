//! Launchers of `kernels_gpu::init`, the seeding kernels. Each takes the metric the pair is
//! compiled for; `weights` and `counts` are the optional per-point units (`None`: one each);
//! `norms` holds the squared norm of every row of `x` (the expanded squared-L2 distance reads
//! them; `None` for L1).

use crate::backend::cuda::CudaBackend;
use crate::error::Result;
use cudarc::driver::{CudaSlice, CudaView};
use kernels_gpu::init::{
    NEAREST_SHARED_BYTES, SEED_GREEDY_DRAW_L1, SEED_GREEDY_DRAW_L2, SEED_LOCATE_L1, SEED_LOCATE_L2,
    SEED_NEAREST_L1, SEED_NEAREST_L2, SEED_OWNER_WEIGHTS, SEED_SAMPLE_L1, SEED_SAMPLE_L2,
    SEED_SHARED_BYTES, SEED_TRIALS_L1, SEED_TRIALS_L2, point_blocks,
};
use kernels_gpu::launch::{BLOCK, Kernel, SEED_CANDIDATES};
use kernels_gpu::math::AssignMetric;

/// The kernel of a seeding pair for `metric`.
fn of(metric: AssignMetric, l2: Kernel, l1: Kernel) -> Kernel {
    match metric {
        AssignMetric::SqL2 => l2,
        AssignMetric::L1 => l1,
    }
}

/// Whether `norms` hold a squared norm for every row of `x` (`d` columns) where `metric` reads
/// them.
fn norms_fit(
    metric: AssignMetric,
    x: &CudaSlice<f32>,
    norms: Option<&CudaSlice<f32>>,
    d: usize,
) -> bool {
    metric == AssignMetric::L1 || norms.is_some_and(|v| v.len() * d >= x.len())
}

/// Whether the optional units hold one value per point.
fn units_fit(weights: Option<&CudaSlice<f32>>, counts: Option<&CudaSlice<u64>>, n: usize) -> bool {
    weights.is_none_or(|w| w.len() >= n) && counts.is_none_or(|c| c.len() >= n)
}

/// `seed_nearest_{l2,l1}`: lowers every point's `min_dist` (from +∞ with `fresh`) to its
/// distance to the `count` rows `rows`, records the nearest's id (`first_id + c`) in `owner`, and
/// writes the block weight sums and their `total`. CPU twin:
/// [`crate::backend::cpu::Seeder`]'s [`seed_nearest`](crate::backend::Seeding::seed_nearest).
pub(crate) struct SeedNearest<'a> {
    pub x: &'a CudaSlice<f32>,
    pub norms: Option<&'a CudaSlice<f32>>,
    pub n: u32,
    pub d: u32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub counts: Option<&'a CudaSlice<u64>>,
    pub min_dist: &'a mut CudaSlice<f32>,
    pub owner: &'a mut CudaSlice<u32>,
    pub rows: &'a CudaSlice<u32>,
    pub count: u32,
    pub first_id: u32,
    pub fresh: u32,
    pub scale: f64,
    pub cap: u64,
    pub block_sums: &'a mut CudaSlice<u64>,
    pub total: &'a mut CudaSlice<u64>,
}

impl SeedNearest<'_> {
    /// Launches the kernel of `metric`, one thread per point.
    pub(crate) fn launch(self, gpu: &CudaBackend, metric: AssignMetric) -> Result<()> {
        let kernel = of(metric, SEED_NEAREST_L2, SEED_NEAREST_L1);
        let (n, d) = (self.n as usize, self.d as usize);
        let blocks = point_blocks(n);
        debug_assert!(self.x.len() >= n * d && units_fit(self.weights, self.counts, n));
        debug_assert!(norms_fit(metric, self.x, self.norms, d));
        debug_assert!(self.min_dist.len() >= n && self.owner.len() >= n);
        debug_assert!(self.rows.len() >= self.count as usize);
        debug_assert!(self.block_sums.len() >= blocks && !self.total.is_empty());
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x).opt(self.norms).arg(&self.n).arg(&self.d);
        l.opt(self.weights).opt(self.counts);
        l.arg(self.min_dist).arg(self.owner).arg(self.rows);
        l.arg(&self.count).arg(&self.first_id).arg(&self.fresh);
        l.arg(&self.scale).arg(&self.cap);
        l.arg(self.block_sums).arg(self.total);
        l.run(blocks, BLOCK, NEAREST_SHARED_BYTES)
    }
}

/// `seed_trials_{l2,l1}`: one k-means++ step; applies the previous winner `pending` (when given)
/// to `min_dist`, then writes each of the `count` candidates' block weight sums (one row of
/// `block_sums` per candidate) and adds them to its `potentials` slot. Does nothing once `*stop`
/// (when given) is set. CPU twin: [`crate::backend::cpu::Seeder`]'s
/// [`seed_trials`](crate::backend::Seeding::seed_trials).
pub(crate) struct SeedTrials<'a, 'v> {
    pub x: &'a CudaSlice<f32>,
    pub norms: Option<&'a CudaSlice<f32>>,
    pub n: u32,
    pub d: u32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub counts: Option<&'a CudaSlice<u64>>,
    pub min_dist: &'a mut CudaSlice<f32>,
    pub candidates: &'a CudaSlice<u32>,
    pub count: u32,
    pub pending: Option<&'a CudaView<'v, u32>>,
    pub stop: Option<&'a CudaSlice<u32>>,
    pub scale: f64,
    pub cap: u64,
    pub block_sums: &'a mut CudaSlice<u64>,
    pub potentials: &'a mut CudaSlice<u64>,
}

impl SeedTrials<'_, '_> {
    /// Launches the kernel of `metric`, one thread per point.
    pub(crate) fn launch(self, gpu: &CudaBackend, metric: AssignMetric) -> Result<()> {
        let kernel = of(metric, SEED_TRIALS_L2, SEED_TRIALS_L1);
        let (n, d, count) = (self.n as usize, self.d as usize, self.count as usize);
        let blocks = point_blocks(n);
        debug_assert!(self.x.len() >= n * d && units_fit(self.weights, self.counts, n));
        debug_assert!(norms_fit(metric, self.x, self.norms, d));
        debug_assert!(self.min_dist.len() >= n && self.candidates.len() >= count);
        debug_assert!(count < SEED_CANDIDATES && self.potentials.len() >= count);
        debug_assert!(self.pending.is_none_or(|p| !p.is_empty()));
        debug_assert!(self.stop.is_none_or(|s| !s.is_empty()));
        debug_assert!(self.block_sums.len() >= count * blocks);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x).opt(self.norms).arg(&self.n).arg(&self.d);
        l.opt(self.weights).opt(self.counts);
        l.arg(self.min_dist).arg(self.candidates).arg(&self.count);
        l.opt(self.pending).opt(self.stop);
        l.arg(&self.scale).arg(&self.cap);
        l.arg(self.block_sums).arg(self.potentials);
        l.run(blocks, BLOCK, SEED_SHARED_BYTES)
    }
}

/// `seed_locate_{l2,l1}`: for each of the `draws`, the point whose cumulative weight (with the
/// row `pending` applied; `NO_ROW`: none) first exceeds it, found through the `nb` block weight
/// sums `sums`, into `out`. CPU twin: [`crate::backend::cpu::Seeder`]'s
/// [`seed_locate`](crate::backend::Seeding::seed_locate).
pub(crate) struct SeedLocate<'a, 'v> {
    pub x: &'a CudaSlice<f32>,
    pub norms: Option<&'a CudaSlice<f32>>,
    pub n: u32,
    pub d: u32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub counts: Option<&'a CudaSlice<u64>>,
    pub min_dist: &'a CudaSlice<f32>,
    pub pending: u32,
    pub sums: &'a CudaView<'v, u64>,
    pub nb: u32,
    pub draws: &'a CudaSlice<u64>,
    pub scale: f64,
    pub cap: u64,
    pub out: &'a mut CudaSlice<u32>,
}

impl SeedLocate<'_, '_> {
    /// Launches the kernel of `metric` for the first `draws` draws, one block each.
    pub(crate) fn launch(
        self,
        gpu: &CudaBackend,
        metric: AssignMetric,
        draws: usize,
    ) -> Result<()> {
        let kernel = of(metric, SEED_LOCATE_L2, SEED_LOCATE_L1);
        let (n, d, nb) = (self.n as usize, self.d as usize, self.nb as usize);
        debug_assert!(self.x.len() >= n * d && units_fit(self.weights, self.counts, n));
        debug_assert!(norms_fit(metric, self.x, self.norms, d));
        debug_assert!(self.min_dist.len() >= n && nb == point_blocks(n) && self.sums.len() >= nb);
        debug_assert!(self.draws.len() >= draws && self.out.len() >= draws);
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x).opt(self.norms).arg(&self.n).arg(&self.d);
        l.opt(self.weights).opt(self.counts);
        l.arg(self.min_dist).arg(&self.pending).arg(self.sums);
        l.arg(&self.nb).arg(self.draws);
        l.arg(&self.scale).arg(&self.cap);
        l.arg(self.out);
        l.run(draws, BLOCK, SEED_SHARED_BYTES)
    }
}

/// `seed_greedy_draw_{l2,l1}`: step `step` of the device-side k-means++ loop, one block per
/// trial: settles the last step's winner into `chosen` and locates the next step's draws into
/// `next_candidates` (zeroing `next_potentials`); sets `stop` when no weight is left. Host twin:
/// [`crate::backend::greedy_steps`] over [`crate::backend::cpu::Seeder`].
pub(crate) struct SeedGreedyDraw<'a> {
    pub x: &'a CudaSlice<f32>,
    pub norms: Option<&'a CudaSlice<f32>>,
    pub n: u32,
    pub d: u32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub counts: Option<&'a CudaSlice<u64>>,
    pub min_dist: &'a CudaSlice<f32>,
    pub block_sums: &'a CudaSlice<u64>,
    pub nb: u32,
    pub trials: u32,
    pub step: u32,
    pub k: u32,
    pub first_total: u64,
    pub chosen: &'a mut CudaSlice<u32>,
    pub uniforms: &'a CudaSlice<u64>,
    pub last_candidates: &'a CudaSlice<u32>,
    pub last_potentials: &'a CudaSlice<u64>,
    pub next_candidates: &'a mut CudaSlice<u32>,
    pub next_potentials: &'a mut CudaSlice<u64>,
    pub stop: &'a mut CudaSlice<u32>,
    pub scale: f64,
    pub cap: u64,
}

impl SeedGreedyDraw<'_> {
    /// Launches the kernel of `metric`, one block per trial.
    pub(crate) fn launch(self, gpu: &CudaBackend, metric: AssignMetric) -> Result<()> {
        let kernel = of(metric, SEED_GREEDY_DRAW_L2, SEED_GREEDY_DRAW_L1);
        let (n, d, nb) = (self.n as usize, self.d as usize, self.nb as usize);
        let (trials, step, k) = (self.trials as usize, self.step as usize, self.k as usize);
        debug_assert!(self.x.len() >= n * d && units_fit(self.weights, self.counts, n));
        debug_assert!(norms_fit(metric, self.x, self.norms, d));
        debug_assert!(self.min_dist.len() >= n && nb == point_blocks(n));
        debug_assert!(self.block_sums.len() >= trials * nb && trials < SEED_CANDIDATES);
        debug_assert!((1..=k).contains(&step) && self.chosen.len() >= k);
        debug_assert!(step == k || self.uniforms.len() >= step * trials);
        debug_assert!(self.last_candidates.len() >= trials && self.last_potentials.len() >= trials);
        debug_assert!(self.next_candidates.len() >= trials && self.next_potentials.len() >= trials);
        debug_assert!(!self.stop.is_empty());
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.arg(self.x).opt(self.norms).arg(&self.n).arg(&self.d);
        l.opt(self.weights).opt(self.counts);
        l.arg(self.min_dist).arg(self.block_sums).arg(&self.nb);
        l.arg(&self.trials).arg(&self.step).arg(&self.k);
        l.arg(&self.first_total).arg(self.chosen).arg(self.uniforms);
        l.arg(self.last_candidates).arg(self.last_potentials);
        l.arg(self.next_candidates).arg(self.next_potentials);
        l.arg(self.stop).arg(&self.scale).arg(&self.cap);
        l.run(trials, BLOCK, SEED_SHARED_BYTES)
    }
}

/// `seed_sample_{l2,l1}`: k-means‖ sampling; appends to `out` (from slot `*count`) every point
/// its uniform samples with probability `min(1, ell · weight / phi)`. CPU twin:
/// [`crate::backend::cpu::Seeder`]'s [`seed_sample`](crate::backend::Seeding::seed_sample).
pub(crate) struct SeedSample<'a> {
    pub weights: Option<&'a CudaSlice<f32>>,
    pub counts: Option<&'a CudaSlice<u64>>,
    pub min_dist: &'a CudaSlice<f32>,
    pub n: u32,
    pub seed: u64,
    pub round: u32,
    pub first_row: u32,
    pub ell: u64,
    pub phi: u64,
    pub scale: f64,
    pub cap: u64,
    pub out: &'a mut CudaSlice<u32>,
    pub count: &'a mut CudaSlice<u32>,
}

impl SeedSample<'_> {
    /// Launches the kernel of `metric`, one thread per point.
    pub(crate) fn launch(self, gpu: &CudaBackend, metric: AssignMetric) -> Result<()> {
        let kernel = of(metric, SEED_SAMPLE_L2, SEED_SAMPLE_L1);
        let n = self.n as usize;
        debug_assert!(units_fit(self.weights, self.counts, n) && self.min_dist.len() >= n);
        debug_assert!(self.out.len() >= n && !self.count.is_empty());
        let f = gpu.function(kernel.name)?;
        let mut l = gpu.launch_kernel(kernel, &f);
        l.opt(self.weights).opt(self.counts).arg(self.min_dist);
        l.arg(&self.n)
            .arg(&self.seed)
            .arg(&self.round)
            .arg(&self.first_row);
        l.arg(&self.ell)
            .arg(&self.phi)
            .arg(&self.scale)
            .arg(&self.cap);
        l.arg(self.out).arg(self.count);
        l.run(point_blocks(n), BLOCK, 0)
    }
}

/// `seed_owner_weights`: `totals[owner[i]] += units_i` for every point (the k-means‖ candidate
/// weights). CPU twin: [`crate::backend::cpu::Seeder`]'s
/// [`seed_owner_weights`](crate::backend::Seeding::seed_owner_weights).
pub(crate) struct SeedOwnerWeights<'a> {
    pub owner: &'a CudaSlice<u32>,
    pub n: u32,
    pub weights: Option<&'a CudaSlice<f32>>,
    pub counts: Option<&'a CudaSlice<u64>>,
    pub totals: &'a mut CudaSlice<u64>,
}

impl SeedOwnerWeights<'_> {
    pub(crate) fn launch(self, gpu: &CudaBackend) -> Result<()> {
        let n = self.n as usize;
        debug_assert!(self.owner.len() >= n && units_fit(self.weights, self.counts, n));
        let f = gpu.function(SEED_OWNER_WEIGHTS.name)?;
        let mut l = gpu.launch_kernel(SEED_OWNER_WEIGHTS, &f);
        l.arg(self.owner).arg(&self.n);
        l.opt(self.weights).opt(self.counts);
        l.arg(self.totals);
        l.run(point_blocks(n), BLOCK, 0)
    }
}
