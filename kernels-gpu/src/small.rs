//! One Lloyd step for small shapes (few dimensions, centroids that fit in shared memory), fused
//! into one kernel: assignment and the block's share of the centroid sums.
//!
//! The register-tiled [`crate::assign`] kernels pay for their tiles with barriers and merges that
//! a shape like 10^6 × 9, k = 16 never earns back. Here every thread keeps its points in registers
//! and scans all `k` centroids from shared memory (each row read as broadcast 16-byte loads), so
//! the step is a single pass over the data. The distance of every (point, centroid) pair runs over
//! the dimensions in order 0..d with the same steps as the CPU twin, and the first minimum in
//! centroid order wins, so labels are the CPU's bit for bit.
//!
//! The sums: the block sorts its points by label in shared memory (a counting sort), then one
//! thread per (cluster, dimension) adds that cluster's fixed-point coordinates in registers and
//! adds the total to the global sums with one 64-bit integer atomic. Integer sums do not depend on
//! the order of the additions, so the centroids stay reproducible. [`kmeans_finalize_small`] turns
//! the sums into means, reduces the step's summary and zeroes the sums for the next step.

use crate::exec::{Exec, block_sum_f64, block_sums};
use crate::fixed::{mean, to_fixed};
use crate::launch::{BLOCK, SmallLayout, SmallStep};
use crate::math::{AssignMetric, assign_distance, assign_score, assign_step, sq_norm};
use crate::tile::load_vec4s;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Arguments of the small step.
#[derive(Clone, Copy)]
pub struct Step {
    /// `n × d` points, row-major.
    pub x: *const f32,
    /// Squared norms of the points (read for squared L2 only).
    pub x_sq_norms: *const f32,
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
    /// Changed-label counter (added to when assigning).
    pub changed: *mut u32,
    /// Each block's fixed-order sum of distances (written when assigning).
    pub block_inertia: *mut f64,
    /// Fixed-point scales of the dimensions, `2^s` ([`crate::fixed`]).
    pub scales: *const f32,
    /// Global `k × d` fixed-point sums and `k` counts, added to when accumulating.
    pub sums: *mut i64,
    pub counts: *mut u32,
    /// Label the points with their nearest centroid (else read the labels).
    pub assign: bool,
    /// Add the points to the cluster sums.
    pub accumulate: bool,
}

/// The body of the small-step kernels: `S.points` points per thread of up to `S.max_d`
/// dimensions (`MAXD` = `S.max_d`, `P` = `S.points`, spelled out for the register arrays).
///
/// # Safety
/// `BLOCK` threads, `ceil(n / (BLOCK · P))` blocks, `SmallStep::layout(k, d).bytes` of 16-byte
/// aligned dynamic shared memory; `d ≤ MAXD`; pointers valid for the sizes; labels `< k` when
/// read.
#[inline(always)]
pub unsafe fn step<const MAXD: usize, const P: usize, E: Exec>(e: E, s: Step) {
    let shape = SmallStep {
        max_d: MAXD,
        points: P,
    };
    let m = unsafe { Smem::new(e, shape.layout(s.k, s.d)) };
    let (cs, cn) = (m.centroids, m.norms);
    let (t, threads) = (e.thread(), BLOCK as usize);
    let first = e.block() * shape.block_points();
    let d4 = s.d.div_ceil(4) * 4;
    // Thread t holds points first + t + p·BLOCK, rows t + p·BLOCK of the staged block.
    let point = |p: usize| first + t + p * threads;

    let rows = s.n.saturating_sub(first).min(shape.block_points());
    unsafe { stage_points(e, &s, first, rows, m.points, m.point_stride) };
    let mut label = [0u32; P];
    if s.assign {
        unsafe { stage_centroids(e, &s, cs, cn, d4) };
        let mut xr = [[0f32; MAXD]; P];
        for (p, row) in xr.iter_mut().enumerate() {
            let r = t + p * threads;
            if r < rows {
                for (j, v) in row.iter_mut().enumerate() {
                    if j < s.d {
                        *v = unsafe { *m.points.add(r * m.point_stride + j) };
                    }
                }
            }
        }
        // Loaded now so that their latency hides behind the centroid loop.
        let mut x_sq = [0f32; P];
        let mut old = [0u32; P];
        for p in 0..P {
            let i = point(p);
            if i < s.n {
                old[p] = unsafe { *s.labels.add(i) };
                if s.metric == AssignMetric::SqL2 {
                    x_sq[p] = unsafe { *s.x_sq_norms.add(i) };
                }
            }
        }
        // First minimum in centroid order: strict `<`, starting from centroid 0 as the CPU does.
        let mut best = [f32::INFINITY; P];
        for c in 0..s.k {
            let row = unsafe { cs.add(c * d4) };
            let mut acc = [0f32; P];
            // Padding dimensions are 0 in both operands and leave the accumulators unchanged.
            for j4 in 0..MAXD / 4 {
                if 4 * j4 < s.d {
                    let v: [f32; 4] = unsafe { load_vec4s(row.add(4 * j4)) };
                    for (q, &cv) in v.iter().enumerate() {
                        for p in 0..P {
                            acc[p] = assign_step(s.metric, acc[p], xr[p][4 * j4 + q], cv);
                        }
                    }
                }
            }
            let c_sq = unsafe { *cn.add(c) };
            for p in 0..P {
                let score = assign_score(s.metric, acc[p], c_sq);
                if score < best[p] {
                    best[p] = score;
                    label[p] = c as u32;
                }
            }
        }
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
    if s.accumulate {
        unsafe { accumulate(e, &s, &label, &m, point) };
    }
}

/// The small step's shared memory (see [`SmallStep::layout`]).
struct Smem {
    centroids: *mut f32,
    points: *mut f32,
    point_stride: usize,
    norms: *mut f32,
    counts: *mut u32,
    offsets: *mut u32,
    order: *mut u32,
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
                counts: base.add(layout.counts).cast(),
                offsets: base.add(layout.offsets).cast(),
                order: base.add(layout.order).cast(),
                scratch: base.add(layout.scratch).cast(),
            }
        }
    }
}

