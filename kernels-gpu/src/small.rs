//! One Lloyd step for small shapes (few dimensions, centroids that fit in shared memory), fused
//! into one kernel: assignment and the block's share of the centroid sums.
//!
//! The register-tiled `assign` kernels (GPU builds) pay for their tiles with barriers and merges that
//! a shape like 10^6 × 9, k = 16 never earns back. Here the block stages its points and all `k`
//! centroids in shared memory, and every thread scans all centroids for its points (each
//! centroid row read as broadcast 16-byte loads, `unroll` centroids at a time), so the step is a
//! single pass over the data. Points of up to [`crate::small::SMALL_REGISTER_D`] dimensions are
//! held in registers and scanned with the quad count (or, below four, the exact dimension count)
//! fixed at compile time; wider points are read from their staged rows a quad at a time. The
//! distance of every (point, centroid) pair runs over the dimensions in order 0..d with the same
//! steps as the CPU twin, and the first minimum in centroid order wins, so labels are the CPU's
//! bit for bit. On the wide shape (one point a thread, rows in shared memory) a step on its own
//! scores in warp register tiles instead: each lane 4 points × 4 centroids a round, four lanes
//! splitting the centroids, first minima merged by (score, centroid) shuffles. Steps queued
//! back to back there scan only the groups of centroids that their bounds cannot prove to lose
//! ([`prune`]), with the same result.
//!
//! The sums: the block sorts its points by label in shared memory (a counting sort), then one
//! thread per (cluster, dimension) adds that cluster's fixed-point coordinates in registers and
//! adds the total to the global sums with one 64-bit integer atomic. Integer sums do not depend on
//! the order of the additions, so the centroids stay reproducible. `kmeans_finalize_small` turns
//! the sums into means, reduces the step's summary and zeroes the sums for the next step (steps
//! with bounds keep them and move only their relabelled points: [`prune`]).

pub mod halt;
pub mod prune;
mod scan;
mod stage;
mod sums;

pub use halt::HaltRule;
pub use sums::{
    Finalize, finalize, finalize_shared_bytes, finalize_small_grid, finalize_small_parts,
};

use crate::exec::{Exec, block_sum_i64};
use crate::fixed::{inertia_term, units_at};
use crate::launch::{BLOCK, Kernel};
use crate::math::{AssignMetric, assign_distance, fma};
use crate::params::DevPtr;
use core::sync::atomic::{AtomicU32, Ordering};
use scan::SharedCentroidScan;
use stage::{centroid_norms, quads_sq_norm, stage_rows};
use sums::{accumulate, move_changed};

/// Shape of a small-shape Lloyd step kernel ([`crate::small`]): every thread holds `points`
/// points of up to `max_d` dimensions in registers while all `k` centroids sit in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmallStep {
    /// Most dimensions the kernel holds per point (a multiple of 4).
    pub max_d: usize,
    /// Points per thread.
    pub points: usize,
    /// Centroids scanned together: independent multiply-add chains for a thread with few points.
    pub unroll: usize,
}

/// The small-step kernels, narrowest first: fewer dimensions leave registers for more points.
pub const SMALL_STEPS: [SmallStep; 4] = [
    SmallStep {
        max_d: 4,
        points: 4,
        unroll: 2,
    },
    SmallStep {
        max_d: 16,
        points: 2,
        unroll: 2,
    },
    SmallStep {
        max_d: 32,
        points: 2,
        unroll: 2,
    },
    SmallStep {
        max_d: 96,
        points: 1,
        unroll: 8,
    },
];

/// Widest dimension count whose points a small step holds in registers; wider points are read
/// from their staged rows in shared memory, which leaves the registers to independent
/// multiply-add chains over `unroll` centroids.
pub const SMALL_REGISTER_D: usize = 32;

/// Byte offsets of the small step's dynamic shared memory: centroids (rows padded to a multiple
/// of 4), the block's points (rows padded so that threads reading one row each hit different
/// banks, see [`SmallStep::layout`]), the centroids' squared norms, the fixed-point scales,
/// per-cluster counts and offsets of the block's points, the block's points ordered by cluster,
/// the pruned scan's pending points (wide steps only, [`prune::pending_words`]) and scratch for
/// the fixed-order reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmallLayout {
    pub centroids: usize,
    pub points: usize,
    /// Row stride of the staged points, in f32.
    pub point_stride: usize,
    pub norms: usize,
    pub scales: usize,
    pub counts: usize,
    pub offsets: usize,
    pub order: usize,
    pub pending: usize,
    pub scratch: usize,
    pub bytes: usize,
}

