//! The compute backends behind one door: [`cpu`] (rayon) and [`cuda`] (Rust kernels as PTX),
//! and [`multi`], which spreads one job over several devices or streams it through one.
//!
//! The algorithms above (`kmeans`, `knn`, `distances`) reach a backend only through this
//! module's own items: the traits ([`Backend`], [`Distances`], [`KnnSearch`], [`Lloyd`] and its
//! roles, [`MiniBatch`]), the plain types they pass, and the objects that
//! [`Device`](crate::Device) makes. They never name `cpu`, `cuda` or `multi`
//! (`host/tests/layers.rs` checks it). A backend keeps the data resident (on the GPU: uploaded once, reused by every
//! iteration and every restart) and hands back only small summaries per step.

pub mod cpu;
pub mod cuda;
mod lloyd;
pub(crate) mod multi;
pub(crate) mod radius;
pub(crate) mod traffic;
pub(crate) mod vocab;

pub use cpu::partial::{Farthest, Partial, Tally, farthest, merge_farthest, squared_shift};
/// One GPU's place in a [`SumGroup`], which [`AcrossGpus::sum_across`] adds over.
use cuda::nccl::Rank;
pub(crate) use lloyd::{
    AcrossGpus, AssignStats, BatchReport, Footprint, GreedyPlan, Layout, Lloyd, LloydSpec,
    MiniBatch, Picks, Readback, Residency, SPHERICAL_POINT_SQ_NORM, Seeding, Seeds, StepRun,
    StepStats, SumGroup, Trials,
};
/// The runners of [`multi`] that take the caller's own members (a k-means fit's shards): a
/// group per device at once, each group's members in turn.
pub(crate) use multi::{Turn, answer_in_turns, on_each};

use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::knn::{PairMetric, VoteRule};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::seeding::{WeightScale, draw};
use std::mem::MaybeUninit;
use std::ops::Range;
use vocab::{Metric, NeighbourIndex, Selection};

/// Share of the free device memory that a job may use when it is given no memory budget.
pub(crate) const DEFAULT_BUDGET_SHARE: f64 = 0.7;

/// A compute backend.
pub(crate) trait Backend: Send + Sync + Distances {
    /// Human-readable name, e.g. `cpu (2 threads)` or `cuda:0 (NVIDIA H100 80GB HBM3)`.
    fn describe(&self) -> String;

