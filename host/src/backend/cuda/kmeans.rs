//! Lloyd iterations on the GPU: the data stays resident and a step copies back four numbers.
//! Small shapes (few dimensions, centroids that fit in shared memory) take the fused path of
//! `kernels_gpu::small`: one kernel assigns and accumulates, one finalizes and summarizes, and a
//! fit queues many such steps before it waits ([`queued`]). Other shapes launch five kernels:
//! centroid norms, the register-tiled assign, accumulate, finalize and summary (four when the
//! sums are global: the exact assign kernel then accumulates too).
//! Spherical k-means always takes the second path, with one more kernel after the finalize that
//! scales the new centroids to unit norm.

use super::init::{
    CudaCandidates, CudaSeeder, HostRows, ParkedSeeder, Rows, SeedReplay, SeederSpare,
};
use super::launch::{Reads, Writes};
use super::nccl::Rank;
use super::slot::{Slot, dev_opt};
use super::{CudaBackend, Mapped, arg_u32};
use crate::backend::traffic;
use crate::backend::vocab::{Metric, Precision};
use crate::backend::{
    AcrossGpus, AssignStats, Footprint, GreedyPlan, Layout, Lloyd, LloydSpec, Picks, Readback,
    Residency, SPHERICAL_POINT_SQ_NORM, Seeding, Seeds, StepRun, StepStats, Trials,
};
use crate::backend::{Farthest, Partial, Tally, farthest, squared_shift};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use cudarc::driver::{CudaEvent, CudaSlice};
use kernels_gpu::assign::{
    ASSIGN_WIDE, AssignParams, AssignTile, KMEANS_ASSIGN_L1_NARROW, KMEANS_ASSIGN_L1_WIDE,
    KMEANS_ASSIGN_L2_NARROW, KMEANS_ASSIGN_L2_WIDE,
};
use kernels_gpu::assign_tf32::bound::{
    TF32_TILE_MAXIMA, TILE_MAXIMA_SHARED_BYTES, TILE_MAXIMA_WORDS, TileMaximaParams,
};
use kernels_gpu::assign_tf32::full_pass::{
    FullPassParams, KMEANS_ASSIGN_L2_FULL_PASS, flagged_len, full_pass_grid, full_pass_shared_bytes,
};
use kernels_gpu::assign_tf32::{
    AssignTf32Params, KMEANS_ASSIGN_L2_TF32, KMEANS_ASSIGN_L2_TF32_WG, TF32_POINT_DIMS,
    tf32_shared_bytes, wg_shared_bytes,
};
use kernels_gpu::assign_tf32::{tf32_grid, tf32_tiles};
use kernels_gpu::centroids::{
    CentroidsByDimensionParams, KMEANS_CENTROIDS_BY_DIMENSION,
    SHARED_BYTES as CENTROIDS_BY_DIMENSION_SHARED_BYTES, centroids_by_dimension_grid,
};
use kernels_gpu::fixed::weight_units;
use kernels_gpu::fixed::{inv_pow2_f64, pow2_f32};
use kernels_gpu::launch::{BLOCK, SEED_CANDIDATES};
use kernels_gpu::math::AssignMetric;
use kernels_gpu::norms::{ROW_SQ_NORMS, RowSqNormsParams, row_sq_norms_grid};
use kernels_gpu::params::DevPtr;
use kernels_gpu::reduce::shift_parts_grid;
use kernels_gpu::reduce::{
    KMEANS_SHIFT_PARTS, KMEANS_SUMMARY, SHIFT_PARTS_SHARED_BYTES, SUMMARY_SHARED_BYTES,
    ShiftPartsParams, SummaryParams,
};
use kernels_gpu::seeding::WeightScale;
use kernels_gpu::small::{
    FinalizeSmallParams, KMEANS_FINALIZE_SMALL, SMALL_L1_KERNELS, SMALL_L2_KERNELS, SMALL_STEPS,
    SmallParams, SmallStep, finalize_shared_bytes, finalize_small_grid, finalize_small_parts,
};
use kernels_gpu::small::{HaltRule, MODE_ACCUMULATE, MODE_ASSIGN, prune};
use kernels_gpu::update::columns::{
    AccumulateColumnsParams, KMEANS_ACCUMULATE_COLUMNS, accumulate_columns_bytes, column_plan,
};
use kernels_gpu::update::sorted::{
    AccumulateSortedParams, KMEANS_ACCUMULATE_SORTED, accumulate_sorted_bytes, sorted_rows,
};
use kernels_gpu::update::sums_fit_shared;
use kernels_gpu::update::{
    AccumulateGlobalParams, AccumulateSharedParams, FINALIZE_SHARED_BYTES, FinalizeParams,
    KMEANS_ACCUMULATE_GLOBAL, KMEANS_ACCUMULATE_SHARED, KMEANS_FINALIZE, KMEANS_NORMALIZE_ROWS,
    NormalizeRowsParams, accumulate_global_grid, accumulate_shared_bytes, finalize_grid,
    normalize_rows_grid,
};
use rayon::prelude::*;

mod queued;

pub(crate) struct CudaLloyd<'a> {
    gpu: &'a CudaBackend,
    /// The rows on the host (for [`Readback::gather`]).
    host: &'a [f32],
    layout: Layout,
    /// Rows of `x` past the `n` points where seeds given as points are staged.
    scratch: usize,
    n: usize,
    d: usize,
    k: usize,
    metric: AssignMetric,
    /// Spherical k-means (see [`LloydSpec::metric`]).
    spherical: bool,
    tile: AssignTile,
    /// The fused small-shape path, when the shape allows it.
    small: Option<SmallPath>,
    /// Blocks of the assign kernel in use (one inertia partial each).
    assign_blocks: usize,
    /// Whether the assignment runs on TF32 tensor cores (`kmeans_assign_l2_tf32`).
    tf32: bool,
    /// The points, then `scratch` rows; `None` while released ([`Residency::release_rows`]).
    x: Option<CudaSlice<f32>>,
    /// The scratch rows' values, kept on the host while the rows are released.
    scratch_rows: Vec<f32>,
    /// Whether accumulations leave their sums on the device ([`AcrossGpus::hold_sums`]).
    hold_sums: bool,
    /// The end of the rows' upload on the copy stream ([`Residency::prefetch_rows`]), which the
    /// compute stream has yet to wait for.
    rows_ready: Option<CudaEvent>,
    /// Every point's units; `None`: one each (the kernels get a null pointer).
    weights: Option<Slot<f32>>,
    /// The units on the host, uploaded again after a turn off the device.
    host_weights: Option<&'a [f32]>,
    x_sq_norms: Slot<f32>,
    scales: Slot<f32>,
    inv_scales: Slot<f64>,
    inertia_scale: f32,
    inertia_unit: f64,
    centroids: Slot<f32>,
    c_sq_norms: Slot<f32>,
    /// Each centroid tile's largest bound terms (`tf32_tile_maxima`, three words a tile) for the
    /// TF32 kernel's error bound (empty on the other paths).
    tile_maxima: Slot<f32>,
    /// The points the TF32 kernel leaves to `kmeans_assign_l2_full_pass`: `[count, tickets,
    /// ids…]`, zero between steps (empty on the other paths).
    flagged: Slot<u32>,
    /// The centroids by dimension, `d × k_padded` (`k_padded`: `k` rounded up to 4; the padding columns
    /// stay zero), for the exact assign kernels.
    centroids_t: Slot<f32>,
    next: Slot<f32>,
    labels: Slot<u32>,
    min_dist: Slot<f32>,
    /// The fixed-point inertia of every assign block.
    block_inertia: Slot<i64>,
    /// The centroid shift's per-block parts (`kmeans_shift_parts`), one per `SHIFT_PART`
    /// coordinates.
    shift_parts: Slot<f64>,
    /// `[changed labels, empty clusters]`; zero at the start of every step (the summary kernels
    /// zero them after reading).
    counters: Slot<u32>,
    /// `[changed, empty, inertia, shift]`: what comes back per step, written by the summary
    /// kernels straight into mapped host memory (the inertia as its fixed-point integer); a slot
    /// of four per step queued back to back ([`queued`]).
    summary: Mapped<f64>,
    /// The halt word of steps queued back to back ([`queued`]).
    halt: Slot<u32>,
    /// How many steps the next run of queued steps may hold ([`queued`]).
    queued_steps: usize,
    /// Every cluster's weight from the last update.
    sizes: Slot<u64>,
    sums: Sums,
    /// Seeding buffers, made on first use.
    seeder: Option<CudaSeeder>,
    /// The seeding buffers in host memory while the batch is off the device.
    parked_seeder: Option<ParkedSeeder>,
    /// The host memory they were parked in, while they are on the device.
    seeder_spare: SeederSpare,
    /// Whether the batch's last turn read the labels it held before the turn (its next turn
    /// likely reads them too, so they go up beside the rows: [`Residency::prefetch_rows`]). A
    /// Lloyd step's turn does not: its assignment writes every label before the update reads
    /// them, and counts the changes against the host's copy as they come back.
    labels_in_use: bool,
    /// Whether this turn read labels that it did not assign.
    labels_read: bool,
    /// Whether this turn's assignment wrote every label.
    labels_assigned: bool,
    /// Whether the device buffers are freed (a streamed batch between its turns; see
    /// [`CudaLloyd::park`]).
    parked: bool,
    /// Whether the points' squared norms are to be computed again (after a turn off the device).
    norms_stale: bool,
    /// Whether the assignment under way counts its changed labels on the host
    /// ([`CudaLloyd::labels_for_assignment`]).
    changes_on_host: bool,
    /// The trials last given as points (staged in the scratch rows).
    staged: Vec<f32>,
    /// The seeds so far while the seeding is a greedy k-means++ one from points (see
    /// [`SeedReplay`]); `None` otherwise.
    replay: Option<SeedReplay>,
}