/// Copies the block's `rows` points (a contiguous run of `x`) into shared memory, row `r` at
/// `xs[r · stride..]`: consecutive threads read consecutive values, so the loads coalesce.
#[inline(always)]
unsafe fn stage_points<E: Exec>(
    e: E,
    s: &Step,
    first: usize,
    rows: usize,
    xs: *mut f32,
    stride: usize,
) {
    let (t, threads, d) = (e.thread(), BLOCK as usize, s.d);
    let src = unsafe { s.x.add(first * d) };
    // Element i = r·d + j; stepping i by `threads` steps (r, j) by (threads / d, threads % d).
    let (dr, dj) = (threads / d, threads % d);
    let (mut r, mut j) = (t / d, t % d);
    let mut i = t;
    while i < rows * d {
        unsafe { *xs.add(r * stride + j) = *src.add(i) };
        i += threads;
        r += dr;
        j += dj;
        if j >= d {
            j -= d;
            r += 1;
        }
    }
    e.sync();
}

/// Copies the centroids into shared memory (rows padded with zeros to `d4`) and computes their
/// squared norms there, in dimension order as `row_sq_norms` does.
#[inline(always)]
unsafe fn stage_centroids<E: Exec>(e: E, s: &Step, cs: *mut f32, cn: *mut f32, d4: usize) {
    let (t, threads) = (e.thread(), BLOCK as usize);
    let mut i = t;
    while i < s.k * d4 {
        let (c, j) = (i / d4, i % d4);
        let v = if j < s.d {
            unsafe { *s.centroids.add(c * s.d + j) }
        } else {
            0.0
        };
        unsafe { *cs.add(i) = v };
        i += threads;
    }
    e.sync();
    let mut c = t;
    while c < s.k {
        let row = unsafe { core::slice::from_raw_parts(cs.add(c * d4), s.d) };
        let norm = match s.metric {
            AssignMetric::SqL2 => sq_norm(row),
            AssignMetric::L1 => 0.0,
        };
        unsafe { *cn.add(c) = norm };
        c += threads;
    }
    e.sync();
}

/// What the centroid scan found for a thread's points, with their squared norms and old labels.
struct Found<const P: usize> {
    best: [f32; P],
    label: [u32; P],
    x_sq: [f32; P],
    old: [u32; P],
}