impl SmallStep {
    /// The index in [`SMALL_STEPS`] of the kernel for `d` dimensions, if any holds them.
    pub fn for_d(d: usize) -> Option<usize> {
        SMALL_STEPS.iter().position(|s| d <= s.max_d)
    }

    /// Points per block.
    pub const fn block_points(self) -> usize {
        BLOCK as usize * self.points
    }

    /// Blocks of the kernel for `n` points (one inertia partial each).
    pub const fn grid(self, n: usize) -> usize {
        n.div_ceil(self.block_points())
    }

    /// Whether the points are read from shared memory rather than held in registers.
    pub const fn rows_in_shared(self) -> bool {
        self.max_d > SMALL_REGISTER_D
    }

    /// Where everything goes in shared memory for `k` centroids of `d` dimensions.
    pub const fn layout(self, k: usize, d: usize) -> SmallLayout {
        let d4 = d.div_ceil(4) * 4;
        // Rows read a quad at a time: an odd number of quads apart, so the eight 16-byte loads
        // of a quarter warp hit different banks. Rows read a word at a time: an odd stride.
        let point_stride = if !self.rows_in_shared() {
            d | 1
        } else if (d4 / 4) % 2 == 1 {
            d4
        } else {
            d4 + 4
        };
        let centroids = 0;
        let points = centroids + k * d4 * 4;
        let norms = points + self.block_points() * point_stride * 4;
        let scales = norms + k * 4;
        let counts = scales + d * 4;
        let offsets = counts + k * 4;
        let order = offsets + k * 4;
        // 8-byte aligned: it starts with one u64 a point.
        let pending = (order + self.block_points() * 4).div_ceil(8) * 8;
        let pending_words = match self.rows_in_shared() {
            true => prune::pending_words(self.block_points()),
            false => 0,
        };
        // f64 scratch, 8-byte aligned.
        let scratch = (pending + pending_words * 4).div_ceil(8) * 8;
        let bytes = scratch + BLOCK as usize * 8;
        SmallLayout {
            centroids,
            points,
            point_stride,
            norms,
            scales,
            counts,
            offsets,
            order,
            pending,
            scratch,
            bytes,
        }
    }

    /// Whether `k` centroids of `d` dimensions fit this kernel, given `max_shared` bytes of
    /// shared memory per block.
    pub const fn fits(self, k: usize, d: usize, max_shared: usize) -> bool {
        d <= self.max_d && self.layout(k, d).bytes <= max_shared
    }
}

/// Arguments of the small step.
#[derive(Clone, Copy)]
pub struct Step {
    /// `n × d` points, row-major.
    pub x: *const f32,
    pub n: usize,
    pub d: usize,
    /// `k × d` current centroids, row-major.
    pub centroids: *const f32,
    pub k: usize,
    pub metric: AssignMetric,
    /// Labels: written when assigning (after counting changes against the old ones), else read.
    pub labels: *mut u32,
    /// Each point's distance to its centroid (written when assigning).
    pub min_dist: *mut f32,
    /// Counter of changed labels of points with weight (added to when assigning).
    pub changed: *mut u32,
    /// Each block's fixed-point inertia (written when assigning): `Σ units · round(dist ·
    /// inertia_scale)`, see [`crate::fixed::inertia_exponent`].
    pub block_inertia: *mut i64,
    pub inertia_scale: f32,
    /// The points' quantised weights (units, [`crate::fixed::weight_units`]); null: one each.
    pub weights: *const f32,
    /// Fixed-point scales of the dimensions, `2^s` ([`crate::fixed`]).
    pub scales: *const f32,
    /// Global `k × d` fixed-point sums and `k` weights, added to when accumulating.
    pub sums: *mut i64,
    pub counts: *mut u64,
    /// Label the points with their nearest centroid (else read the labels).
    pub assign: bool,
    /// Add the points to the cluster sums.
    pub accumulate: bool,
    /// Each point's lower bounds for the pruned scan, one per group of centroids, group by
    /// group (`prune::groups(k) × n`; [`prune`]: wide steps, squared L2, assigning); null:
    /// every point is scanned.
    pub lower: *mut f32,
    /// How far each centroid moved since the bounds were written (`k`, from the last
    /// finalize); null: the bounds are not valid yet and every point is scanned.
    pub drift: *const f32,
    /// The halt word of steps queued back to back ([`halt`]; null: a step on its own): read
    /// once the kernel before this one has ended.
    pub halt: *const u32,
}