/// Where the update accumulates: per-block partials (shared memory) or one global set; `counts`
/// are the clusters' weights.
struct Sums {
    parts: usize,
    shared: bool,
    sums: Slot<i64>,
    counts: Slot<u64>,
}

/// The small-shape path's kernel and its global fixed-point sums and weights, which its finalize
/// kernel zeroes after use (so they start every step at zero without a memset).
struct SmallPath {
    /// Index of the kernel in `SMALL_STEPS`.
    kernel: usize,
    sums: Slot<i64>,
    counts: Slot<u64>,
    /// The finalize's per-block totals and its count of blocks done (zero between launches).
    finalize_parts: Slot<u64>,
    /// The pruned scan's bounds, on the wide steps for squared L2.
    prune: Option<Pruning>,
}

/// The per-point, per-group lower bounds and the centroids' drifts of the pruned scan
/// (`kernels_gpu::small::prune`), which steps queued back to back keep up to date, with the
/// cluster sums and weights of the current labels (their finalize leaves them).
struct Pruning {
    lower: Slot<f32>,
    drift: Slot<f32>,
    /// Whether the bounds, drift and sums belong to the current labels and centroids: set once
    /// a queued step has written them, cleared by everything else that moves either (a step
    /// then scans every point and writes them afresh, from zeroed sums).
    valid: bool,
}

/// What [`CudaLloyd::summarize`] reads back.
struct Summary {
    changed: u64,
    empty: usize,
    inertia: f64,
    shift: f64,
}

impl Summary {
    /// What a Lloyd step reports.
    fn step_stats(&self) -> StepStats {
        StepStats {
            assign: AssignStats {
                changed: self.changed,
                inertia: self.inertia,
            },
            empty: self.empty,
            shift: self.shift,
        }
    }
}

/// Whether this GPU and `spec` allow the TF32 assignment (squared L2, tensor cores).
fn check_tf32(gpu: &CudaBackend, spec: &LloydSpec<'_>) -> Result<()> {
    if spec.metric != Metric::L2 {
        return Err(Error::invalid(
            "precision",
            "precision tf32 needs metric l2",
        ));
    }
    let (major, minor) = gpu.info().compute_capability;
    if major < 8 {
        return Err(Error::invalid(
            "precision",
            format!(
                "precision tf32 needs a GPU of compute capability 8.0 or later (TF32 \
                 tensor cores); {} has {major}.{minor}",
                gpu.info().name
            ),
        ));
    }
    Ok(())
}

/// Whether `Precision::Auto` takes the TF32 assignment for `d` dimensions and `k` clusters (past
/// the small-shape step, which [`assign_path`] prefers): squared L2 on sm_80 or later, with
/// [`TF32_DIMS`] dimensions (a multiple of 4: rows staged in 16-byte copies) and at least
/// [`TF32_MIN_K`] clusters, where `gpu-bench --precision-shapes 200000` measured it 1.1–3×
/// faster than the FP32 kernels on an H100 (docs/BENCHMARKS.md); slower at fewer clusters and
/// at odd widths (word copies).
fn tf32_pays(gpu: &CudaBackend, metric: Metric, d: usize, k: usize) -> bool {
    metric == Metric::L2
        && gpu.info().compute_capability.0 >= 8
        && TF32_DIMS.contains(&d)
        && d.is_multiple_of(4)
        && k >= TF32_MIN_K
}

/// The dimensions at which `Precision::Auto` takes the TF32 assignment.
const TF32_DIMS: std::ops::RangeInclusive<usize> = 32..=512;
/// The fewest clusters at which `Precision::Auto` takes the TF32 assignment.
const TF32_MIN_K: usize = 1024;

/// The assign path of a job: the small step's index in `SMALL_STEPS` when it applies, and
/// whether the TF32 kernel runs (asked for by `tf32`, and not on the small path).
///
/// The small step runs when two of its blocks fit on a multiprocessor (fewer hide no latency).
/// It also serves TF32 requests: for these shapes the exact step is faster than the tensor-core
/// kernel (measured 2.5–7× on the benchmark's A, B, C), and exact. Spherical k-means needs the
/// tiled path: its point and centroid norms are given, not computed, and its centroids are
/// renormalised between the finalize and the shift.
fn assign_path(
    gpu: &CudaBackend,
    d: usize,
    k: usize,
    spherical: bool,
    tf32: bool,
) -> (Option<usize>, bool) {
    let small_shape = SmallStep::for_d(d)
        .filter(|&i| SMALL_STEPS[i].fits(k, d, gpu.max_shared_per_block() / 2))
        .filter(|_| !spherical);
    (small_shape, tf32 && small_shape.is_none())
}

/// Blocks of per-block update sums (`kmeans_accumulate_shared`'s grid) for `n` points: two per
/// multiprocessor, fewer when there are fewer points than that; one global set when the sums do
/// not fit in `shared` memory; none on the `small` path, which keeps its own sums.
fn update_parts(gpu: &CudaBackend, n: usize, small: bool, shared: bool) -> usize {
    if small {
        0
    } else if shared {
        n.div_ceil(BLOCK as usize)
            .min(2 * gpu.multiprocessors())
            .max(1)
    } else {
        1
    }
}

/// Upper bounds of what [`CudaLloyd::new`] and its seeding buffers allocate for `n` rows (see
/// [`Footprint`]).
pub(crate) fn footprint(
    gpu: &CudaBackend,
    n: usize,
    d: usize,
    k: usize,
    seeds_at_once: usize,
) -> Footprint {
    let scratch = seeds_at_once.max(SEED_CANDIDATES);
    let (kd, f32s, i64s) = (k * d, size_of::<f32>(), size_of::<i64>());
    // The small path's sums, and the update's: a set per block when they fit in shared memory
    // (at most two blocks a multiprocessor, whatever the rows).
    let sum_sets = 1 + update_parts(gpu, usize::MAX / 2, false, sums_fit_shared(k, d));
    // Distances, norms and sample weights; seeding norms, distances, nearest seeds and samples;
    // the TF32 path's queue for the full pass; the per-block partials (inertia, seeding sums)
    // take under a byte per row: 4 more; the pruned scan's bounds where the wide small step may
    // run (squared L2 or not). The labels go up with the rows (`rows`).
    let wide_small = assign_path(gpu, d, k, false, false)
        .0
        .is_some_and(|i| SMALL_STEPS[i].rows_in_shared());
    let bounds = if wide_small { prune::groups(k) * 4 } else { 0 };
    let per_row = 8 * 4 + 4 + bounds;
    // Centroids, next and by dimension (padded); norms, sizes and counts; the shift's parts; a
    // margin for the small buffers.
    let per_fit = 2 * kd * f32s
        + d * by_dimension_cols(k) * f32s
        + sum_sets * (kd + k) * i64s
        + 4 * k * i64s
        + shift_parts_grid(kd) * size_of::<f64>()
        + (64 << 10);
    Footprint {
        rows: (n + scratch) * d * f32s + n * size_of::<u32>(),
        per_row: n * per_row,
        per_fit,
    }
}

impl Drop for CudaLloyd<'_> {
    fn drop(&mut self) {
        self.gpu.bind_for_drop();
        // Prefetched rows and labels are freed on the copy stream, which does not wait for the
        // kernels that read them (`release_rows` waits; a fit that stops on an error may not
        // have).
        if self.x.is_some() || !self.parked {
            self.gpu.finish_queued_for_drop();
        }
    }
}