/// Writes labels and distances, counts the changed labels and writes the block's inertia.
#[inline(always)]
unsafe fn finish_assign<const P: usize, E: Exec>(
    e: E,
    s: &Step,
    f: &Found<P>,
    scratch: *mut f64,
    point: impl Fn(usize) -> usize,
) {
    let mut moved = 0u32;
    let mut dist_sum = 0.0;
    for p in 0..P {
        let i = point(p);
        if i < s.n {
            let dist = assign_distance(s.metric, f.x_sq[p], f.best[p]);
            moved += (f.old[p] != f.label[p]) as u32;
            unsafe {
                *s.labels.add(i) = f.label[p];
                *s.min_dist.add(i) = dist;
            }
            dist_sum += dist as f64;
        }
    }
    if moved > 0 {
        unsafe { AtomicU32::from_ptr(s.changed) }.fetch_add(moved, Ordering::Relaxed);
    }
    let total = unsafe { block_sum_f64(e, BLOCK as usize, scratch, dist_sum) };
    if e.thread() == 0 {
        unsafe { *s.block_inertia.add(e.block()) = total };
    }
}

/// Adds the block's points to the global cluster sums and counts (see the module comment).
#[inline(always)]
unsafe fn accumulate<const P: usize, E: Exec>(
    e: E,
    s: &Step,
    label: &[u32; P],
    m: &Smem,
    point: impl Fn(usize) -> usize,
) {
    let (counts, offsets, order) = (m.counts, m.offsets, m.order);
    let (t, threads) = (e.thread(), BLOCK as usize);
    let first = point(0) - t;
    let mut c = t;
    while c < s.k {
        unsafe { *counts.add(c) = 0 };
        c += threads;
    }
    e.sync();
    // Counting sort by label; the order within a cluster does not matter for integer sums.
    let mut slot = [0u32; P];
    for p in 0..P {
        if point(p) < s.n {
            let count = unsafe { AtomicU32::from_ptr(counts.add(label[p] as usize)) };
            slot[p] = count.fetch_add(1, Ordering::Relaxed);
        }
    }
    e.sync();
    unsafe { exclusive_scan(e, counts, offsets, s.k, m.scratch) };
    for p in 0..P {
        if point(p) < s.n {
            unsafe {
                let at = *offsets.add(label[p] as usize) + slot[p];
                *order.add(at as usize) = (point(p) - first) as u32;
            }
        }
    }
    e.sync();
    // One thread per (cluster, dimension), reading the staged points.
    let mut cell = t;
    while cell < s.k * s.d {
        let (c, j) = (cell / s.d, cell % s.d);
        let (from, count) = unsafe { (*offsets.add(c), *counts.add(c)) };
        if count > 0 {
            let scale = unsafe { *s.scales.add(j) };
            let mut sum = 0i64;
            for q in from..from + count {
                let r = unsafe { *order.add(q as usize) } as usize;
                sum += to_fixed(unsafe { *m.points.add(r * m.point_stride + j) }, scale);
            }
            let total = unsafe { AtomicU64::from_ptr(s.sums.add(cell).cast::<u64>()) };
            total.fetch_add(sum as u64, Ordering::Relaxed);
        }
        cell += threads;
    }
    let mut c = t;
    while c < s.k {
        let count = unsafe { *counts.add(c) };
        if count > 0 {
            unsafe { AtomicU32::from_ptr(s.counts.add(c)) }.fetch_add(count, Ordering::Relaxed);
        }
        c += threads;
    }
}

/// `offsets[c] = counts[0] + … + counts[c − 1]` for `c < k`: each thread scans a contiguous
/// segment of the counts, then the segment totals are scanned across the block.
///
/// # Safety
/// `counts` and `offsets` hold `k` u32 and `scratch` `BLOCK` f64 of shared memory; every thread
/// of the block calls this.
#[inline(always)]
unsafe fn exclusive_scan<E: Exec>(
    e: E,
    counts: *const u32,
    offsets: *mut u32,
    k: usize,
    scratch: *mut f64,
) {
    let (t, threads) = (e.thread(), BLOCK as usize);
    let per = k.div_ceil(threads);
    let (from, to) = ((t * per).min(k), ((t + 1) * per).min(k));
    let mut running = 0u32;
    for c in from..to {
        unsafe { *offsets.add(c) = running };
        running += unsafe { *counts.add(c) };
    }
    // Hillis–Steele inclusive scan of the segment totals, over the segments that exist.
    let segments = k.div_ceil(per.max(1));
    let totals = scratch.cast::<u32>();
    unsafe { *totals.add(t) = running };
    e.sync();
    let mut step = 1;
    while step < segments {
        let add = if t >= step {
            unsafe { *totals.add(t - step) }
        } else {
            0
        };
        e.sync();
        unsafe { *totals.add(t) += add };
        e.sync();
        step *= 2;
    }
    let start = unsafe { *totals.add(t) } - running;
    for c in from..to {
        unsafe { *offsets.add(c) += start };
    }
    e.sync();
}