/// The body of the small-step kernels: `S.points` points per thread of up to `S.max_d`
/// dimensions, `S.unroll` centroids at a time (`MAXD`, `P`, `CU` spelled out for the register
/// arrays).
///
/// Kept whole at ~120 lines: its steps already are functions (`stage_rows`, `centroid_norms`,
/// the scans, `finish_assign`, `accumulate`); moving the register-row branch or the label loads
/// into `#[inline(always)]` helpers flips branches in the PTX of the small kernels.
///
/// # Safety
/// `BLOCK` threads, `ceil(n / (BLOCK · P))` blocks, `SmallStep::layout(k, d).bytes` of 16-byte
/// aligned dynamic shared memory; `d ≤ MAXD`; pointers valid for the sizes; labels `< k` when
/// read; no kernel that may still run when this one starts writes `x`.
#[inline(always)]
pub unsafe fn step<const MAXD: usize, const P: usize, const CU: usize, E: Exec>(e: E, s: Step) {
    let shape = SmallStep {
        max_d: MAXD,
        points: P,
        unroll: CU,
    };
    let m = unsafe { Smem::new(e, shape.layout(s.k, s.d)) };
    let (t, threads) = (e.thread(), BLOCK as usize);
    let first = e.block() * shape.block_points();
    // Thread t holds points first + t + p·BLOCK, rows t + p·BLOCK of the staged block.
    let point = |p: usize| first + t + p * threads;

    let rows = s.n.saturating_sub(first).min(shape.block_points());
    let d4 = s.d.div_ceil(4) * 4;
    let pruned =
        shape.rows_in_shared() && s.assign && s.metric == AssignMetric::SqL2 && !s.lower.is_null();
    // The rows never change from step to step: their loads go out before the wait for the
    // kernel before this one (the last step's finalize, when launched early), so that they
    // overlap it. Everything else that step wrote is read after the wait.
    unsafe { stage_rows(e, s.x.add(first * s.d), rows, s.d, m.points, m.point_stride) };
    crate::exec::wait_for_prior_grid();
    crate::exec::launch_dependents();
    if unsafe { halt::halted(s.halt) } {
        return;
    }
    if pruned && t == 0 {
        // The counters of the pruned scan, before the barrier.
        let words = prune::pending_words(shape.block_points());
        let counters = prune::ZEROED_WORDS;
        unsafe { m.pending.add(words - counters).write_bytes(0, counters) };
    }
    if s.assign {
        unsafe { stage_rows(e, s.centroids, s.k, s.d, m.centroids, d4) };
    }
    e.sync();
    let mut label = [0u32; P];
    let mut old = [0u32; P];
    if s.assign {
        if s.metric == AssignMetric::SqL2 {
            let norm_in_padding = MAXD == 4 && s.d < 4;
            unsafe { centroid_norms(e, &s, m.centroids, m.norms, d4, norm_in_padding) };
        }
        e.sync();
        // Loaded now so that their latency hides behind the centroid loop.
        for (p, o) in old.iter_mut().enumerate() {
            let i = point(p);
            if i < s.n {
                *o = unsafe { *s.labels.add(i) };
            }
        }
        let scan = SharedCentroidScan {
            metric: s.metric,
            centroids: m.centroids,
            norms: m.norms,
            k: s.k as u32,
            d4: d4 as u32,
        };
        let quads = s.d.div_ceil(4);
        let mut x_sq = [0f32; P];
        let (best, found) = if pruned {
            let found = unsafe { prune::assign::<P, CU, E>(e, &s, &m, scan, &old, point) };
            x_sq = found.x_sq;
            (found.best, found.label)
        } else if shape.rows_in_shared() {
            // Rows are zero-padded to whole quads; the padding leaves the norms unchanged.
            let xrows: [*const f32; P] = core::array::from_fn(|p| unsafe {
                m.points
                    .add((t + p * threads) * m.point_stride)
                    .cast_const()
            });
            if s.metric == AssignMetric::SqL2 {
                for (sq, row) in x_sq.iter_mut().zip(&xrows) {
                    *sq = unsafe { quads_sq_norm(*row, quads) };
                }
            }
            if P == 1 {
                let (b, l) =
                    unsafe { scan.run_warp_tiles(e, m.points, m.point_stride, rows, quads) };
                ([b; P], [l; P])
            } else {
                let (best, label, _) = unsafe { scan.run_rows::<P, CU, false>(&xrows, quads) };
                (best, label)
            }
        } else {
            let mut xr = [[0f32; MAXD]; P];
            for (p, row) in xr.iter_mut().enumerate() {
                let r = (t + p * threads) as u32;
                if (r as usize) < rows {
                    for (j, v) in row.iter_mut().enumerate() {
                        if j < s.d {
                            *v = unsafe { *m.points.add((r * m.point_stride as u32) as usize + j) };
                        }
                    }
                }
            }
            // The points' squared norms as `row_sq_norms` computes them (dimension order).
            if s.metric == AssignMetric::SqL2 {
                for (sq, row) in x_sq.iter_mut().zip(&xr) {
                    for (j, &w) in row.iter().enumerate() {
                        if j < s.d {
                            *sq = fma(w, w, *sq);
                        }
                    }
                }
            }
            // Exact dimensions for d ≤ 4 (pixels: d = 3 costs 3 multiply-adds, not 4),
            // otherwise whole quads, specialised per quad count.
            unsafe {
                match (MAXD, s.d) {
                    (4, 1) => scan.run::<MAXD, P, CU, 4, 1>(&xr, 1),
                    (4, 2) => scan.run::<MAXD, P, CU, 4, 2>(&xr, 1),
                    (4, 3) => scan.run::<MAXD, P, CU, 4, 3>(&xr, 1),
                    (4, _) => scan.run::<MAXD, P, CU, 4, 4>(&xr, 1),
                    (16, ..=8) => scan.run::<MAXD, P, CU, 8, 4>(&xr, 2),
                    (16, ..=12) => scan.run::<MAXD, P, CU, 12, 4>(&xr, 3),
                    (16, _) => scan.run::<MAXD, P, CU, 16, 4>(&xr, 4),
                    (32, ..=20) => scan.run::<MAXD, P, CU, 20, 4>(&xr, 5),
                    (32, ..=24) => scan.run::<MAXD, P, CU, 24, 4>(&xr, 6),
                    (32, ..=28) => scan.run::<MAXD, P, CU, 28, 4>(&xr, 7),
                    (32, _) => scan.run::<MAXD, P, CU, 32, 4>(&xr, 8),
                    (_, _) => scan.run::<MAXD, P, CU, MAXD, 4>(&xr, quads),
                }
            }
        };
        label = found;
        let found = Found {
            best,
            label,
            x_sq,
            old,
        };
        unsafe { finish_assign(e, &s, &found, m.scratch, point) };
    } else {
        for (p, l) in label.iter_mut().enumerate() {
            let i = point(p);
            if i < s.n {
                *l = unsafe { *s.labels.add(i) };
            }
        }
    }
    if s.accumulate && pruned && !s.drift.is_null() {
        // The sums stay from the last step: only the relabelled points move, one by one when
        // few, else sorted by cluster as a fresh accumulation.
        if unsafe { prune::relabelled(&m, shape.block_points()) } <= MOVED_ONE_BY_ONE {
            unsafe { move_changed(e, &s, &old, &label, &m, point) };
        } else {
            let changed: [bool; P] = core::array::from_fn(|p| old[p] != label[p]);
            unsafe { accumulate(e, &s, &old, &changed, true, &m, point) };
            e.sync();
            unsafe { accumulate(e, &s, &label, &changed, false, &m, point) };
        }
    } else if s.accumulate {
        unsafe { accumulate(e, &s, &label, &[true; P], false, &m, point) };
    }
}