impl<'a> CudaLloyd<'a> {
    pub(crate) fn new(
        gpu: &'a CudaBackend,
        data: &'a MatrixView<'a>,
        layout: Layout,
        spec: &LloydSpec<'a>,
    ) -> Result<Self> {
        let (n, d, k) = (data.rows(), data.cols(), spec.k);
        let (metric, spherical) = (spec.metric.assign(), spec.spherical());
        let scratch = layout.seeds_at_once.max(SEED_CANDIDATES);
        arg_u32(n + scratch, "number of points")?;
        arg_u32(d, "number of dimensions")?;
        arg_u32(k, "k")?;
        let tf32 = match spec.precision {
            Precision::Tf32 => {
                check_tf32(gpu, spec)?;
                true
            }
            Precision::Auto => tf32_pays(gpu, spec.metric, d, k),
            Precision::Exact => false,
        };
        let tile = AssignTile::for_k(k);
        let (small_shape, tf32) = assign_path(gpu, d, k, spherical, tf32);
        let assign_blocks = match small_shape {
            Some(i) => SMALL_STEPS[i].grid(n),
            None if tf32 => tf32_grid(n),
            None => tile.grid(n),
        };
        let small = match small_shape {
            Some(i) => Some(SmallPath {
                kernel: i,
                sums: Slot::zeros(gpu, k * d, "cluster sums")?,
                counts: Slot::zeros(gpu, k, "cluster counts")?,
                finalize_parts: Slot::zeros(
                    gpu,
                    finalize_small_parts(k, d),
                    "the finalize's block totals",
                )?,
                prune: match SMALL_STEPS[i].rows_in_shared() && metric == AssignMetric::SqL2 {
                    true => Some(Pruning {
                        lower: Slot::zeros(gpu, prune::groups(k) * n, "the points' bounds")?,
                        drift: Slot::zeros(gpu, k, "the centroids' drift")?,
                        valid: false,
                    }),
                    false => None,
                },
            }),
            None => None,
        };
        let shared = sums_fit_shared(k, d);
        let parts = update_parts(gpu, n, small.is_some(), shared);
        let f32_scales: Vec<f32> = spec.scales.iter().map(|&s| pow2_f32(s)).collect();
        let f64_inv: Vec<f64> = spec.scales.iter().map(|&s| inv_pow2_f64(s)).collect();
        // The small step computes the points' norms itself.
        let norms_len = if small.is_some() { 0 } else { n };
        let by_dimension_len = if small.is_some() || tf32 {
            0
        } else {
            d * by_dimension_cols(k)
        };
        let scratch_rows = vec![0.0; scratch * d];
        let x = gpu.upload_rows(data.as_slice(), &scratch_rows, "the data")?;
        let mut lloyd = CudaLloyd {
            gpu,
            host: data.as_slice(),
            layout,
            scratch,
            n,
            d,
            k,
            metric,
            spherical,
            tile,
            small,
            assign_blocks,
            tf32,
            x: Some(x),
            scratch_rows,
            hold_sums: false,
            rows_ready: None,
            weights: match spec.weights {
                Some(w) => Some(Slot::device(gpu.upload(w, "sample weights")?)),
                None => None,
            },
            host_weights: spec.weights,
            x_sq_norms: Slot::device(point_norms_buffer(gpu, norms_len, spherical)?),
            scales: Slot::device(gpu.upload(&f32_scales, "fixed-point scales")?),
            inv_scales: Slot::device(gpu.upload(&f64_inv, "fixed-point scales")?),
            inertia_scale: pow2_f32(spec.inertia_exponent),
            inertia_unit: spec.inertia_unit,
            centroids: Slot::zeros(gpu, k * d, "centroids")?,
            c_sq_norms: Slot::zeros(gpu, k, "centroid norms")?,
            tile_maxima: Slot::zeros(
                gpu,
                if tf32 {
                    TILE_MAXIMA_WORDS * tf32_tiles(k)
                } else {
                    0
                },
                "centroid tiles' bound terms",
            )?,
            flagged: Slot::zeros(
                gpu,
                if tf32 { flagged_len(n) } else { 0 },
                "the full pass's queue",
            )?,
            centroids_t: Slot::zeros(gpu, by_dimension_len, "centroids by dimension")?,
            next: Slot::zeros(gpu, k * d, "centroids")?,
            labels: Slot::zeros(gpu, n, "labels")?,
            min_dist: Slot::zeros(gpu, n, "distances")?,
            block_inertia: Slot::zeros(gpu, assign_blocks, "inertia partials")?,
            shift_parts: Slot::zeros(gpu, shift_parts_grid(k * d), "shift partials")?,
            counters: Slot::zeros(gpu, 2, "counters")?,
            summary: gpu.mapped(4 * queued::MAX_STEPS, "the step summary")?,
            halt: Slot::zeros(gpu, 1, "the halt word")?,
            queued_steps: queued::FIRST_STEPS,
            sizes: Slot::zeros(gpu, k, "cluster sizes")?,
            sums: Sums {
                parts,
                shared,
                sums: Slot::zeros(gpu, parts * k * d, "cluster sums")?,
                counts: Slot::zeros(gpu, parts * k, "cluster counts")?,
            },
            seeder: None,
            parked_seeder: None,
            seeder_spare: SeederSpare::default(),
            labels_in_use: false,
            labels_read: false,
            labels_assigned: false,
            parked: false,
            norms_stale: false,
            changes_on_host: false,
            staged: vec![],
            replay: None,
        };
        if lloyd.computes_point_norms() {
            lloyd.point_norms()?;
        }
        Ok(lloyd)
    }

    /// Whether the points' squared norms are computed from the rows (squared L2 off the small
    /// path, which computes them itself; spherical k-means gives them).
    fn computes_point_norms(&self) -> bool {
        self.metric == AssignMetric::SqL2 && self.small.is_none() && !self.spherical
    }

    /// Frees every device buffer but the rows (see [`Residency::release_rows`]), keeping in host
    /// memory what later requests read: labels, distances, inertia partials, centroids, sizes,
    /// scales and the seeding state. The rest comes back as zeros, which is what the next use
    /// expects of it: the sums and counters are zero between requests, the centroids' norms and
    /// by-dimension copy are made from the centroids by every assignment, the points' norms
    /// and units are made again. Waits for the work queued before. Parking a parked batch
    /// parks what went up since (labels fetched with the rows for a request that did not read
    /// them).
    fn park(&mut self) -> Result<()> {
        let gpu = self.gpu;
        // A turn that left the batch parked (a request that reads no rows) says nothing of the
        // next one.
        if !self.parked {
            self.labels_in_use = self.labels_read;
        }
        (self.labels_read, self.labels_assigned) = (false, false);
        self.labels.park(gpu, true, "labels")?;
        self.min_dist.park(gpu, true, "distances")?;
        self.block_inertia.park(gpu, false, "inertia partials")?;
        self.centroids.park(gpu, true, "centroids")?;
        self.next.park(gpu, true, "centroids")?;
        self.sizes.park(gpu, true, "cluster sizes")?;
        self.scales.park(gpu, true, "fixed-point scales")?;
        self.inv_scales.park(gpu, true, "fixed-point scales")?;
        if let Some(w) = self.weights.as_mut() {
            w.park(gpu, false, "sample weights")?;
        }
        self.x_sq_norms.park(gpu, false, "point norms")?;
        self.c_sq_norms.park(gpu, false, "centroid norms")?;
        self.tile_maxima
            .park(gpu, false, "centroid tiles' bound terms")?;
        self.flagged.park(gpu, false, "the full pass's queue")?;
        self.centroids_t
            .park(gpu, false, "centroids by dimension")?;
        self.shift_parts.park(gpu, false, "shift partials")?;
        self.counters.park(gpu, false, "counters")?;
        self.sums.sums.park(gpu, false, "cluster sums")?;
        self.sums.counts.park(gpu, false, "cluster counts")?;
        if let Some(small) = self.small.as_mut() {
            small.sums.park(gpu, false, "cluster sums")?;
            small.counts.park(gpu, false, "cluster counts")?;
            small
                .finalize_parts
                .park(gpu, false, "the finalize's block totals")?;
            if let Some(prune) = small.prune.as_mut() {
                prune.lower.park(gpu, false, "the points' bounds")?;
                prune.drift.park(gpu, false, "the centroids' drift")?;
                prune.valid = false;
            }
        }
        if let Some(seeder) = self.seeder.take() {
            let spare = std::mem::take(&mut self.seeder_spare);
            let replay = self.replay.clone().filter(SeedReplay::pays);
            self.parked_seeder = Some(seeder.park(gpu, spare, replay)?);
        }
        self.parked = true;
        Ok(())
    }

    /// Puts back on the device what [`CudaLloyd::park`] freed; the points' norms are computed
    /// again once the rows are there ([`CudaLloyd::load_rows`]), the labels stay in host memory
    /// until a kernel reads them ([`CudaLloyd::labels_on_device`]: seeding never moves them),
    /// the distances until a kernel writes them ([`CudaLloyd::distances_for`]), and the seeding
    /// state until seeding goes on ([`CudaLloyd::seeder_back`]): the steps after seeding never
    /// move it.
    fn unpark(&mut self) -> Result<()> {
        if !self.parked {
            return Ok(());
        }
        let gpu = self.gpu;
        // What went up beside (the rows, the labels) is there before anything uses it.
        if let Some(uploaded) = self.rows_ready.take() {
            gpu.wait_for(&uploaded)?;
        }
        self.block_inertia.restore(gpu, "inertia partials")?;
        self.centroids.restore(gpu, "centroids")?;
        self.next.restore(gpu, "centroids")?;
        self.sizes.restore(gpu, "cluster sizes")?;
        self.scales.restore(gpu, "fixed-point scales")?;
        self.inv_scales.restore(gpu, "fixed-point scales")?;
        if let (Some(slot), Some(units)) = (self.weights.as_mut(), self.host_weights) {
            slot.refill(gpu, units, "sample weights")?;
        }
        let norms_len = if self.small.is_some() { 0 } else { self.n };
        self.x_sq_norms = Slot::device(point_norms_buffer(gpu, norms_len, self.spherical)?);
        self.norms_stale = self.computes_point_norms();
        self.c_sq_norms.restore(gpu, "centroid norms")?;
        self.tile_maxima
            .restore(gpu, "centroid tiles' bound terms")?;
        self.flagged.restore(gpu, "the full pass's queue")?;
        self.centroids_t.restore(gpu, "centroids by dimension")?;
        self.shift_parts.restore(gpu, "shift partials")?;
        self.counters.restore(gpu, "counters")?;
        self.sums.sums.restore(gpu, "cluster sums")?;
        self.sums.counts.restore(gpu, "cluster counts")?;
        if let Some(small) = self.small.as_mut() {
            small.sums.restore(gpu, "cluster sums")?;
            small.counts.restore(gpu, "cluster counts")?;
            small
                .finalize_parts
                .restore(gpu, "the finalize's block totals")?;
            if let Some(prune) = small.prune.as_mut() {
                prune.lower.restore(gpu, "the points' bounds")?;
                prune.drift.restore(gpu, "the centroids' drift")?;
            }
        }
        self.parked = false;
        Ok(())
    }

