//! The compute backends behind one trait: [`cpu`] (rayon) and [`cuda`] (Rust kernels as PTX).
//!
//! The algorithms in [`crate::kmeans`] drive a backend through these traits; a backend keeps the
//! data resident (on the GPU: uploaded once, reused by every iteration and every restart) and
//! hands back only small summaries per step.

pub mod cpu;
pub mod cuda;

use crate::error::Result;
use crate::kmeans::Precision;
use crate::matrix::MatrixView;
use kernels_gpu::math::AssignMetric;
use kernels_gpu::seeding::WeightScale;
// Pairwise distances and kNN.
use crate::kmeans::shard::{Farthest, Partial, Tally, farthest};
use crate::knn::Selection;
use kernels_gpu::knn::PairMetric;

/// A compute backend.
pub(crate) trait Backend: Send + Sync + Distances {
    /// Human-readable name, e.g. `cpu (2 threads)` or `cuda:0 (NVIDIA H100 80GB HBM3)`.
    fn describe(&self) -> String;

    /// Holds `data` for Lloyd iterations with `k` centroids under `metric`, assigning with
    /// `precision` (validated against the metric; a backend without a faster path computes
    /// [`Precision::Tf32`] exactly). `scales` are the per-dimension fixed-point exponents of
    /// [`kernels_gpu::fixed`].
    fn lloyd<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        k: usize,
        metric: AssignMetric,
        precision: Precision,
        scales: &[i32],
    ) -> Result<Box<dyn Lloyd + Send + 'a>> {
        self.lloyd_at(data, Layout::default(), k, metric, precision, scales)
    }

    /// [`Backend::lloyd`] for rows that are part of a larger data set (a shard), as `layout`
    /// places them.
    fn lloyd_at<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        layout: Layout,
        k: usize,
        metric: AssignMetric,
        precision: Precision,
        scales: &[i32],
    ) -> Result<Box<dyn Lloyd + Send + 'a>>;

    /// Milliseconds that the work queued by `work` takes on this backend (CUDA events on the
    /// GPU, wall clock on the CPU); for benchmarks.
    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64>;

    /// Bytes of device memory in use on this backend's device, where it has one of its own.
    fn device_memory_in_use(&self) -> Result<Option<usize>> {
        Ok(None)
    }
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

/// What an assignment reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AssignStats {
    /// Points whose label differs from the label they held before.
    pub changed: u64,
    /// Sum of every point's distance to its centroid.
    pub inertia: f64,
}

/// What a Lloyd step (assign, then update) reports, in one round trip.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct StepStats {
    /// The assignment's report.
    pub assign: AssignStats,
    /// Clusters left empty by the new labels (they keep their centroid until relocated).
    pub empty: usize,
    /// Squared shift Σ‖next − current‖² of the centroids.
    pub shift: f64,
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

/// Seeding (k-means++ and k-means‖, driven by `kmeans::init`) over resident rows. Every point
/// has a seeding distance (to its nearest seed so far) and the integer weight of
/// [`WeightScale::weight`]; all sums are exact integers, so every backend decides alike.
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
    /// Points whose nearest seed is each of the ids `0..ids`.
    fn seed_owner_counts(&mut self, ids: usize) -> Result<Vec<u32>>;
}