/// The small step's shared memory (see [`SmallStep::layout`]).
struct Smem {
    centroids: *mut f32,
    points: *mut f32,
    point_stride: usize,
    norms: *mut f32,
    scales: *mut f32,
    counts: *mut u32,
    offsets: *mut u32,
    order: *mut u32,
    pending: *mut u32,
    scratch: *mut f64,
}

impl Smem {
    /// # Safety
    /// The launch's dynamic shared memory holds `layout.bytes`.
    #[inline(always)]
    unsafe fn new<E: Exec>(e: E, layout: SmallLayout) -> Self {
        let base = e.shared::<u8>();
        unsafe {
            Smem {
                centroids: base.add(layout.centroids).cast(),
                points: base.add(layout.points).cast(),
                point_stride: layout.point_stride,
                norms: base.add(layout.norms).cast(),
                scales: base.add(layout.scales).cast(),
                counts: base.add(layout.counts).cast(),
                offsets: base.add(layout.offsets).cast(),
                order: base.add(layout.order).cast(),
                pending: base.add(layout.pending).cast(),
                scratch: base.add(layout.scratch).cast(),
            }
        }
    }
}

/// What the centroid scan found for a thread's points, with their squared norms and old labels.
struct Found<const P: usize> {
    best: [f32; P],
    label: [u32; P],
    x_sq: [f32; P],
    old: [u32; P],
}