    /// Holds `data` for Lloyd iterations as `spec` says (its precision validated against the
    /// metric; a backend without a faster path computes
    /// [`Precision::Tf32`](vocab::Precision::Tf32) exactly).
    fn lloyd<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        spec: &LloydSpec<'a>,
    ) -> Result<Box<dyn Lloyd + Send + 'a>> {
        self.lloyd_at(data, Layout::default(), spec)
    }

    /// [`Backend::lloyd`] for rows that are part of a larger data set (a shard), as `layout`
    /// places them.
    fn lloyd_at<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        layout: Layout,
        spec: &LloydSpec<'a>,
    ) -> Result<Box<dyn Lloyd + Send + 'a>>;

    /// Holds `data` for mini-batch k-means steps with `k` centroids under `metric`; `scales`
    /// are fixed-point exponents with room for the largest batch the steps will pass.
    fn minibatch<'a>(
        &'a self,
        data: &'a MatrixView<'a>,
        k: usize,
        metric: Metric,
        scales: &[i32],
    ) -> Result<Box<dyn MiniBatch + 'a>>;

    /// Milliseconds that the work queued by `work` takes on this backend (CUDA events on the
    /// GPU, wall clock on the CPU); for benchmarks.
    fn time_ms(&self, work: &mut dyn FnMut() -> Result<()>) -> Result<f64>;

    /// Bytes of device memory in use on this backend's device, where it has one of its own.
    fn device_memory_in_use(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    /// Bytes of device memory free for new buffers, where the backend has a device of its own
    /// (`None`: the data lives in host memory).
    fn device_memory_free(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    /// The most bytes that this process's buffers held at once on this backend's device since
    /// the last call with `reset` (which starts a new count), where it has a device of its own.
    fn device_memory_peak(&self, reset: bool) -> Result<Option<usize>> {
        let _ = reset;
        Ok(None)
    }

    /// What a Lloyd fit of `k` clusters over `n` rows of `d` columns holds in the backend's
    /// device memory (none where the data lives in host memory); `seeds_at_once` as in
    /// [`Layout`].
    fn lloyd_footprint(&self, _n: usize, _d: usize, _k: usize, _seeds_at_once: usize) -> Footprint {
        Footprint::default()
    }

    /// The batches that `rows` rows of `d` columns take turns in on this backend's device for a
    /// Lloyd fit of `k` clusters within `budget` bytes (default: [`DEFAULT_BUDGET_SHARE`] of the
    /// free memory): one when they fit resident or the data lives in host memory (see
    /// [`multi::batches::plan`]); `seeds_at_once` as in [`Layout`].
    fn lloyd_batches(
        &self,
        rows: usize,
        d: usize,
        k: usize,
        seeds_at_once: usize,
        budget: Option<usize>,
    ) -> Result<Vec<Range<usize>>> {
        let Some(free) = self.device_memory_free()? else {
            // The rows stay where they are, in host memory.
            return Ok(std::iter::once(0..rows).collect());
        };
        let budget = budget.unwrap_or((free as f64 * DEFAULT_BUDGET_SHARE) as usize);
        let footprint = |n| self.lloyd_footprint(n, d, k, seeds_at_once);
        multi::batches::plan(rows, d, &footprint, budget)
    }

    /// The least budget under which [`Backend::lloyd_batches`] cuts `rows` rows into at most
    /// `batches` batches (1: resident), or with `None` into any (below it the fit is refused);
    /// `None` where the data lives in host memory.
    fn lloyd_budget(
        &self,
        rows: usize,
        d: usize,
        k: usize,
        seeds_at_once: usize,
        batches: Option<usize>,
    ) -> Result<Option<usize>> {
        if self.device_memory_free()?.is_none() {
            return Ok(None);
        }
        let footprint = |n| self.lloyd_footprint(n, d, k, seeds_at_once);
        Ok(Some(multi::batches::least_budget(
            rows, batches, &footprint,
        )))
    }
}

/// Greedy k-means++ one step per round trip, on any [`Seeding`]: each step's draws located and
/// tried in one [`Seeding::seed_trials`] pass, the lowest potential accepted (ties to the
/// earliest trial). Returns the seeds chosen, the first included: all `k`, or fewer when a
/// step's winner leaves a total weight of 0 (every point then sits on a seed; the caller picks
/// the rest). The reference that a backend's own loop must match.
pub(crate) fn greedy_steps<S: Seeding + ?Sized>(
    seeding: &mut S,
    plan: &GreedyPlan<'_>,
    ws: WeightScale,
) -> Result<Vec<u32>> {
    let trials = plan.trials;
    let mut chosen = vec![plan.first];
    let mut total = plan.total;
    for uniforms in plan
        .uniforms
        .chunks_exact(trials)
        .take(plan.k.saturating_sub(1))
    {
        if total == 0 {
            break;
        }
        let draws: Vec<u64> = uniforms.iter().map(|&u| draw(u, total)).collect();
        let step = seeding.seed_trials(Picks::Draws(&draws), ws)?;
        let best = (0..trials)
            .min_by_key(|&t| (step.potentials[t], t))
            .ok_or_else(|| Error::invalid("trials", "a k-means++ step needs at least one trial"))?;
        seeding.seed_accept(best);
        chosen.push(step.candidates[best]);
        total = step.potentials[best];
    }
    Ok(chosen)
}

/// Seeding on the host's CPU over the points `rows` (`rows.len() / d` of them, point `i`
/// weighing `units[i]` units), as the CPU backend seeds: where a backend's
/// [`Seeding::seed_candidates`] leaves k-means‖'s candidates to the caller, which gathers them.
pub(crate) fn host_seeding<'a>(
    rows: &'a [f32],
    d: usize,
    metric: AssignMetric,
    units: Vec<u64>,
) -> Box<dyn Seeding + 'a> {
    Box::new(cpu::Seeder::new(rows, d, metric, 0).weighted(units))
}

// ---- Pairwise distances and kNN -------------------------------------------------------------

/// Where row blocks of a distance matrix go: `(first row, block)`.
pub(crate) type BlockSink<'s> = dyn FnMut(usize, ndarray::ArrayView2<'_, f32>) -> Result<()> + 's;