/// The summary of a small step, in one block of `REDUCE_BLOCK` threads: means of the sums (an
/// empty cluster keeps its centroid), cluster sizes, `out = [changed, empty clusters, inertia,
/// squared shift]` with the same fixed-order reductions as `kmeans_summary`; then zeroes the sums,
/// counts and the changed-label counter for the next step.
#[derive(Clone, Copy)]
pub struct Finalize {
    pub sums: *mut i64,
    pub counts: *mut u32,
    pub k: usize,
    pub d: usize,
    pub inv_scales: *const f64,
    pub current: *const f32,
    pub next: *mut f32,
    pub sizes: *mut u32,
    /// The changed-label counter; read, then zeroed for the next step.
    pub changed: *mut u32,
    pub block_inertia: *const f64,
    pub blocks: usize,
    pub out: *mut f64,
}

/// The body of [`kmeans_finalize_small`].
///
/// # Safety
/// One block of `threads` (a power of two) threads with `FINALIZE_SCRATCH · 8 · threads` bytes of
/// dynamic shared memory; pointers valid for the sizes.
#[inline(always)]
pub unsafe fn finalize<E: Exec>(e: E, threads: usize, f: Finalize) {
    let t = e.thread();
    let scratch = e.shared::<f64>();
    let (mut shift, mut empty) = (0.0, 0.0);
    let mut i = t;
    while i < f.k * f.d {
        let (c, j) = (i / f.d, i % f.d);
        unsafe {
            let count = *f.counts.add(c);
            let old = *f.current.add(i);
            let new = if count > 0 {
                mean(*f.sums.add(i), *f.inv_scales.add(j), count)
            } else {
                old
            };
            *f.next.add(i) = new;
            *f.sums.add(i) = 0;
            let diff = new as f64 - old as f64;
            shift += diff * diff;
            if j == 0 {
                *f.sizes.add(c) = count;
                empty += (count == 0) as u32 as f64;
            }
        }
        i += threads;
    }
    let mut inertia = 0.0;
    let mut b = t;
    while b < f.blocks {
        inertia += unsafe { *f.block_inertia.add(b) };
        b += threads;
    }
    let [inertia, shift, empty] =
        unsafe { block_sums(e, threads, scratch, [inertia, shift, empty]) };
    // Every thread has read the counts (the barriers above); clear them for the next step.
    let mut c = t;
    while c < f.k {
        unsafe { *f.counts.add(c) = 0 };
        c += threads;
    }
    if t == 0 {
        unsafe {
            *f.out = *f.changed as f64;
            *f.changed = 0;
            *f.out.add(1) = empty;
            *f.out.add(2) = inertia;
            *f.out.add(3) = shift;
        }
    }
}

/// f64 values per thread that [`finalize`] reduces at once (inertia, shift, empty clusters).
pub const FINALIZE_SCRATCH: usize = 3;

/// `mode` bits of the small-step kernels.
pub const MODE_ASSIGN: u32 = 1;
/// See [`MODE_ASSIGN`].
pub const MODE_ACCUMULATE: u32 = 2;

/// Kernel names of the small step, per metric, in the order of [`crate::launch::SMALL_STEPS`].
pub const SMALL_L2_KERNELS: [&str; 4] = [
    "kmeans_small_l2_0",
    "kmeans_small_l2_1",
    "kmeans_small_l2_2",
    "kmeans_small_l2_3",
];
/// See [`SMALL_L2_KERNELS`].
pub const SMALL_L1_KERNELS: [&str; 4] = [
    "kmeans_small_l1_0",
    "kmeans_small_l1_1",
    "kmeans_small_l1_2",
    "kmeans_small_l1_3",
];