/// Writes labels and distances, counts the changed labels of points with weight and writes the
/// block's fixed-point inertia.
#[inline(always)]
unsafe fn finish_assign<const P: usize, E: Exec>(
    e: E,
    s: &Step,
    f: &Found<P>,
    scratch: *mut f64,
    point: impl Fn(usize) -> usize,
) {
    let mut moved = 0u32;
    let mut dist_sum = 0i64;
    for p in 0..P {
        let i = point(p);
        if i < s.n {
            let dist = assign_distance(s.metric, f.x_sq[p], f.best[p]);
            let units = unsafe { units_at(s.weights, i) };
            moved += (f.old[p] != f.label[p] && units != 0) as u32;
            unsafe {
                *s.labels.add(i) = f.label[p];
                *s.min_dist.add(i) = dist;
            }
            dist_sum = dist_sum.wrapping_add(inertia_term(dist, s.inertia_scale, units));
        }
    }
    if moved > 0 {
        unsafe { AtomicU32::from_ptr(s.changed) }.fetch_add(moved, Ordering::Relaxed);
    }
    let total = unsafe { block_sum_i64(e, BLOCK as usize, scratch, dist_sum) };
    if e.thread() == 0 {
        unsafe { *s.block_inertia.add(e.block()) = total };
    }
}

/// Most relabelled points of a block that a step with bounds moves between the sums one by one
/// (each `2·d` atomics of one thread); more are moved as two sorted accumulations.
const MOVED_ONE_BY_ONE: u32 = 32;

/// `mode` bits of the small-step kernels.
pub const MODE_ASSIGN: u32 = 1;
/// See [`MODE_ASSIGN`].
pub const MODE_ACCUMULATE: u32 = 2;

/// Blocks per multiprocessor that ptxas must fit of each small step, in the order of
/// [`crate::small::SMALL_STEPS`]: the steps of few dimensions are chains of short phases
/// separated by barriers and need several blocks per multiprocessor to overlap them.
pub const SMALL_MIN_BLOCKS: [u32; 4] = [4, 4, 3, 2];

/// The small-step kernels, per metric, in the order of [`crate::small::SMALL_STEPS`].
pub const SMALL_L2_KERNELS: [Kernel<SmallParams>; 4] = [
    KMEANS_SMALL_L2_0,
    KMEANS_SMALL_L2_1,
    KMEANS_SMALL_L2_2,
    KMEANS_SMALL_L2_3,
];
/// See [`SMALL_L2_KERNELS`].
pub const SMALL_L1_KERNELS: [Kernel<SmallParams>; 4] = [
    KMEANS_SMALL_L1_0,
    KMEANS_SMALL_L1_1,
    KMEANS_SMALL_L1_2,
    KMEANS_SMALL_L1_3,
];

