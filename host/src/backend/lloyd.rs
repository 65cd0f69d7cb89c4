//! The k-means side of a backend: a [`Lloyd`] fit over resident rows in its roles (the step,
//! [`Seeding`], [`Readback`], [`Residency`], [`AcrossGpus`]), what drives it ([`LloydSpec`],
//! [`Layout`]) and what it reports; and [`MiniBatch`] steps.

use super::vocab::{Metric, Precision};
use super::{Farthest, Partial, Rank, Tally, greedy_steps};
use crate::error::Result;
use kernels_gpu::seeding::WeightScale;
use kernels_gpu::small::HaltRule;

/// Upper bounds of the device memory of a Lloyd fit, for planning a streamed one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Bytes of the rows themselves (and the staged seeds): on the device only for their turn in
    /// a streamed fit, and uploaded beside the turn before ([`Residency::release_rows`]).
    pub rows: usize,
    /// Bytes of per-row state: labels, distances, norms, weights, seeding state. In a streamed
    /// fit they are on the device for the rows' turn only; host memory keeps them between turns.
    pub per_row: usize,
    /// Bytes of the fit's own buffers, whatever the rows: centroids, cluster sums, norms of the
    /// centroids. A streamed batch holds them for its turn only.
    pub per_fit: usize,
}

/// Where resident rows sit in the whole data set.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Layout {
    /// The row of the whole data set that resident row 0 is (k-means‖ draws each row's uniform
    /// by its row in the whole set).
    pub first_row: u32,
    /// Seeds given as points ([`Seeds::Points`]) that a seeding pass takes at once (a hint: a
    /// backend that stages them takes more passes when there are more).
    pub seeds_at_once: usize,
}

/// How Lloyd iterations run, besides the data.
pub(crate) struct LloydSpec<'w> {
    /// Clusters.
    pub k: usize,
    /// L2 and L1 assign with their own kernels. Cosine (spherical k-means, on unit rows) runs the
    /// squared-L2 kernels with every centroid's squared norm taken as 0 and every point's as 2:
    /// a centroid then scores `−2·x·c` (exactly, so the largest inner product wins, ties to the
    /// lowest index) and a point's distance is `2 − 2·x·c = 2·(1 − cos)`; after every update each
    /// centroid with weight is scaled back to unit norm.
    pub metric: Metric,
    pub precision: Precision,
    /// The per-dimension fixed-point exponents of [`kernels_gpu::fixed`].
    pub scales: Vec<i32>,
    /// Distances are added to the inertia as integers under `2^inertia_exponent`
    /// ([`kernels_gpu::fixed::inertia_exponent`]); the integer total times `inertia_unit` is the
    /// reported inertia.
    pub inertia_exponent: i32,
    pub inertia_unit: f64,
    /// Every point's units ([`kernels_gpu::fixed::weight_units`]); `None`: one each.
    pub weights: Option<&'w [f32]>,
}

impl LloydSpec<'_> {
    /// For labelling points of `d` dimensions against given centroids (nothing is summed).
    pub(crate) fn predict(k: usize, d: usize, metric: Metric) -> Self {
        LloydSpec {
            k,
            metric,
            precision: Precision::Exact,
            scales: vec![0; d],
            inertia_exponent: 0,
            inertia_unit: 1.0,
            weights: None,
        }
    }

    /// Whether this is spherical k-means (see [`LloydSpec::metric`]).
    pub(crate) fn spherical(&self) -> bool {
        self.metric == Metric::Cosine
    }
}

/// The squared norm that spherical k-means gives every point (see [`LloydSpec::metric`]).
pub(crate) const SPHERICAL_POINT_SQ_NORM: f32 = 2.0;

/// What an assignment reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AssignStats {
    /// Points with weight whose label differs from the label they held before.
    pub changed: u64,
    /// Sum of every point's weighted distance to its centroid (in the metric's terms: `1 − cos`
    /// for cosine): the fixed-point integer of [`Readback::fixed_inertia`] times the fit's
    /// inertia unit.
    pub inertia: f64,
}

/// What a Lloyd step (assign, then update) reports, in one round trip.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepStats {
    /// The assignment's report.
    pub assign: AssignStats,
    /// Clusters left without weight by the new labels (they keep their centroid until
    /// relocated).
    pub empty: usize,
    /// Squared shift Σ‖next − current‖² of the centroids.
    pub shift: f64,
}