macro_rules! small_kernel {
    ($name:ident, $metric:expr, $shape:literal) => {
        /// One small Lloyd step (see the module comment) with the shape `launch::SMALL_STEPS[i]` its
        /// name ends in: with `mode & MODE_ASSIGN` labels every point (counting changed
        /// labels, writing distances and per-block inertia), else reads the labels; with
        /// `mode & MODE_ACCUMULATE` adds the points to `sums` / `counts`.
        ///
        /// # Safety
        /// As for [`step`]: `BLOCK` threads, `ceil(n / block_points())` blocks,
        /// `layout(k, d).bytes` of dynamic shared memory, `d ≤ max_d`.
        #[cfg(target_arch = "nvptx64")]
        #[unsafe(no_mangle)]
        pub unsafe extern "gpu-kernel" fn $name(
            x: *const f32,
            x_sq_norms: *const f32,
            n: u32,
            d: u32,
            centroids: *const f32,
            k: u32,
            labels: *mut u32,
            min_dist: *mut f32,
            changed: *mut u32,
            block_inertia: *mut f64,
            scales: *const f32,
            sums: *mut i64,
            counts: *mut u32,
            mode: u32,
        ) {
            const SHAPE: SmallStep = crate::launch::SMALL_STEPS[$shape];
            let s = Step {
                x,
                x_sq_norms,
                n: n as usize,
                d: (d as usize).clamp(1, SHAPE.max_d),
                centroids,
                k: k as usize,
                metric: $metric,
                labels,
                min_dist,
                changed,
                block_inertia,
                scales,
                sums,
                counts,
                assign: mode & MODE_ASSIGN != 0,
                accumulate: mode & MODE_ACCUMULATE != 0,
            };
            unsafe { step::<{ SHAPE.max_d }, { SHAPE.points }, _>(crate::exec::Gpu, s) }
        }
    };
}

small_kernel!(kmeans_small_l2_0, AssignMetric::SqL2, 0);
small_kernel!(kmeans_small_l2_1, AssignMetric::SqL2, 1);
small_kernel!(kmeans_small_l2_2, AssignMetric::SqL2, 2);
small_kernel!(kmeans_small_l2_3, AssignMetric::SqL2, 3);
small_kernel!(kmeans_small_l1_0, AssignMetric::L1, 0);
small_kernel!(kmeans_small_l1_1, AssignMetric::L1, 1);
small_kernel!(kmeans_small_l1_2, AssignMetric::L1, 2);
small_kernel!(kmeans_small_l1_3, AssignMetric::L1, 3);