/// Lloyd iterations over resident data. Centroid buffers are `k × d`, row-major; a step writes
/// the *next* centroids, which [`Lloyd::commit`] makes current.
pub(crate) trait Lloyd: Seeding {
    /// Sets the current centroids.
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()>;
    /// Sets the current labels (random-labels initialisation).
    fn set_labels(&mut self, labels: &[u32]) -> Result<()>;
    /// Labels every point with its nearest current centroid.
    fn assign(&mut self) -> Result<AssignStats>;
    /// Assigns, then computes the means of the new labels as the next centroids.
    fn step(&mut self) -> Result<StepStats>;
    /// Computes the means of the current labels as the next centroids; returns the number of
    /// empty clusters.
    fn update(&mut self) -> Result<usize>;
    /// Sets next centroid `cluster` to point `point` (empty-cluster relocation).
    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()>;
    /// The squared shift between the next and current centroids (after relocations).
    fn shift(&mut self) -> Result<f64>;
    /// The squared shift between the next and current centroids as
    /// [`squared_shift`](crate::kmeans::shard::squared_shift) computes it on the host: the value
    /// a fit compares with tol when [`Lloyd::shift`] is too close to call.
    fn exact_shift(&mut self) -> Result<f64>;
    /// Makes the next centroids current.
    fn commit(&mut self);
    /// Assigns (with `assign`) and accumulates the labels into exact partial sums, leaving the
    /// centroids as they are: a shard's part of a step, which the caller combines and finishes.
    fn accumulate(&mut self, assign: bool) -> Result<Partial>;
    /// Each point's distance to its centroid, from the last assignment.
    fn min_distances(&self) -> Result<Vec<f32>>;
    /// The `count` points farthest from their centroids in the last assignment (rows counted
    /// from 0 here), farthest first, ties by lowest row.
    fn farthest(&self, count: usize) -> Result<Vec<Farthest>> {
        Ok(farthest(&self.min_distances()?, 0, count))
    }
    /// Cluster sizes and exact inertia of the last assignment.
    fn tally(&self) -> Result<Tally> {
        Ok(Tally::of(&self.labels()?, &self.min_distances()?, self.k()))
    }
    /// Cluster sizes from the last update.
    fn sizes(&self) -> Result<Vec<u32>>;
    /// The current centroids.
    fn centroids(&self) -> Result<Vec<f32>>;
    /// The current labels.
    fn labels(&self) -> Result<Vec<u32>>;
    /// The resident rows `rows`, `rows.len() × d` row-major.
    fn gather(&self, rows: &[usize]) -> Result<Vec<f32>>;
    /// The number of clusters.
    fn k(&self) -> usize;
}

// ---- Pairwise distances and kNN -------------------------------------------------------------

/// Where row blocks of a distance matrix go: `(first row, block)`.
pub(crate) type BlockSink<'s> = dyn FnMut(usize, ndarray::ArrayView2<'_, f32>) -> Result<()> + 's;

/// The pairwise-distance and kNN methods of a backend (every [`Backend`] has them).
pub(crate) trait Distances {
    /// Distances from every row of `a` to every row of `b` (validated, same columns), in blocks
    /// of whole rows of at most `max_bytes` (at least one row) or of what the backend's memory
    /// allows, handed to `on_block` in row order.
    fn pairwise(
        &self,
        a: &MatrixView<'_>,
        b: &MatrixView<'_>,
        metric: PairMetric,
        max_bytes: Option<usize>,
        on_block: &mut BlockSink<'_>,
    ) -> Result<()>;

    /// An exact kNN index over `train` (validated), resident on the backend.
    fn knn_index(&self, train: &MatrixView<'_>, metric: PairMetric) -> Result<Box<dyn KnnSearch>>;
}

/// An exact kNN index on a backend. Neighbours are keys ([`kernels_gpu::knn::key`]): sorted
/// ascending, `k` per query row.
pub(crate) trait KnnSearch: Send + Sync {
    /// The `k` nearest training rows of every query row (validated, same columns, `1 ≤ k ≤ n`).
    fn search(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours>;

    /// Allows (the default) or forbids the TF32 tensor-core prefilter where the backend has one
    /// (CUDA, compute capability ≥ 8.0, the L2 family); the answer is the same either way.
    fn set_prefilter(&mut self, _allowed: bool) {}

    /// Sets the class (`< classes`) of every training row, for [`KnnSearch::vote`].
    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()>;

    /// The winning class of every query row among its `k` nearest, and with `proba` the share of
    /// the vote of every class (`rows × classes`).
    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        weighted: bool,
        proba: bool,
    ) -> Result<Votes>;
}

/// What a kNN search returns.
pub(crate) struct Neighbours {
    /// `rows × k` training row indices, each row nearest first.
    pub indices: Vec<u32>,
    /// The matching distances.
    pub distances: Vec<f32>,
    /// The selection that ran.
    pub selection: Selection,
    /// Queries that went through the TF32 prefilter and, of those, how many fell back to the
    /// exact path (too many candidates); `None` when the prefilter did not run.
    pub prefilter: Option<crate::knn::PrefilterReport>,
}

/// Appends the training indices and distances of `keys` (see [`kernels_gpu::knn::key`]).
pub(crate) fn split_keys(keys: &[u64], indices: &mut Vec<u32>, distances: &mut Vec<f32>) {
    use kernels_gpu::knn::{key_distance, key_index};
    indices.extend(keys.iter().map(|&key| key_index(key)));
    distances.extend(keys.iter().map(|&key| key_distance(key)));
}

/// What a kNN vote returns.
pub(crate) struct Votes {
    /// The winning class of every query row.
    pub classes: Vec<u32>,
    /// `rows × classes` vote shares (empty unless asked for).
    pub proba: Vec<f32>,
}