/// Where [`KnnSearch::search_to`] puts a search's keys (`rows × k`, each row nearest first).
pub(crate) trait KeySink: Send {
    /// Readies the place of every key (first-touches its pages), beside the search's first
    /// batch while the device works; a search may skip it (small answers).
    fn prepare(&mut self);
    /// Keys `at..at + keys.len()` of the answer.
    fn put(&mut self, at: usize, keys: &[u64]);
}

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

    /// [`Distances::knn_index`], built beside whatever the backend computes meanwhile (a GPU
    /// copies the rows on its copy stream and its searches wait for them), so that a streamed
    /// search uploads the next part while it searches this one.
    fn knn_index_beside(
        &self,
        train: &MatrixView<'_>,
        metric: PairMetric,
    ) -> Result<Box<dyn KnnSearch>> {
        self.knn_index(train, metric)
    }
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

    /// [`KnnSearch::search`] with `i64` indices: by default widened from its `u32` ones on the
    /// rayon threads; the GPU writes them straight from its keys.
    fn search_i64(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
    ) -> Result<Neighbours<i64>> {
        let found = self.search(queries, k, selection, max_bytes)?;
        Ok(Neighbours {
            indices: crate::host_tasks::mapped(&found.indices, |&i| i64::from(i)),
            distances: found.distances,
            selection: found.selection,
            prefilter: found.prefilter,
        })
    }

    /// [`KnnSearch::search`]'s neighbours as keys ([`kernels_gpu::knn::key`]), written over
    /// `keys` (`rows × k`, each row nearest first) so that a caller can reuse its memory; the
    /// selection that ran and the prefilter's report.
    fn search_keys(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        keys: &mut Vec<u64>,
    ) -> Result<(Selection, Option<vocab::PrefilterReport>)> {
        let found = self.search(queries, k, selection, max_bytes)?;
        keys.clear();
        let pairs = found.indices.iter().zip(&found.distances);
        keys.extend(pairs.map(|(&i, &d)| kernels_gpu::knn::key(d, i)));
        Ok((found.selection, found.prefilter))
    }

    /// [`KnnSearch::search_keys`] into `sink`, which places the keys itself (a copy of a GPU set
    /// writes its share of one answer). By default the keys come whole, at the end; the GPU
    /// readies the sink beside its first batch and hands it each piece as it comes back.
    fn search_to(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        sink: &mut dyn KeySink,
    ) -> Result<(Selection, Option<vocab::PrefilterReport>)> {
        let mut keys = Vec::new();
        let found = self.search_keys(queries, k, selection, max_bytes, &mut keys)?;
        sink.put(0, &keys);
        Ok(found)
    }

    /// Every query row's training rows at distance `≤ radius` (not NaN), as keys sorted per
    /// query; distances are the floats that [`KnnSearch::search`] reports.
    fn radius(
        &self,
        queries: &MatrixView<'_>,
        radius: f32,
        max_bytes: Option<usize>,
    ) -> Result<radius::RadiusKeys>;

    /// Allows (the default) or forbids the TF32 tensor-core prefilter where the backend has one
    /// (CUDA, compute capability ≥ 8.0, the L2 family); the answer is the same either way.
    fn set_prefilter(&mut self, _allowed: bool) {}

    /// Makes ready, before the first search of `queries` rows for `k` neighbours (with
    /// `vote: Some(proba)`, the first vote), what that search would otherwise allocate (device
    /// buffers, page-locked staging) or time, so that it costs what later ones do. A hint: a
    /// backend without such buffers does nothing.
    fn prepare(
        &self,
        _queries: usize,
        _k: usize,
        _selection: Selection,
        _max_bytes: Option<usize>,
        _vote: Option<bool>,
    ) -> Result<()> {
        Ok(())
    }

    /// What [`Selection::Auto`] chose for `k` on this index and the timings behind the choice,
    /// once a search has made it (only the GPU times paths).
    fn auto_report(&self, _k: usize) -> Option<vocab::AutoReport> {
        None
    }

    /// How the index spreads over a GPU set ([`vocab::KnnLayout::Shard`] or
    /// [`vocab::KnnLayout::Replicate`]); `None` on one device.
    fn layout(&self) -> Option<vocab::KnnLayout> {
        None
    }

    /// Sets the class (`< classes`) of every training row, for [`KnnSearch::vote`].
    fn set_labels(&mut self, class_ids: &[u32], classes: usize) -> Result<()>;

    /// Sets every training row's sample weight over the largest (in `[0, 1]`), which scales its
    /// votes (see `kernels_gpu::knn::vote_weight`).
    fn set_row_weights(&mut self, relative: &[f32]) -> Result<()>;

    /// The winning class of every query row among its `k` nearest under `rule`, and with `proba`
    /// the share of the vote of every class (`rows × classes`).
    fn vote(
        &self,
        queries: &MatrixView<'_>,
        k: usize,
        selection: Selection,
        max_bytes: Option<usize>,
        rule: VoteRule,
        proba: bool,
    ) -> Result<Votes>;
}