/// Finishes a small step (see [`finalize`]) in one block of `REDUCE_BLOCK` threads with
/// `FINALIZE_SCRATCH · 8 · REDUCE_BLOCK` bytes of dynamic shared memory.
///
/// # Safety
/// `sums`: `k × d`; `counts`, `sizes`: `k`; `inv_scales`: `d`; `current`, `next`: `k × d`;
/// `changed`: 1; `block_inertia`: `blocks`; `out`: 4.
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub unsafe extern "gpu-kernel" fn kmeans_finalize_small(
    sums: *mut i64,
    counts: *mut u32,
    k: u32,
    d: u32,
    inv_scales: *const f64,
    current: *const f32,
    next: *mut f32,
    sizes: *mut u32,
    changed: *mut u32,
    block_inertia: *const f64,
    blocks: u32,
    out: *mut f64,
) {
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
    };
    unsafe { finalize(crate::exec::Gpu, crate::launch::REDUCE_BLOCK as usize, f) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::fixed::{inv_pow2_f64, pow2_f32, scale_exponent};
    use crate::math::distance;

    /// Values on a coarse grid, so that exact distance ties between centroids happen.
    fn grid(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 7;
                (h % 9) as f32 * 0.5 - 2.0
            })
            .collect()
    }

    /// The labels, distances, sums and counts the CPU twin computes.
    fn reference(
        x: &[f32],
        c: &[f32],
        d: usize,
        metric: AssignMetric,
        scales: &[f32],
    ) -> (Vec<u32>, Vec<f32>, Vec<i64>, Vec<u32>) {
        let k = c.len() / d;
        let (mut labels, mut dists) = (vec![], vec![]);
        let mut sums = vec![0i64; k * d];
        let mut counts = vec![0u32; k];
        for row in x.chunks(d) {
            let x_sq = sq_norm(row);
            let (mut best, mut label) = (f32::INFINITY, 0);
            for (j, cr) in c.chunks(d).enumerate() {
                let mut acc = 0.0;
                for q in 0..d {
                    acc = assign_step(metric, acc, row[q], cr[q]);
                }
                let score = assign_score(metric, acc, sq_norm(cr));
                if score < best {
                    (best, label) = (score, j);
                }
            }
            let dist = assign_distance(metric, x_sq, best);
            if metric == AssignMetric::SqL2 {
                // The GEMM form recovers the direct distance up to rounding.
                assert!((dist - distance(metric, row, &c[label * d..][..d])).abs() < 1e-3);
            }
            labels.push(label as u32);
            dists.push(dist);
            counts[label] += 1;
            for q in 0..d {
                sums[label * d + q] += to_fixed(row[q], scales[q]);
            }
        }
        (labels, dists, sums, counts)
    }

    fn run<const MAXD: usize, const PTS: usize>(
        n: usize,
        d: usize,
        k: usize,
        metric: AssignMetric,
    ) {
        let shape = SmallStep {
            max_d: MAXD,
            points: PTS,
        };
        let x = grid(n * d, 1);
        let c = x[..k * d].to_vec();
        let x_sq: Vec<f32> = x.chunks(d).map(sq_norm).collect();
        let exps: Vec<i32> = (0..d).map(|_| scale_exponent(2.0, n)).collect();
        let scales: Vec<f32> = exps.iter().map(|&s| pow2_f32(s)).collect();
        let (want_labels, want_dist, want_sums, want_counts) =
            reference(&x, &c, d, metric, &scales);

        let blocks = n.div_ceil(shape.block_points());
        let mut labels = vec![u32::MAX; n];
        let mut min_dist = vec![f32::NAN; n];
        let mut changed = vec![0u32];
        let mut inertia = vec![0f64; blocks];
        let mut sums = vec![0i64; k * d];
        let mut counts = vec![0u32; k];
        let args = Step {
            x: x.as_ptr(),
            x_sq_norms: x_sq.as_ptr(),
            n,
            d,
            centroids: c.as_ptr(),
            k,
            metric,
            labels: labels.as_mut_ptr(),
            min_dist: min_dist.as_mut_ptr(),
            changed: changed.as_mut_ptr(),
            block_inertia: inertia.as_mut_ptr(),
            scales: scales.as_ptr(),
            sums: sums.as_mut_ptr(),
            counts: counts.as_mut_ptr(),
            assign: true,
            accumulate: true,
        };
        let args = P(&args as *const Step as *mut Step);
        let bytes = shape.layout(k, d).bytes;
        launch(blocks, BLOCK as usize, bytes, |e| unsafe {
            step::<MAXD, PTS, _>(e, *args.get())
        });
        let case = format!("{metric:?} n={n} d={d} k={k} {shape:?}");
        assert_eq!(labels, want_labels, "{case}");
        assert_eq!(
            min_dist.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want_dist.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{case}"
        );
        // Every old label was u32::MAX, so every point changed.
        assert_eq!(changed[0] as usize, n, "{case}");
        assert_eq!(sums, want_sums, "{case}");
        assert_eq!(counts, want_counts, "{case}");
        let total: f64 = inertia.iter().sum();
        let want: f64 = want_dist.iter().map(|&v| v as f64).sum();
        assert!((total - want).abs() <= 1e-9 * want.max(1.0), "{case}");

        // The finalize kernel: means, sizes, summary; sums and counts cleared.
        let inv: Vec<f64> = exps.iter().map(|&s| inv_pow2_f64(s)).collect();
        let mut next = vec![f32::NAN; k * d];
        let mut sizes = vec![0u32; k];
        let mut out = vec![0f64; 4];
        let f = Finalize {
            sums: sums.as_mut_ptr(),
            counts: counts.as_mut_ptr(),
            k,
            d,
            inv_scales: inv.as_ptr(),
            current: c.as_ptr(),
            next: next.as_mut_ptr(),
            sizes: sizes.as_mut_ptr(),
            changed: changed.as_mut_ptr(),
            block_inertia: inertia.as_ptr(),
            blocks,
            out: out.as_mut_ptr(),
        };
        let f = P(&f as *const Finalize as *mut Finalize);
        launch(1, 64, FINALIZE_SCRATCH * 64 * 8, |e| unsafe {
            finalize(e, 64, *f.get())
        });
        let mut empty = 0;
        for cl in 0..k {
            for q in 0..d {
                let want = if want_counts[cl] > 0 {
                    mean(want_sums[cl * d + q], inv[q], want_counts[cl])
                } else {
                    c[cl * d + q]
                };
                assert_eq!(next[cl * d + q].to_bits(), want.to_bits(), "{case}");
            }
            empty += (want_counts[cl] == 0) as usize;
        }
        assert_eq!(sizes, want_counts, "{case}");
        assert_eq!(out[0] as usize, n);
        assert_eq!(out[1] as usize, empty);
        assert!((out[2] - want).abs() <= 1e-9 * want.max(1.0), "{case}");
        assert!(sums.iter().all(|&v| v == 0) && counts.iter().all(|&v| v == 0));
        assert_eq!(
            changed[0], 0,
            "the counter is left at zero for the next step"
        );
    }

    #[test]
    fn emulated_small_step_matches_the_cpu() {
        for metric in [AssignMetric::SqL2, AssignMetric::L1] {
            // The shapes the kernels are built with.
            const S: [SmallStep; 4] = crate::launch::SMALL_STEPS;
            run::<{ S[0].max_d }, { S[0].points }>(2100, 3, 7, metric);
            run::<{ S[0].max_d }, { S[0].points }>(5, 1, 5, metric);
            run::<{ S[1].max_d }, { S[1].points }>(1030, 9, 16, metric);
            run::<{ S[2].max_d }, { S[2].points }>(600, 17, 40, metric);
            run::<{ S[3].max_d }, { S[3].points }>(300, 75, 80, metric);
        }
    }

    #[test]
    fn labels_only_and_sums_only_modes() {
        let (n, d, k) = (700, 5, 6);
        let x = grid(n * d, 3);
        let c = x[..k * d].to_vec();
        let x_sq: Vec<f32> = x.chunks(d).map(sq_norm).collect();
        let scales = vec![pow2_f32(scale_exponent(2.0, n)); d];
        let (want_labels, _, want_sums, want_counts) =
            reference(&x, &c, d, AssignMetric::SqL2, &scales);
        let mut labels = want_labels.clone();
        let (mut min_dist, mut changed) = (vec![0f32; n], vec![0u32]);
        let mut inertia = vec![0f64; 1];
        let mut sums = vec![0i64; k * d];
        let mut counts = vec![0u32; k];
        let base = Step {
            x: x.as_ptr(),
            x_sq_norms: x_sq.as_ptr(),
            n,
            d,
            centroids: c.as_ptr(),
            k,
            metric: AssignMetric::SqL2,
            labels: labels.as_mut_ptr(),
            min_dist: min_dist.as_mut_ptr(),
            changed: changed.as_mut_ptr(),
            block_inertia: inertia.as_mut_ptr(),
            scales: scales.as_ptr(),
            sums: sums.as_mut_ptr(),
            counts: counts.as_mut_ptr(),
            assign: true,
            accumulate: false,
        };
        let bytes = SMALL_STEP_8.layout(k, d).bytes;
        for (assign, accumulate) in [(true, false), (false, true)] {
            let args = Step {
                assign,
                accumulate,
                ..base
            };
            let args = P(&args as *const Step as *mut Step);
            launch(1, BLOCK as usize, bytes, |e| unsafe {
                step::<8, 4, _>(e, *args.get())
            });
        }
        // Labels already right: none changed; the sums come from the labels read back.
        assert_eq!(labels, want_labels);
        assert_eq!(changed[0], 0);
        assert_eq!(sums, want_sums);
        assert_eq!(counts, want_counts);
    }

    const SMALL_STEP_8: SmallStep = SmallStep {
        max_d: 8,
        points: 4,
    };
}