    /// Puts the labels on the device for a kernel that reads or writes them (seeding never does,
    /// so its turns leave them in host memory).
    fn labels_on_device(&mut self) -> Result<()> {
        self.labels_read |= !self.labels_assigned;
        self.labels.restore(self.gpu, "labels")
    }

    /// Puts the labels on the device for an assignment, which reads the last ones only to count
    /// the changes: a parked batch's stay in host memory (nothing goes up) and the changes are
    /// counted there as the new ones come back ([`CudaLloyd::read_summary`]).
    fn labels_for_assignment(&mut self) -> Result<()> {
        self.changes_on_host = self.labels.restore_blank(self.gpu, "labels")?;
        self.labels_assigned = true;
        Ok(())
    }

    /// Puts the distances on the device for a kernel that takes them, which writes every one
    /// when it `assigns`: their values kept in host memory go up only when it does not.
    fn distances_for(&mut self, assigns: bool) -> Result<()> {
        if assigns {
            self.min_dist.discard();
        }
        self.min_dist.restore(self.gpu, "distances")
    }

    /// Queues the points' squared norms into `x_sq_norms`.
    fn point_norms(&mut self) -> Result<()> {
        let (n, d) = (self.n, self.d);
        self.gpu.launch(
            ROW_SQ_NORMS,
            row_sq_norms_grid(n),
            0,
            RowSqNormsParams {
                x: on_device(&self.x)?.reads(n * d),
                n: n as u32,
                d: d as u32,
                out: self.x_sq_norms.dev_mut()?.writes(n),
            },
        )
    }

    /// The resident rows (shared with the mini-batch steps, which never release them).
    pub(super) fn rows(&self) -> Result<&CudaSlice<f32>> {
        on_device(&self.x)
    }

    /// Uploads the rows again after [`Residency::release_rows`], the scratch rows as they were, with
    /// the rest of the batch's state.
    fn load_rows(&mut self) -> Result<()> {
        self.unpark()?;
        if self.x.is_none() {
            traffic::up(size_of_val(self.host) + size_of_val(&self.scratch_rows[..]));
            self.x = Some(
                self.gpu
                    .upload_rows(self.host, &self.scratch_rows, "the data")?,
            );
        }
        if let Some(uploaded) = self.rows_ready.take() {
            self.gpu.wait_for(&uploaded)?;
        }
        if self.norms_stale {
            self.point_norms()?;
            self.norms_stale = false;
        }
        Ok(())
    }

    /// The cluster sums and weights of the last accumulation (when `read`); the small path's
    /// are zeroed for the next one (its finalize, which does so otherwise, did not run).
    fn read_sums(&mut self, read: bool) -> Result<Option<(Vec<i64>, Vec<u64>)>> {
        let (gpu, kd) = (self.gpu, self.k * self.d);
        let (sums, counts) = match self.small.as_ref() {
            Some(small) => (small.sums.dev()?, small.counts.dev()?),
            None => (self.sums.sums.dev()?, self.sums.counts.dev()?),
        };
        let read = match read {
            true => Some((
                gpu.download(sums, kd, "cluster sums")?,
                gpu.download(counts, self.k, "cluster counts")?,
            )),
            false => None,
        };
        if let Some(small) = self.small.as_mut() {
            gpu.clear(small.sums.dev_mut()?, "cluster sums")?;
            gpu.clear(small.counts.dev_mut()?, "cluster counts")?;
        }
        Ok(read)
    }

    /// Dynamic shared memory of the exact assign kernel. On sm_80 and later the wide tile gets
    /// the memory that keeps its point tile resident (see
    /// [`AssignTile::resident_shared_bytes`]) as long as two blocks still fit on a
    /// multiprocessor, which has 1 KiB more than a block may opt in to and reserves 1 KiB per
    /// block.
    fn assign_shared_bytes(&self) -> usize {
        let streaming = self.tile.shared_bytes();
        let resident = self.tile.resident_shared_bytes(self.d);
        let per_sm = self.gpu.max_shared_per_block() + 1024;
        let sm80 = self.gpu.info().compute_capability.0 >= 8;
        if sm80 && self.tile == ASSIGN_WIDE && 2 * (resident + 1024) <= per_sm {
            streaming.max(resident)
        } else {
            streaming
        }
    }

    /// Queues the assignment of every point to its nearest current centroid; with `accumulate`
    /// (the exact kernels, global sums only) the assign kernel also adds the points to the
    /// cluster sums, which are zeroed first, so [`Self::queue_update`] only finalizes.
    fn queue_assign(&mut self, accumulate: bool) -> Result<()> {
        self.load_rows()?;
        self.labels_for_assignment()?;
        self.distances_for(true)?;
        let gpu = self.gpu;
        let (n, d, k) = (self.n, self.d, self.k);
        if self.tf32 {
            let centroids = self.centroids.dev()?;
            // The centroids' squared norms come with their tiles' maxima, from the same reads.
            let maxima = TILE_MAXIMA_WORDS * tf32_tiles(k);
            gpu.launch(
                TF32_TILE_MAXIMA,
                tf32_tiles(k),
                TILE_MAXIMA_SHARED_BYTES,
                TileMaximaParams {
                    centroids: centroids.reads(k * d),
                    k: k as u32,
                    d: d as u32,
                    c_sq_norms: self.c_sq_norms.dev_mut()?.writes(k),
                    out: self.tile_maxima.dev_mut()?.writes(maxima),
                },
            )?;
            debug_assert!(!accumulate, "the TF32 kernel does not accumulate");
            // Hopper's warpgroup kernel reads 16-byte pieces of the rows and stages every
            // dimension once, and only the sm_90 cubin has it.
            let (kernel, shared) = if d.is_multiple_of(4)
                && d <= TF32_POINT_DIMS
                && gpu.has_function(KMEANS_ASSIGN_L2_TF32_WG.name)
            {
                (KMEANS_ASSIGN_L2_TF32_WG, wg_shared_bytes(d))
            } else {
                (KMEANS_ASSIGN_L2_TF32, tf32_shared_bytes())
            };
            let grid = tf32_grid(n);
            gpu.launch(
                kernel,
                grid,
                shared,
                AssignTf32Params {
                    x: on_device(&self.x)?.reads(n * d),
                    x_sq_norms: self.x_sq_norms.dev()?.reads(n),
                    n: n as u32,
                    d: d as u32,
                    centroids: centroids.reads(k * d),
                    c_sq_norms: self.c_sq_norms.dev()?.reads(k),
                    tile_maxima: self.tile_maxima.dev()?.reads(maxima),
                    k: k as u32,
                    labels: self.labels.dev_mut()?.writes(n),
                    min_dist: self.min_dist.dev_mut()?.writes(n),
                    changed: self.counters.dev_mut()?.writes(1),
                    block_inertia: self.block_inertia.dev_mut()?.writes(grid),
                    inertia_scale: self.inertia_scale,
                    weights: dev_opt(&self.weights)?.reads(n),
                    flagged: self.flagged.dev_mut()?.writes(flagged_len(n)),
                },
            )?;
            // The points whose shortlists could not settle them, every centroid scored.
            return gpu.launch(
                KMEANS_ASSIGN_L2_FULL_PASS,
                full_pass_grid(n),
                full_pass_shared_bytes(),
                FullPassParams {
                    x: on_device(&self.x)?.reads(n * d),
                    x_sq_norms: self.x_sq_norms.dev()?.reads(n),
                    d: d as u32,
                    centroids: centroids.reads(k * d),
                    c_sq_norms: self.c_sq_norms.dev()?.reads(k),
                    k: k as u32,
                    flagged: self.flagged.dev_mut()?.writes(flagged_len(n)),
                    labels: self.labels.dev_mut()?.writes(n),
                    min_dist: self.min_dist.dev_mut()?.writes(n),
                    changed: self.counters.dev_mut()?.writes(1),
                    block_inertia: self.block_inertia.dev_mut()?.writes(grid),
                    inertia_scale: self.inertia_scale,
                    weights: dev_opt(&self.weights)?.reads(n),
                },
            );
        }
        self.queue_centroids_by_dimension()?;
        let shared = self.assign_shared_bytes();
        // Accumulating, the kernel treats the sums as one global set: the first of the parts.
        let s = &mut self.sums;
        if accumulate {
            gpu.clear(s.sums.dev_mut()?, "cluster sums")?;
            gpu.clear(s.counts.dev_mut()?, "cluster counts")?;
        }
        let kernel = match (self.metric, self.tile == ASSIGN_WIDE) {
            (AssignMetric::SqL2, true) => KMEANS_ASSIGN_L2_WIDE,
            (AssignMetric::SqL2, false) => KMEANS_ASSIGN_L2_NARROW,
            (AssignMetric::L1, true) => KMEANS_ASSIGN_L1_WIDE,
            (AssignMetric::L1, false) => KMEANS_ASSIGN_L1_NARROW,
        };
        let grid = self.tile.grid(n);
        let k_padded = by_dimension_cols(k);
        debug_assert!(shared >= self.tile.shared_bytes());
        gpu.launch(
            kernel,
            grid,
            shared,
            AssignParams {
                x: on_device(&self.x)?.reads(n * d),
                x_sq_norms: self.x_sq_norms.dev()?.reads(n),
                n: n as u32,
                d: d as u32,
                centroids: self.centroids.dev()?.reads(k * d),
                c_sq_norms: self.c_sq_norms.dev()?.reads(k),
                k: k as u32,
                labels: self.labels.dev_mut()?.writes(n),
                min_dist: self.min_dist.dev_mut()?.writes(n),
                changed: self.counters.dev_mut()?.writes(1),
                block_inertia: self.block_inertia.dev_mut()?.writes(grid),
                inertia_scale: self.inertia_scale,
                weights: dev_opt(&self.weights)?.reads(n),
                scales: self.scales.dev()?.reads(d),
                sums: accumulate.then_some(s.sums.dev_mut()?).writes(k * d),
                counts: accumulate.then_some(s.counts.dev_mut()?).writes(k),
                centroids_t: self.centroids_t.dev()?.reads(d * k_padded),
                k_padded: k_padded as u32,
            },
        )
    }