/// What a kNN search returns.
pub(crate) struct Neighbours<I = u32> {
    /// `rows × k` training row indices, each row nearest first.
    pub indices: Vec<I>,
    /// The matching distances.
    pub distances: Vec<f32>,
    /// The selection that ran.
    pub selection: Selection,
    /// Queries that went through the TF32 prefilter and, of those, how many fell back to the
    /// exact path (too many candidates); `None` when the prefilter did not run.
    pub prefilter: Option<vocab::PrefilterReport>,
}

/// Appends the training indices and distances of `keys` (see [`kernels_gpu::knn::key`]).
pub(crate) fn split_keys(keys: &[u64], indices: &mut Vec<u32>, distances: &mut Vec<f32>) {
    use kernels_gpu::knn::{key_distance, key_index};
    indices.extend(keys.iter().map(|&key| key_index(key)));
    distances.extend(keys.iter().map(|&key| key_distance(key)));
}

/// Writes the training indices and distances of `keys` into `indices` and `distances` (as long)
/// on the rayon threads, in a few tasks of a megabyte or more ([`crate::host_tasks`]). Into
/// arrays fresh from the allocator (`vec![0; len]`, pages not yet touched), the first touch of
/// their pages, which costs microseconds a page on the GPU machines, is spread over the tasks
/// too.
pub(crate) fn split_keys_into<I: NeighbourIndex>(
    keys: &[u64],
    indices: &mut [I],
    distances: &mut [f32],
) {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and the split writes only initialised values
    // through these views, so the arrays stay initialised.
    let (indices, distances) = unsafe {
        (
            &mut *(indices as *mut [I] as *mut [MaybeUninit<I>]),
            &mut *(distances as *mut [f32] as *mut [MaybeUninit<f32>]),
        )
    };
    split_keys_to(keys, indices, distances);
}

/// [`split_keys_into`] for arrays that may not be written yet (a share of an answer's spare
/// capacity): every slot of the first `keys.len()` of each is written.
pub(crate) fn split_keys_to<I: NeighbourIndex>(
    keys: &[u64],
    indices: &mut [MaybeUninit<I>],
    distances: &mut [MaybeUninit<f32>],
) {
    use kernels_gpu::knn::{key_distance, key_index};
    use rayon::prelude::*;
    /// Keys a task splits are a multiple of this: whole pages of indices (16 or 32 KiB).
    const PAGES: usize = 1 << 12;
    type Slots<'a, I> = (&'a mut [MaybeUninit<I>], &'a mut [MaybeUninit<f32>]);
    let split = |((indices, distances), keys): (Slots<'_, I>, &[u64])| {
        for ((i, d), &key) in indices.iter_mut().zip(distances).zip(keys) {
            i.write(I::from(key_index(key)));
            d.write(key_distance(key));
        }
    };
    // A key and its split.
    let bytes = 12 + size_of::<I>();
    let per_task = crate::host_tasks::items_per_task(keys.len(), bytes, PAGES);
    if per_task >= keys.len() {
        return split(((indices, distances), keys));
    }
    (indices.par_chunks_mut(per_task))
        .zip(distances.par_chunks_mut(per_task))
        .zip(keys.par_chunks(per_task))
        .for_each(split);
}

/// What a kNN vote returns.
pub(crate) struct Votes {
    /// The winning class of every query row.
    pub classes: Vec<u32>,
    /// `rows × classes` vote shares (empty unless asked for).
    pub proba: Vec<f32>,
}