/// Lloyd steps that a backend may queue back to back ([`Lloyd::steps`]): at most `max`, halting
/// after the first that meets its [`StepRun::halt`] rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepRun {
    pub max: usize,
    /// The rule of the run's first step.
    pub first_halt: HaltRule,
}

impl StepRun {
    /// The rule of the run's step `i`: the first's, and for every later step also a halt on no
    /// changed label (a fixed point after at least one step).
    pub fn halt(&self, i: usize) -> HaltRule {
        HaltRule {
            unchanged: self.first_halt.unchanged || i > 0,
            ..self.first_halt
        }
    }
}

/// Where the seeds of a seeding pass are.
#[derive(Clone, Copy)]
pub(crate) enum Seeds<'s> {
    /// These resident rows.
    Rows(&'s [u32]),
    /// These points, `count × d` row-major (rows that other shards hold).
    Points(&'s [f32]),
}

/// Where the candidates of a k-means++ step come from.
pub(crate) enum Picks<'p> {
    /// Located in the cumulative integer weights: each draw `r < total` picks the first point
    /// whose cumulative weight exceeds `r`.
    Draws(&'p [u64]),
    /// These seeds (when every weight is zero, or located by a sharded fit's shards).
    Seeds(Seeds<'p>),
}

/// What the trials of a k-means++ step report.
pub(crate) struct Trials {
    /// The resident row of every trial (none for trials given as points).
    pub candidates: Vec<u32>,
    /// Σ over points of the weight after adding that trial's row as a seed.
    pub potentials: Vec<u64>,
}

/// The steps of a greedy k-means++ run after its first seed (see [`Seeding::seed_greedy`]).
pub(crate) struct GreedyPlan<'u> {
    /// The first seed, already applied by [`Seeding::seed_nearest`].
    pub first: u32,
    /// The total weight that pass returned (> 0).
    pub total: u64,
    /// Seeds wanted, the first included.
    pub k: usize,
    /// Trials per step (`≤ SEED_CANDIDATES − 1`).
    pub trials: usize,
    /// `(k − 1) · trials` uniforms: step `s` (choosing seed `s ≥ 1`) draws trial `t` at
    /// [`draw`](kernels_gpu::seeding::draw)`(uniforms[(s − 1) · trials + t], total)`.
    pub uniforms: &'u [u64],
}

/// Seeding (k-means++ and k-means‖, driven by `kmeans::init`) over resident rows. Every point
/// has a seeding distance (to its nearest seed so far) and the integer weight of
/// [`WeightScale::weight_of`] (its sample weight's units included); all sums are exact
/// integers, so every backend decides alike.
pub(crate) trait Seeding {
    /// Lowers every point's seeding distance (from +∞ with `fresh`) to its distance to each of
    /// `seeds`, recording `first_id + position` as its nearest seed where a seed is strictly
    /// nearer (ties keep the earlier seed); returns the total weight. Drops a pending accept.
    fn seed_nearest(
        &mut self,
        seeds: Seeds<'_>,
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64>;
    /// One k-means++ step in one pass: applies the accepted trial of the last step, picks the
    /// candidates and returns each one's potential.
    fn seed_trials(&mut self, picks: Picks<'_>, ws: WeightScale) -> Result<Trials>;
    /// The rows that `draws` pick as [`Picks::Draws`] does (within this data's weights, the
    /// accepted trial applied), without a trials pass: the accept stays pending for the next
    /// [`Seeding::seed_trials`].
    fn seed_locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<Vec<u32>>;
    /// Makes trial `trial` of the last step a seed (applied by the next step's pass).
    fn seed_accept(&mut self, trial: usize);
    /// k-means‖: the points sampled with probability `min(1, ell · weight / phi)` by their
    /// uniforms `uniform32(seed, round, row)` (`row` in the whole data set, see [`Layout`]),
    /// ascending.
    fn seed_sample(
        &mut self,
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>>;
    /// The units of the points whose nearest seed is each of the ids `0..ids`.
    fn seed_owner_weights(&mut self, ids: usize) -> Result<Vec<u64>>;
    /// Greedy k-means++ after the first seed, as [`greedy_steps`] runs it (this default: one
    /// round trip per step). A backend that runs the whole loop where the data is overrides
    /// it with the same answer. Ends the run: the last seed is not applied.
    fn seed_greedy(&mut self, plan: &GreedyPlan<'_>, ws: WeightScale) -> Result<Vec<u32>> {
        greedy_steps(self, plan, ws)
    }
    /// A seeding object of its own over the resident rows `rows`, row `i` weighing `units[i]`
    /// units (k-means‖'s candidates), where this backend keeps them: `None` when the caller
    /// should gather them and seed on the host's CPU (the same answer).
    fn seed_candidates(
        &mut self,
        _rows: &[u32],
        _units: &[u64],
    ) -> Result<Option<Box<dyn Seeding + '_>>> {
        Ok(None)
    }
}

/// Lloyd iterations over resident data: the step. Centroid buffers are `k × d`, row-major; a
/// step writes the *next* centroids, which [`Lloyd::commit`] makes current. Its other roles are
/// traits of their own: [`Seeding`] (choosing the first centroids), [`Readback`] (what a fit
/// reads of the resident state), [`Residency`] (a streamed batch's rows between its turns) and
/// [`AcrossGpus`] (sums added on the devices of a GPU set); a backend without the last two takes
/// their defaults.
pub(crate) trait Lloyd: Seeding + Readback + Residency + AcrossGpus {
    /// Sets the current centroids.
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()>;
    /// Sets the current labels (random-labels initialisation).
    fn set_labels(&mut self, labels: &[u32]) -> Result<()>;
    /// Labels every point with its nearest current centroid.
    fn assign(&mut self) -> Result<AssignStats>;
    /// Assigns, then computes the means of the new labels as the next centroids.
    fn step(&mut self) -> Result<StepStats>;
    /// Up to `run.max` steps (at least one), each as [`Lloyd::step`] and every one but the last
    /// committed, ending after the first that meets the run's halt rules; their reports in
    /// order. A backend that cannot queue steps without reading each report runs one (this
    /// default).
    fn steps(&mut self, run: &StepRun) -> Result<Vec<StepStats>> {
        let _ = run;
        Ok(vec![self.step()?])
    }
    /// Computes the (weighted) means of the current labels as the next centroids; returns the
    /// number of clusters without weight.
    fn update(&mut self) -> Result<usize>;
    /// Sets next centroid `cluster` to point `point` (empty-cluster relocation).
    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()>;
    /// Sets next centroid `to` to next centroid `from`.
    fn copy_next_row(&mut self, from: usize, to: usize) -> Result<()>;
    /// The squared shift between the next and current centroids (after relocations).
    fn shift(&mut self) -> Result<f64>;
    /// The squared shift between the next and current centroids as
    /// [`squared_shift`](crate::backend::squared_shift) computes it on the host: the value
    /// a fit compares with tol when [`Lloyd::shift`] is too close to call.
    fn exact_shift(&mut self) -> Result<f64>;
    /// Makes the next centroids current.
    fn commit(&mut self);
    /// Assigns (with `assign`) and accumulates the labels into exact partial sums, leaving the
    /// centroids as they are: a shard's part of a step, which the caller combines and finishes.
    fn accumulate(&mut self, assign: bool) -> Result<Partial>;
}

/// What a fit reads back of the resident state of a [`Lloyd`]: the last assignment, the
/// centroids, the rows.
pub(crate) trait Readback {
    /// Each point's distance to its centroid, from the last assignment.
    fn min_distances(&self) -> Result<Vec<f32>>;
    /// The inertia of the last assignment as the exact integer the kernels sum (under
    /// `2^`[`LloydSpec::inertia_exponent`]): the parts of rows split over shards add up to the
    /// whole (wrapping, as the kernels add).
    fn fixed_inertia(&self) -> Result<i64>;
    /// The `count` points with weight farthest from their centroids in the last assignment
    /// (rows counted from 0 here), farthest first, ties by lowest row.
    fn farthest(&self, count: usize) -> Result<Vec<Farthest>>;
    /// Every cluster's weight (units) from the last update.
    fn cluster_weights(&self) -> Result<Vec<u64>>;
    /// Rows per cluster in the last assignment (what a model reports as its cluster sizes).
    fn sizes(&self) -> Result<Vec<u32>> {
        Ok(Tally::of(&self.labels()?, self.k()).sizes)
    }
    /// The current centroids.
    fn centroids(&self) -> Result<Vec<f32>>;
    /// The current labels.
    fn labels(&self) -> Result<Vec<u32>>;
    /// The resident rows `rows`, `rows.len() × d` row-major.
    fn gather(&self, rows: &[usize]) -> Result<Vec<f32>>;
    /// The number of clusters.
    fn k(&self) -> usize;
}

/// Where a [`Lloyd`]'s rows are between the turns of a streamed batch (see
/// [`multi`](super::multi)). A backend that reads the rows where they lie takes the defaults,
/// which do nothing.
pub(crate) trait Residency {
    /// Frees the device's copy of the rows and every other device buffer of the fit (a streamed
    /// batch between its turns), keeping in host memory what later requests read (labels,
    /// distances, seeding state, centroids); whatever needs them next uploads them again.
    fn release_rows(&mut self) -> Result<()> {
        Ok(())
    }
    /// Starts uploading the rows released by [`Residency::release_rows`] beside the device's
    /// other work (another batch's step), so that they are there when a request needs them.
    fn prefetch_rows(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A [`Lloyd`]'s part in sums added on the devices of a GPU set (NCCL, see
/// [`multi`](super::multi)). GPUs only: the defaults refuse to hold sums.
pub(crate) trait AcrossGpus {
    /// With `hold`, leaves the cluster sums and weights of the next accumulations on the device
    /// for [`AcrossGpus::sum_across`] (their [`Partial`] comes back without them).
    fn hold_sums(&mut self, hold: bool) -> Result<()> {
        match hold {
            true => Err(across_gpus_only()),
            false => Ok(()),
        }
    }
    /// Adds the held sums and weights of the last accumulation over the GPUs of `rank`'s
    /// communicator (every rank calls it at once); rank 0 gets the totals, the others `None`.
    fn sum_across(&mut self, _rank: &Rank) -> Result<Option<(Vec<i64>, Vec<u64>)>> {
        Err(across_gpus_only())
    }
}

/// The devices of a GPU set that add their [`AcrossGpus`] sums among themselves, made by the
/// device ([`Device::sum_group`](crate::Device)): one [`Rank`] per GPU, in the set's order.
pub(crate) trait SumGroup: Sync {
    /// Adds the sums and weights that `fit`, on the set's GPU `gpu`, holds
    /// ([`AcrossGpus::hold_sums`]) over the set's GPUs (every GPU's fit calls it at once); the
    /// first GPU gets the totals, the others `None`.
    fn sum_across(
        &self,
        gpu: usize,
        fit: &mut dyn AcrossGpus,
    ) -> Result<Option<(Vec<i64>, Vec<u64>)>>;
    /// What adds the sums, for a model's device text (`NCCL 2.21.5`), where it can say.
    fn describe(&self) -> Option<String>;
}

fn across_gpus_only() -> crate::Error {
    crate::Error::Shard("only GPUs add their sums across devices".into())
}

/// What a mini-batch step reports, in one round trip.
pub(crate) struct BatchReport {
    /// Every batch row's distance to its nearest centroid (before the update), in batch order.
    pub distances: Vec<f32>,
    /// Rows of the batch that went to each centroid.
    pub counts: Vec<u32>,
}

/// Mini-batch k-means steps over resident rows (driven by `kmeans::minibatch`; kernels and
/// arithmetic in [`kernels_gpu::minibatch`]). Every centroid has a count of the rows it has
/// received, which sets its learning rate; centroid buffers are `k × d`, row-major, and a step
/// writes the *next* centroids, which [`MiniBatch::commit`] makes current.
pub(crate) trait MiniBatch {
    /// Sets the current centroids.
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()>;
    /// Sets every centroid's count.
    fn set_counts(&mut self, counts: &[u64]) -> Result<()>;
    /// Assigns the resident rows `rows` (repeats allowed, at most the batch size the scales were
    /// made for) to their nearest current centroid; the next centroids are the current ones
    /// moved by [`kernels_gpu::minibatch::learning_rate_update`], and the counts grow by the
    /// batch's.
    fn step(&mut self, rows: &[u32]) -> Result<BatchReport>;
    /// Sets next centroid `cluster` to resident row `row` (reassignment).
    fn relocate(&mut self, cluster: usize, row: usize) -> Result<()>;
    /// Each centroid's squared shift between the next and current centroids
    /// ([`kernels_gpu::minibatch::row_shift`]).
    fn shifts(&mut self) -> Result<Vec<f64>>;
    /// Makes the next centroids current.
    fn commit(&mut self);
    /// The current centroids.
    fn centroids(&self) -> Result<Vec<f32>>;
    /// The nearest current centroid of every resident row and the distance to it.
    fn assign_all(&mut self) -> Result<(Vec<u32>, Vec<f32>)>;
}