    /// Queues the copy of the centroids by dimension (`d × k_padded`) that the exact assign kernels
    /// stream from, with the centroids' squared norms for squared L2 (not spherical k-means,
    /// whose norms stay 0).
    fn queue_centroids_by_dimension(&mut self) -> Result<()> {
        let norms = self.metric == AssignMetric::SqL2 && !self.spherical;
        let (k, d, k_padded) = (self.k, self.d, by_dimension_cols(self.k));
        self.gpu.launch(
            KMEANS_CENTROIDS_BY_DIMENSION,
            centroids_by_dimension_grid(k),
            CENTROIDS_BY_DIMENSION_SHARED_BYTES,
            CentroidsByDimensionParams {
                centroids: self.centroids.dev()?.reads(k * d),
                k: k as u32,
                d: d as u32,
                k_padded: k_padded as u32,
                out: self.centroids_t.dev_mut()?.writes(d * k_padded),
                norms: norms.then_some(self.c_sq_norms.dev_mut()?).writes(k),
            },
        )
    }

    /// Whether the assign kernel of a step also accumulates the update's sums (global sums on
    /// the exact kernels: the atomics overlap the assignment instead of a pass of their own).
    fn fused_accumulate(&self) -> bool {
        !self.tf32 && !self.sums.shared
    }

    /// Queues the means of the current labels into `next` (clusters without weight keep theirs
    /// and are counted in `counters[1]`; spherical k-means then renormalises the others); with
    /// `accumulated`, the sums are already there.
    fn queue_update(&mut self, accumulated: bool) -> Result<()> {
        self.load_rows()?;
        self.labels_on_device()?;
        let gpu = self.gpu;
        let (n, d, k) = (self.n, self.d, self.k);
        let s = &mut self.sums;
        if accumulated {
            // The assign kernel added the points.
        } else if s.shared {
            gpu.launch(
                KMEANS_ACCUMULATE_SHARED,
                s.parts,
                accumulate_shared_bytes(k, d),
                AccumulateSharedParams {
                    x: on_device(&self.x)?.reads(n * d),
                    n: n as u32,
                    d: d as u32,
                    labels: self.labels.dev()?.reads(n),
                    k: k as u32,
                    weights: dev_opt(&self.weights)?.reads(n),
                    scales: self.scales.dev()?.reads(d),
                    part_sums: s.sums.dev_mut()?.writes(s.parts * k * d),
                    part_counts: s.counts.dev_mut()?.writes(s.parts * k),
                },
            )?;
        } else {
            self.queue_accumulate_global()?;
        }
        let s = &self.sums;
        gpu.launch(
            KMEANS_FINALIZE,
            finalize_grid(k, d, s.parts, gpu.multiprocessors()),
            FINALIZE_SHARED_BYTES,
            FinalizeParams {
                part_sums: s.sums.dev()?.reads(s.parts * k * d),
                part_counts: s.counts.dev()?.reads(s.parts * k),
                parts: s.parts as u32,
                k: k as u32,
                d: d as u32,
                inv_scales: self.inv_scales.dev()?.reads(d),
                old_centroids: self.centroids.dev()?.reads(k * d),
                new_centroids: self.next.dev_mut()?.writes(k * d),
                sizes: self.sizes.dev_mut()?.writes(k),
                empty: self.counters.dev_mut()?.slice_mut(1..2).writes(1),
            },
        )?;
        if self.spherical {
            gpu.launch(
                KMEANS_NORMALIZE_ROWS,
                normalize_rows_grid(k),
                0,
                NormalizeRowsParams {
                    centroids: self.next.dev_mut()?.writes(k * d),
                    sizes: self.sizes.dev()?.reads(k),
                    k: k as u32,
                    d: d as u32,
                },
            )?;
        }
        Ok(())
    }

    /// Queues the sums of the current labels into the first of the sums' parts, zeroed first:
    /// sorted by label in each block where its chunk holds several points per cluster
    /// (`sorted_rows`), else in shared memory a slice of columns at a time where a chunk too
    /// small to sort still holds several (`column_plan`), else one global atomic per coordinate.
    fn queue_accumulate_global(&mut self) -> Result<()> {
        self.load_rows()?;
        self.labels_on_device()?;
        let gpu = self.gpu;
        let s = &mut self.sums;
        gpu.clear(s.sums.dev_mut()?, "cluster sums")?;
        gpu.clear(s.counts.dev_mut()?, "cluster counts")?;
        let (n, d, k) = (self.n, self.d, self.k);
        let sorted = sorted_rows(n, k, d, gpu.multiprocessors(), gpu.max_shared_per_block());
        if let Some(rows) = sorted {
            return gpu.launch(
                KMEANS_ACCUMULATE_SORTED,
                n.div_ceil(rows),
                accumulate_sorted_bytes(k, rows),
                AccumulateSortedParams {
                    x: on_device(&self.x)?.reads(n * d),
                    n: n as u32,
                    d: d as u32,
                    labels: self.labels.dev()?.reads(n),
                    k: k as u32,
                    rows: rows as u32,
                    weights: dev_opt(&self.weights)?.reads(n),
                    scales: self.scales.dev()?.reads(d),
                    sums: s.sums.dev_mut()?.writes(k * d),
                    counts: s.counts.dev_mut()?.writes(k),
                },
            );
        }
        let columns = column_plan(n, k, d, gpu.multiprocessors(), gpu.max_shared_per_block());
        if let Some(plan) = columns {
            return gpu.launch(
                KMEANS_ACCUMULATE_COLUMNS,
                plan.grid(n, d),
                accumulate_columns_bytes(k, plan.cols),
                AccumulateColumnsParams {
                    x: on_device(&self.x)?.reads(n * d),
                    n: n as u32,
                    d: d as u32,
                    labels: self.labels.dev()?.reads(n),
                    k: k as u32,
                    cols: plan.cols as u32,
                    rows: plan.rows as u32,
                    weights: dev_opt(&self.weights)?.reads(n),
                    scales: self.scales.dev()?.reads(d),
                    sums: s.sums.dev_mut()?.writes(k * d),
                    counts: s.counts.dev_mut()?.writes(k),
                },
            );
        }
        gpu.launch(
            KMEANS_ACCUMULATE_GLOBAL,
            accumulate_global_grid(n, d, gpu.multiprocessors()),
            0,
            AccumulateGlobalParams {
                x: on_device(&self.x)?.reads(n * d),
                n: n as u32,
                d: d as u32,
                labels: self.labels.dev()?.reads(n),
                weights: dev_opt(&self.weights)?.reads(n),
                scales: self.scales.dev()?.reads(d),
                sums: s.sums.dev_mut()?.writes(k * d),
                counts: s.counts.dev_mut()?.writes(k),
            },
        )
    }

    fn small_kernel(&self) -> Option<usize> {
        self.small.as_ref().map(|s| s.kernel)
    }