kernel_params! {
    /// The parameters of the eight `kmeans_small_*` entry points (see [`KMEANS_SMALL_L2_0`]): the
    /// `n × d` points, the `k × d` centroids, the labels, distances and counters of the assignment,
    /// the optional `weights` (null: one unit each), the `scales` and the `sums` and `counts` of the
    /// accumulation, `mode` ([`MODE_ASSIGN`], [`MODE_ACCUMULATE`]), the `halt` word of steps
    /// queued back to back (null for a step on its own; see [`halt`]), and the pruned scan's
    /// `lower` bounds and `drift` (see [`Step::lower`], [`Step::drift`]).
    pub struct SmallParams {
        pub x: DevPtr<f32>,
        pub n: u32,
        pub d: u32,
        pub centroids: DevPtr<f32>,
        pub k: u32,
        pub labels: DevPtr<u32>,
        pub min_dist: DevPtr<f32>,
        pub changed: DevPtr<u32>,
        pub block_inertia: DevPtr<i64>,
        pub inertia_scale: f32,
        pub weights: DevPtr<f32>,
        pub scales: DevPtr<f32>,
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u64>,
        pub mode: u32,
        pub halt: DevPtr<u32>,
        pub lower: DevPtr<f32>,
        pub drift: DevPtr<f32>,
    }
    entries: small_entry;
}

macro_rules! small_kernel {
    ($entry:ident, $name:ident, $metric:expr, $shape:literal) => {
        #[doc = concat!("The `", stringify!($name), "` entry point. CPU twins: `backend::cpu::kmeans::nearest`, `::accumulate`.")]
        pub const $entry: Kernel<SmallParams> =
            Kernel::new(stringify!($name)).min_blocks(SMALL_MIN_BLOCKS[$shape]);

        small_entry! {
            /// One small Lloyd step (see the module comment) with the shape `SMALL_STEPS[i]` its
            /// name ends in: with `mode & MODE_ASSIGN` labels every point (counting changed
            /// labels, writing distances and per-block fixed-point inertia under `inertia_scale`),
            /// else reads the labels; with `mode & MODE_ACCUMULATE` adds the points to `sums` /
            /// `counts`, weighted by `weights` (null: one unit each). Does nothing while `halt` is
            /// set. Stages its rows, then waits for the kernel before it (it may be launched
            /// early: [`crate::exec::wait_for_prior_grid`]).
            ///
            /// # Safety
            /// As for [`step`]: `BLOCK` threads, `ceil(n / block_points())` blocks,
            /// `layout(k, d).bytes` of dynamic shared memory, `d ≤ max_d`.
            fn $name(params) {
                let SmallParams {
                    x,
                    n,
                    d,
                    centroids,
                    k,
                    labels,
                    min_dist,
                    changed,
                    block_inertia,
                    inertia_scale,
                    weights,
                    scales,
                    sums,
                    counts,
                    mode,
                    halt,
                    lower,
                    drift,
                } = params;
                // Halted steps skip their rows too. The word only goes from 0 to 1 during a
                // run (cleared before its first step, which no kernel precedes), so a 1 read
                // before the wait is final; [`step`] reads it again after.
                if unsafe { halt::halted(halt.as_ptr()) } {
                    return;
                }
                const SHAPE: SmallStep = crate::small::SMALL_STEPS[$shape];
                let s = Step {
                    x: x.as_ptr(),
                    n: n as usize,
                    d: (d as usize).clamp(1, SHAPE.max_d),
                    centroids: centroids.as_ptr(),
                    k: k as usize,
                    metric: $metric,
                    labels: labels.as_mut_ptr(),
                    min_dist: min_dist.as_mut_ptr(),
                    changed: changed.as_mut_ptr(),
                    block_inertia: block_inertia.as_mut_ptr(),
                    inertia_scale,
                    weights: weights.as_ptr(),
                    scales: scales.as_ptr(),
                    sums: sums.as_mut_ptr(),
                    counts: counts.as_mut_ptr(),
                    assign: mode & MODE_ASSIGN != 0,
                    accumulate: mode & MODE_ACCUMULATE != 0,
                    lower: lower.as_mut_ptr(),
                    drift: drift.as_ptr(),
                    halt: halt.as_ptr(),
                };
                unsafe {
                    step::<{ SHAPE.max_d }, { SHAPE.points }, { SHAPE.unroll }, _>(crate::exec::Gpu, s)
                }
            }
        }
    };
}