    /// Queues the fused small step: `MODE_ASSIGN` and/or `MODE_ACCUMULATE`; with `halted`, one of
    /// steps queued back to back, which does nothing once the halt word is set and prunes its
    /// scan where the path has bounds (a step on its own scans every point and leaves the bounds
    /// behind).
    fn queue_small(&mut self, kernel: usize, mode: u32, halted: bool) -> Result<()> {
        self.load_rows()?;
        if !halted {
            self.bounds_moved()?;
        }
        match mode & MODE_ASSIGN != 0 {
            true => self.labels_for_assignment()?,
            false => self.labels_on_device()?,
        }
        self.distances_for(mode & MODE_ASSIGN != 0)?;
        let Some(small) = self.small.as_mut() else {
            unreachable!("only called on the small path")
        };
        let (n, d, k) = (self.n, self.d, self.k);
        let step = SMALL_STEPS[kernel];
        debug_assert!(d <= step.max_d);
        let prune = small.prune.as_mut().filter(|_| halted);
        let (lower, drift) = match prune {
            Some(p) => (
                p.lower.dev_mut()?.writes(prune::groups(k) * n),
                p.valid.then_some(p.drift.dev()?).reads(k),
            ),
            None => (DevPtr::NULL, DevPtr::NULL),
        };
        let grid = step.grid(n);
        let entry = match self.metric {
            AssignMetric::SqL2 => SMALL_L2_KERNELS[kernel],
            AssignMetric::L1 => SMALL_L1_KERNELS[kernel],
        };
        let gpu = self.gpu;
        gpu.launch_with(
            gpu.compute_stream(),
            gpu.early_launches(),
            entry,
            grid,
            step.layout(k, d).bytes,
            SmallParams {
                x: on_device(&self.x)?.reads(n * d),
                n: n as u32,
                d: d as u32,
                centroids: self.centroids.dev()?.reads(k * d),
                k: k as u32,
                labels: self.labels.dev_mut()?.writes(n),
                min_dist: self.min_dist.dev_mut()?.writes(n),
                changed: self.counters.dev_mut()?.writes(1),
                block_inertia: self.block_inertia.dev_mut()?.writes(grid),
                inertia_scale: self.inertia_scale,
                weights: dev_opt(&self.weights)?.reads(n),
                scales: self.scales.dev()?.reads(d),
                sums: small.sums.dev_mut()?.writes(k * d),
                counts: small.counts.dev_mut()?.writes(k),
                mode,
                halt: halted.then_some(self.halt.dev()?).reads(1),
                lower,
                drift,
            },
        )
    }

    /// Forgets the pruned scan's bounds: the labels or centroids move outside queued steps. The
    /// sums that the steps with bounds kept are cleared: every other use starts from zero.
    fn bounds_moved(&mut self) -> Result<()> {
        let Some(small) = self.small.as_mut() else {
            return Ok(());
        };
        if let Some(prune) = small.prune.as_mut().filter(|p| p.valid) {
            prune.valid = false;
            self.gpu.clear(small.sums.dev_mut()?, "cluster sums")?;
            self.gpu.clear(small.counts.dev_mut()?, "cluster counts")?;
        }
        Ok(())
    }

    /// Queues the small path's finalize: next centroids, sizes and the four summary numbers,
    /// then copies those back.
    fn finalize_small(&mut self) -> Result<Summary> {
        self.queue_finalize_small(0, None)?;
        self.read_summary()
    }

    /// Queues the small path's finalize, its four summary numbers at `slot · 4` of the summary;
    /// with `halt`, one of steps queued back to back (see `kernels_gpu::small::halt`).
    fn queue_finalize_small(&mut self, slot: usize, halt: Option<HaltRule>) -> Result<()> {
        let Some(small) = self.small.as_mut() else {
            unreachable!("only called on the small path")
        };
        let (k, d) = (self.k, self.d);
        debug_assert!(self.summary.len() >= 4 * (slot + 1));
        let rule = halt.unwrap_or(HaltRule::NEVER);
        // Queued steps keep the pruned scan's drift; the next one may use the bounds.
        let prune = small.prune.as_mut().filter(|_| halt.is_some());
        let drift = match prune {
            Some(p) => {
                p.valid = true;
                p.drift.dev_mut()?.writes(k)
            }
            None => DevPtr::NULL,
        };
        let gpu = self.gpu;
        gpu.launch_with(
            gpu.compute_stream(),
            gpu.early_launches(),
            KMEANS_FINALIZE_SMALL,
            finalize_small_grid(k, d),
            finalize_shared_bytes(k, d, !drift.as_ptr().is_null()),
            FinalizeSmallParams {
                sums: small.sums.dev_mut()?.writes(k * d),
                counts: small.counts.dev_mut()?.writes(k),
                k: k as u32,
                d: d as u32,
                inv_scales: self.inv_scales.dev()?.reads(d),
                current: self.centroids.dev()?.reads(k * d),
                next: self.next.dev_mut()?.writes(k * d),
                sizes: self.sizes.dev_mut()?.writes(k),
                changed: self.counters.dev_mut()?.writes(1),
                block_inertia: self.block_inertia.dev()?.reads(self.assign_blocks),
                blocks: self.assign_blocks as u32,
                out: DevPtr::from_address(
                    *self.summary.device() + (4 * slot * size_of::<f64>()) as u64,
                ),
                halt: halt.map(|_| self.halt.dev_mut()).transpose()?.writes(1),
                halt_shift: rule.shift,
                halt_unchanged: rule.unchanged as u32,
                halt_empty: rule.empty as u32,
                drift,
                parts: small
                    .finalize_parts
                    .dev_mut()?
                    .writes(finalize_small_parts(k, d)),
            },
        )
    }

    /// Reduces the counters, inertia partials and (with `shift`) the centroid shift's parts in
    /// one block, and copies the four numbers back: the step's only synchronisation.
    fn summarize(&mut self, shift: bool) -> Result<Summary> {
        let gpu = self.gpu;
        let parts = if shift {
            let len = self.k * self.d;
            let grid = shift_parts_grid(len);
            gpu.launch(
                KMEANS_SHIFT_PARTS,
                grid,
                SHIFT_PARTS_SHARED_BYTES,
                ShiftPartsParams {
                    next: self.next.dev()?.reads(len),
                    current: self.centroids.dev()?.reads(len),
                    len: len as u32,
                    parts: self.shift_parts.dev_mut()?.writes(grid),
                },
            )?;
            self.shift_parts.dev()?.len()
        } else {
            0
        };
        debug_assert!(self.summary.len() >= 4);
        gpu.launch(
            KMEANS_SUMMARY,
            1,
            SUMMARY_SHARED_BYTES,
            SummaryParams {
                counters: self.counters.dev_mut()?.writes(2),
                block_inertia: self.block_inertia.dev()?.reads(self.assign_blocks),
                blocks: self.assign_blocks as u32,
                shift_parts: self.shift_parts.dev()?.reads(parts),
                parts: parts as u32,
                out: DevPtr::from_address(*self.summary.device()),
            },
        )?;
        self.read_summary()
    }

    /// The changed labels and fixed-point inertia of the assignment just queued (with
    /// `assigned`), read back; zeros without one.
    fn assign_summary(&mut self, assigned: bool) -> Result<(u64, i64)> {
        if !assigned {
            return Ok((0, 0));
        }
        let s = self.summarize(false)?;
        Ok((s.changed, self.fixed_inertia()?))
    }

    fn read_summary(&mut self) -> Result<Summary> {
        let s = self.gpu.read_mapped(&self.summary, "the step summary")?;
        let mut summary = self.summary_of(&s[..4]);
        if std::mem::take(&mut self.changes_on_host) {
            // The labels come back now rather than when the batch is released.
            let units = self.host_weights;
            let counts = |i: usize| weight_units(units.map(|u| u[i])) != 0;
            summary.changed = self.labels.park_changes(self.gpu, "labels", counts)?;
        }
        Ok(summary)
    }

    /// A summary from the four numbers a summary kernel wrote.
    fn summary_of(&self, s: &[f64]) -> Summary {
        Summary {
            changed: s[0] as u64,
            empty: s[1] as usize,
            inertia: s[2] * self.inertia_unit,
            shift: s[3],
        }
    }
}

/// The points' squared norms, `len` of them: the unit rows' for spherical k-means, else zeros
/// for [`CudaLloyd::point_norms`] to fill (or none to read, on the small path).
fn point_norms_buffer(gpu: &CudaBackend, len: usize, spherical: bool) -> Result<CudaSlice<f32>> {
    if spherical {
        gpu.upload(&vec![SPHERICAL_POINT_SQ_NORM; len], "point norms")
    } else {
        gpu.zeros(len, "point norms")
    }
}

/// Columns of the centroids-by-dimension copy for `k` centroids: `k` rounded up to 4, so that
/// its rows are 16-byte aligned for the assign kernels' 16-byte copies.
fn by_dimension_cols(k: usize) -> usize {
    k.next_multiple_of(4)
}