small_kernel!(KMEANS_SMALL_L2_0, kmeans_small_l2_0, AssignMetric::SqL2, 0);
small_kernel!(KMEANS_SMALL_L2_1, kmeans_small_l2_1, AssignMetric::SqL2, 1);
small_kernel!(KMEANS_SMALL_L2_2, kmeans_small_l2_2, AssignMetric::SqL2, 2);
small_kernel!(KMEANS_SMALL_L2_3, kmeans_small_l2_3, AssignMetric::SqL2, 3);
small_kernel!(KMEANS_SMALL_L1_0, kmeans_small_l1_0, AssignMetric::L1, 0);
small_kernel!(KMEANS_SMALL_L1_1, kmeans_small_l1_1, AssignMetric::L1, 1);
small_kernel!(KMEANS_SMALL_L1_2, kmeans_small_l1_2, AssignMetric::L1, 2);
small_kernel!(KMEANS_SMALL_L1_3, kmeans_small_l1_3, AssignMetric::L1, 3);

/// The `kmeans_finalize_small` entry point. CPU twin: `backend::cpu::partial::Partial::finish`.
pub const KMEANS_FINALIZE_SMALL: Kernel<FinalizeSmallParams> =
    Kernel::new("kmeans_finalize_small").threads(crate::launch::REDUCE_BLOCK);

kernel_params! {
    /// `kmeans_finalize_small`'s parameters.
    pub struct FinalizeSmallParams {
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u64>,
        pub k: u32,
        pub d: u32,
        pub inv_scales: DevPtr<f64>,
        pub current: DevPtr<f32>,
        pub next: DevPtr<f32>,
        pub sizes: DevPtr<u64>,
        pub changed: DevPtr<u32>,
        pub block_inertia: DevPtr<i64>,
        pub blocks: u32,
        pub out: DevPtr<f64>,
        pub halt: DevPtr<u32>,
        pub halt_shift: f64,
        pub halt_unchanged: u32,
        pub halt_empty: u32,
        pub drift: DevPtr<f32>,
        pub parts: DevPtr<u64>,
    }
    entries: finalize_small_entry;
}

finalize_small_entry! {
    /// Finishes a small step (see [`finalize`]) in [`finalize_small_grid`] blocks of `REDUCE_BLOCK`
    /// threads with [`finalize_shared_bytes`] of dynamic shared memory. With `halt`
    /// non-null, does nothing while it is set and sets it when the step meets the [`HaltRule`]
    /// of `halt_shift`, `halt_unchanged` and `halt_empty` (non-zero: true). With `drift`
    /// non-null, writes there how far each centroid moved (for [`prune`]). Waits for the kernel
    /// before it first (it may be launched early: [`crate::exec::wait_for_prior_grid`]).
    ///
    /// # Safety
    /// `sums`: `k × d`; `counts`, `sizes`: `k`; `inv_scales`: `d`; `current`, `next`: `k × d`;
    /// `changed`: 1; `block_inertia`: `blocks`; `out`: 4; `drift`: `k`; `parts`:
    /// [`finalize_small_parts`], zero.
    fn kmeans_finalize_small(params) {
        let FinalizeSmallParams {
            sums,
            counts,
            k,
            d,
            inv_scales,
            current,
            next,
            sizes,
            changed,
            block_inertia,
            blocks,
            out,
            halt,
            halt_shift,
            halt_unchanged,
            halt_empty,
            drift,
            parts,
        } = params;
        crate::exec::wait_for_prior_grid();
        // The next step's blocks may start staging their rows beside this finalize.
        crate::exec::launch_dependents();
        let (sums, counts, inv_scales, current, next, sizes, changed, block_inertia, out) = (
            sums.as_mut_ptr(),
            counts.as_mut_ptr(),
            inv_scales.as_ptr(),
            current.as_ptr(),
            next.as_mut_ptr(),
            sizes.as_mut_ptr(),
            changed.as_mut_ptr(),
            block_inertia.as_ptr(),
            out.as_mut_ptr(),
        );
        let f = Finalize {
            sums,
            counts,
            k: k as usize,
            d: (d as usize).max(1),
            inv_scales,
            current,
            next,
            sizes,
            changed,
            block_inertia,
            blocks: blocks as usize,
            out,
            halt: halt.as_mut_ptr(),
            rule: HaltRule {
                shift: halt_shift,
                unchanged: halt_unchanged != 0,
                empty: halt_empty != 0,
            },
            drift: drift.as_mut_ptr(),
            parts: parts.as_mut_ptr(),
        };
        unsafe { finalize(crate::exec::Gpu, crate::launch::REDUCE_BLOCK as usize, f) }
    }
}

#[cfg(test)]
mod tests;