impl CudaLloyd<'_> {
    /// Puts the seeding state parked with the batch back on the device (the rows are there).
    fn seeder_back(&mut self) -> Result<()> {
        let Some(parked) = self.parked_seeder.take() else {
            return Ok(());
        };
        let rows = Rows {
            gpu: self.gpu,
            x: on_device(&self.x)?,
            weights: dev_opt(&self.weights)?,
            counts: None,
            n: self.n,
            d: self.d,
            metric: self.metric,
        };
        let (seeder, spare, replay) = parked.restore(&rows)?;
        (self.seeder, self.seeder_spare) = (Some(seeder), spare);
        match replay {
            Some(replay) => self.replay_seeds(&replay),
            None => Ok(()),
        }
    }

    /// Makes the seeding distances that a park did not keep again from `replay`'s seeds,
    /// staged in the scratch rows a group at a time (one nearest pass each); then puts back
    /// the scratch rows as they were (the staged trials, the pending winner).
    fn replay_seeds(&mut self, replay: &SeedReplay) -> Result<()> {
        for (g, group) in replay.points.chunks(self.scratch * self.d).enumerate() {
            let rows = self.stage(group, 0)?;
            let (r, s) = self.seeding()?;
            s.replay(&r, &rows, g == 0)?;
        }
        let gpu = self.gpu;
        self.seeder.as_mut().expect("restored").replayed(gpu)?;
        let scratch = self.scratch_rows.clone();
        self.stage(&scratch, 0)?;
        Ok(())
    }

    /// The resident rows and the seeding buffers (made on first use).
    fn seeding(&mut self) -> Result<(Rows<'_>, &mut CudaSeeder)> {
        self.load_rows()?;
        self.seeder_back()?;
        let rows = Rows {
            gpu: self.gpu,
            x: on_device(&self.x)?,
            weights: dev_opt(&self.weights)?,
            counts: None,
            n: self.n,
            d: self.d,
            metric: self.metric,
        };
        if self.seeder.is_none() {
            self.seeder = Some(CudaSeeder::new(&rows)?);
        }
        Ok((rows, self.seeder.as_mut().expect("just made")))
    }
}

impl CudaLloyd<'_> {
    /// Writes `points` (at most `scratch` rows) into the scratch rows from `at`; returns their
    /// row indices.
    fn stage(&mut self, points: &[f32], at: usize) -> Result<Vec<u32>> {
        let (n, d) = (self.n, self.d);
        let count = points.len() / d;
        debug_assert!(at + count <= self.scratch);
        self.load_rows()?;
        self.seeder_back()?;
        let what = "seeding points";
        self.gpu
            .write_at(points, on_device_mut(&mut self.x)?, (n + at) * d, what)?;
        if let Some(s) = self.seeder.as_mut() {
            s.restaged(self.gpu, n + at, points, d)?;
        }
        Ok((n + at..n + at + count).map(|r| r as u32).collect())
    }

    /// Moves the accepted trial of the last step, when it is a staged point, to the last
    /// scratch row, out of the way of the next trials (staged from the first).
    fn park_pending(&mut self) -> Result<()> {
        self.load_rows()?;
        self.seeder_back()?;
        let (n, d, last) = (self.n, self.d, self.n + self.scratch - 1);
        let t = match self.seeder.as_mut().and_then(CudaSeeder::pending_row_mut) {
            Some(row) if *row as usize >= n && *row as usize != last => {
                let t = *row as usize - n;
                *row = last as u32;
                t
            }
            _ => return Ok(()),
        };
        let point = self.staged[t * d..(t + 1) * d].to_vec();
        self.load_rows()?;
        let what = "the accepted seeding point";
        self.gpu
            .write_at(&point, on_device_mut(&mut self.x)?, last * d, what)?;
        if let Some(s) = self.seeder.as_mut() {
            s.restaged(self.gpu, last, &point, d)?;
        }
        Ok(())
    }
}

impl Seeding for CudaLloyd<'_> {
    fn seed_nearest(
        &mut self,
        seeds: Seeds<'_>,
        first_id: u32,
        fresh: bool,
        ws: WeightScale,
    ) -> Result<u64> {
        let points = match seeds {
            Seeds::Points(p) if !p.is_empty() => p,
            Seeds::Points(_) => &[],
            Seeds::Rows(rows) => {
                self.replay = None;
                let (r, s) = self.seeding()?;
                return s.nearest(&r, rows, first_id, fresh, ws);
            }
        };
        // Made by a park before this pass, replayed by the first `seeding` below.
        let replay = (fresh && first_id == 0 && points.len() == self.d).then(|| SeedReplay {
            points: points.to_vec(),
        });
        // Staged `scratch` at a time; later groups keep what earlier ones found, as one pass
        // over all of them would.
        let per = self.scratch * self.d;
        let mut total = 0;
        for (g, group) in points.chunks(per).enumerate() {
            let rows = self.stage(group, 0)?;
            let id = first_id + (g * self.scratch) as u32;
            let (r, s) = self.seeding()?;
            total = s.nearest(&r, &rows, id, fresh && g == 0, ws)?;
        }
        self.replay = replay;
        Ok(total)
    }

    fn seed_trials(&mut self, picks: Picks<'_>, ws: WeightScale) -> Result<Trials> {
        let Picks::Seeds(Seeds::Points(points)) = picks else {
            self.replay = None;
            let (r, s) = self.seeding()?;
            return s.trials(&r, picks, ws);
        };
        // This pass lowers the distances to the accepted trial of the last (a staged point).
        let pending = match (&self.seeder, &self.parked_seeder) {
            (Some(s), _) => s.pending(),
            (None, Some(p)) => p.pending(),
            (None, None) => None,
        };
        let d = self.d;
        if let (Some(replay), Some(t)) = (self.replay.as_mut(), pending) {
            replay
                .points
                .extend_from_slice(&self.staged[t * d..(t + 1) * d]);
        }
        self.park_pending()?;
        let rows = self.stage(points, 0)?;
        self.staged = points.to_vec();
        let (r, s) = self.seeding()?;
        let trials = s.trials(&r, Picks::Seeds(Seeds::Rows(&rows)), ws)?;
        Ok(Trials {
            candidates: vec![],
            ..trials
        })
    }

    fn seed_locate(&mut self, draws: &[u64], ws: WeightScale) -> Result<Vec<u32>> {
        // A batch between its turns (or with no draw to locate) stays off the device: a draw
        // reads one block of rows, not a pass over them.
        if draws.is_empty() {
            return Ok(vec![]);
        }
        if let Some(parked) = &self.parked_seeder {
            let rows = HostRows {
                d: self.d,
                metric: self.metric,
                units: self.host_weights,
            };
            return Ok(parked.locate(self.host, &self.scratch_rows, &rows, draws, ws));
        }
        let (r, s) = self.seeding()?;
        s.locate(&r, draws, ws)
    }

    fn seed_accept(&mut self, trial: usize) {
        if let Some(s) = self.seeder.as_mut() {
            s.accept(trial);
        }
        if let Some(s) = self.parked_seeder.as_mut() {
            s.accept(trial);
        }
    }

    fn seed_sample(
        &mut self,
        seed: u64,
        round: u32,
        ell: u64,
        phi: u64,
        ws: WeightScale,
    ) -> Result<Vec<u32>> {
        let first_row = self.layout.first_row;
        let (r, s) = self.seeding()?;
        s.sample(&r, seed, round, first_row, ell, phi, ws)
    }

    fn seed_owner_weights(&mut self, ids: usize) -> Result<Vec<u64>> {
        // Integer sums of host values: no pass over the rows for a batch between its turns.
        if let Some(parked) = &self.parked_seeder {
            return parked.owner_weights(ids, self.n, self.host_weights);
        }
        let (r, s) = self.seeding()?;
        s.owner_weights(&r, ids)
    }

    fn seed_greedy(&mut self, plan: &GreedyPlan<'_>, ws: WeightScale) -> Result<Vec<u32>> {
        self.replay = None;
        let (r, s) = self.seeding()?;
        s.greedy(&r, plan, ws)
    }

    fn seed_candidates(
        &mut self,
        rows: &[u32],
        units: &[u64],
    ) -> Result<Option<Box<dyn Seeding + '_>>> {
        let rows: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
        let points = self.gather(&rows)?;
        let candidates = CudaCandidates::new(self.gpu, &points, units, self.d, self.metric)?;
        Ok(Some(Box::new(candidates)))
    }
}

impl Lloyd for CudaLloyd<'_> {
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.unpark()?;
        self.bounds_moved()?;
        self.gpu
            .write(centroids, self.centroids.dev_mut()?, "centroids")
    }

    fn set_labels(&mut self, labels: &[u32]) -> Result<()> {
        self.bounds_moved()?;
        // A parked batch's labels wait in host memory for the kernel that reads them.
        if self.labels.set_host(labels) {
            return Ok(());
        }
        self.unpark()?;
        self.labels_on_device()?;
        self.gpu.write(labels, self.labels.dev_mut()?, "labels")
    }

    fn assign(&mut self) -> Result<AssignStats> {
        match self.small_kernel() {
            Some(kernel) => self.queue_small(kernel, MODE_ASSIGN, false)?,
            None => self.queue_assign(false)?,
        }
        let s = self.summarize(false)?;
        Ok(AssignStats {
            changed: s.changed,
            inertia: s.inertia,
        })
    }

    fn step(&mut self) -> Result<StepStats> {
        let s = match self.small_kernel() {
            Some(kernel) => {
                self.queue_small(kernel, MODE_ASSIGN | MODE_ACCUMULATE, false)?;
                self.finalize_small()?
            }
            None => {
                let fused = self.fused_accumulate();
                self.queue_assign(fused)?;
                self.queue_update(fused)?;
                self.summarize(true)?
            }
        };
        Ok(s.step_stats())
    }

    fn steps(&mut self, run: &StepRun) -> Result<Vec<StepStats>> {
        match self.small_kernel() {
            Some(kernel) if run.max > 1 && !self.parked && !self.labels.is_freed() => {
                self.queue_steps(kernel, run)
            }
            _ => Ok(vec![self.step()?]),
        }
    }

    fn update(&mut self) -> Result<usize> {
        let s = match self.small_kernel() {
            Some(kernel) => {
                self.queue_small(kernel, MODE_ACCUMULATE, false)?;
                self.finalize_small()?
            }
            None => {
                self.queue_update(false)?;
                self.summarize(false)?
            }
        };
        Ok(s.empty)
    }

    fn relocate(&mut self, cluster: usize, point: usize) -> Result<()> {
        let d = self.d;
        let what = "a point into an empty cluster";
        self.unpark()?;
        self.bounds_moved()?;
        let row = &self.host[point * d..(point + 1) * d];
        self.gpu
            .write_at(row, self.next.dev_mut()?, cluster * d, what)
    }

    fn copy_next_row(&mut self, from: usize, to: usize) -> Result<()> {
        let (d, what) = (self.d, "a centroid into an empty cluster");
        self.unpark()?;
        self.bounds_moved()?;
        let row = (self.gpu).download_range(self.next.dev()?, from * d..(from + 1) * d, what)?;
        self.gpu.write_at(&row, self.next.dev_mut()?, to * d, what)
    }

    fn shift(&mut self) -> Result<f64> {
        Ok(self.summarize(true)?.shift)
    }

    fn exact_shift(&mut self) -> Result<f64> {
        let kd = self.k * self.d;
        self.unpark()?;
        let next = self.gpu.download(self.next.dev()?, kd, "centroids")?;
        Ok(squared_shift(&next, &self.centroids()?))
    }

    fn commit(&mut self) {
        std::mem::swap(&mut self.centroids, &mut self.next);
    }

    fn accumulate(&mut self, assign: bool) -> Result<Partial> {
        let (changed, inertia) = match self.small_kernel() {
            Some(kernel) => {
                let mode = if assign { MODE_ASSIGN } else { 0 } | MODE_ACCUMULATE;
                self.queue_small(kernel, mode, false)?;
                self.assign_summary(assign)?
            }
            None => {
                let fused = assign && !self.tf32;
                if assign {
                    self.queue_assign(fused)?;
                }
                if !fused {
                    self.queue_accumulate_global()?;
                }
                self.assign_summary(assign)?
            }
        };
        let (sums, weights) = match self.hold_sums {
            true => (Vec::new(), Vec::new()),
            false => self.read_sums(true)?.expect("read when asked"),
        };
        Ok(Partial {
            sums,
            weights,
            changed,
            inertia,
        })
    }
}

impl AcrossGpus for CudaLloyd<'_> {
    fn hold_sums(&mut self, hold: bool) -> Result<()> {
        self.hold_sums = hold;
        Ok(())
    }

    fn sum_across(&mut self, rank: &Rank) -> Result<Option<(Vec<i64>, Vec<u64>)>> {
        self.unpark()?;
        let (gpu, kd, k) = (self.gpu, self.k * self.d, self.k);
        let (sums, counts) = match self.small.as_mut() {
            Some(small) => (small.sums.dev_mut()?, small.counts.dev_mut()?),
            None => (self.sums.sums.dev_mut()?, self.sums.counts.dev_mut()?),
        };
        rank.sum_in_place(gpu, sums, kd, counts, k)?;
        self.read_sums(rank.rank == 0)
    }
}

impl Readback for CudaLloyd<'_> {
    fn min_distances(&self) -> Result<Vec<f32>> {
        match self.min_dist.host() {
            Some(kept) => Ok(kept[..self.n].to_vec()),
            None => self.gpu.download(self.min_dist.dev()?, self.n, "distances"),
        }
    }

    fn fixed_inertia(&self) -> Result<i64> {
        // The summary kernel reduces the same block partials, also wrapping; its f64 copy of
        // the total would round past 2^53.
        let parts = match self.block_inertia.host() {
            Some(kept) => kept[..self.assign_blocks].to_vec(),
            None => self.gpu.download(
                self.block_inertia.dev()?,
                self.assign_blocks,
                "inertia partials",
            )?,
        };
        Ok(parts.iter().fold(0i64, |a, &p| a.wrapping_add(p)))
    }

    fn farthest(&self, count: usize) -> Result<Vec<Farthest>> {
        Ok(farthest(
            &self.min_distances()?,
            self.host_weights,
            0,
            count,
        ))
    }

    fn cluster_weights(&self) -> Result<Vec<u64>> {
        match self.sizes.host() {
            Some(kept) => Ok(kept[..self.k].to_vec()),
            None => self
                .gpu
                .download(self.sizes.dev()?, self.k, "cluster weights"),
        }
    }

    fn centroids(&self) -> Result<Vec<f32>> {
        let kd = self.k * self.d;
        match self.centroids.host() {
            Some(kept) => Ok(kept[..kd].to_vec()),
            None => self.gpu.download(self.centroids.dev()?, kd, "centroids"),
        }
    }

    fn labels(&self) -> Result<Vec<u32>> {
        // Labels fetched with the rows are read after their copy.
        if let Some(uploaded) = &self.rows_ready {
            self.gpu.wait_for(uploaded)?;
        }
        match self.labels.host() {
            // Copied on the rayon threads (fresh pages fault in on each).
            Some(kept) => Ok(kept[..self.n].par_iter().copied().collect()),
            None => self.gpu.download(self.labels.dev()?, self.n, "labels"),
        }
    }

    fn sizes(&self) -> Result<Vec<u32>> {
        match self.labels.host() {
            Some(kept) => Ok(Tally::of(&kept[..self.n], self.k).sizes),
            None => Ok(Tally::of(&self.labels()?, self.k).sizes),
        }
    }

    fn gather(&self, rows: &[usize]) -> Result<Vec<f32>> {
        let d = self.d;
        Ok(rows
            .iter()
            .flat_map(|&r| &self.host[r * d..(r + 1) * d])
            .copied()
            .collect())
    }

    fn k(&self) -> usize {
        self.k
    }
}

impl Residency for CudaLloyd<'_> {
    fn prefetch_rows(&mut self) -> Result<()> {
        // A parked batch's units go up with its rows (every pass over the rows reads them), and
        // its labels when its last turn used them (the Lloyd steps; seeding reads none).
        let freed_units = self.weights.as_ref().is_some_and(Slot::is_freed);
        let labels = self.labels_in_use && self.labels.host().is_some();
        let state = labels || freed_units;
        if labels {
            self.labels.restore_beside(self.gpu, "labels")?;
        }
        if let (Some(slot), Some(units)) = (self.weights.as_mut(), self.host_weights) {
            slot.refill_beside(self.gpu, units, "sample weights")?;
        }
        if self.x.is_none() {
            traffic::up(size_of_val(self.host) + size_of_val(&self.scratch_rows[..]));
            let (x, uploaded) =
                self.gpu
                    .upload_beside(self.host, &self.scratch_rows, "the data")?;
            (self.x, self.rows_ready) = (Some(x), Some(uploaded));
        } else if state {
            self.rows_ready = Some(self.gpu.copies_done("labels")?);
        }
        Ok(())
    }

    fn release_rows(&mut self) -> Result<()> {
        // Rows and labels fetched but never used: the labels are read back below, after the copy.
        let unused = self.rows_ready.take();
        if let Some(uploaded) = &unused {
            self.gpu.wait_for(uploaded)?;
        }
        if let Some(x) = self.x.take() {
            // Rows fetched but never used still hold the scratch rows as they were uploaded;
            // their memory is freed on the copy stream, after the copy.
            if unused.is_none() {
                let scratch = self.n * self.d..(self.n + self.scratch) * self.d;
                // Also waits for every kernel that read the rows, before their memory is freed.
                self.scratch_rows = self.gpu.download_range(&x, scratch, "seeding points")?;
            }
        }
        self.park()
    }
}

/// The rows on the device: every use loads them first ([`CudaLloyd::load_rows`]), so `None` is
/// a bug reported as an error, not a crash.
fn on_device(x: &Option<CudaSlice<f32>>) -> Result<&CudaSlice<f32>> {
    x.as_ref().ok_or_else(rows_released)
}

fn on_device_mut(x: &mut Option<CudaSlice<f32>>) -> Result<&mut CudaSlice<f32>> {
    x.as_mut().ok_or_else(rows_released)
}

fn rows_released() -> Error {
    Error::Cuda {
        context: "running a k-means step".into(),
        message: "the rows were used while released from the GPU".into(),
    }
}
