//! One Lloyd step for small shapes (few dimensions, centroids that fit in shared memory), fused
//! into one kernel: assignment and the block's share of the centroid sums.
//!
//! The register-tiled [`crate::assign`] kernels pay for their tiles with barriers and merges that
//! a shape like 10^6 × 9, k = 16 never earns back. Here the block stages its points and all `k`
//! centroids in shared memory, and every thread scans all centroids for its points (each
//! centroid row read as broadcast 16-byte loads, `unroll` centroids at a time), so the step is a
//! single pass over the data. Points of up to [`crate::launch::SMALL_REGISTER_D`] dimensions are
//! held in registers and scanned with the quad count (or, below four, the exact dimension count)
//! fixed at compile time; wider points are read from their staged rows a quad at a time. The
//! distance of every (point, centroid) pair runs over the dimensions in order 0..d with the same
//! steps as the CPU twin, and the first minimum in centroid order wins, so labels are the CPU's
//! bit for bit.
//!
//! The sums: the block sorts its points by label in shared memory (a counting sort), then one
//! thread per (cluster, dimension) adds that cluster's fixed-point coordinates in registers and
//! adds the total to the global sums with one 64-bit integer atomic. Integer sums do not depend on
//! the order of the additions, so the centroids stay reproducible. [`kmeans_finalize_small`] turns
//! the sums into means, reduces the step's summary and zeroes the sums for the next step.

use crate::exec::{Exec, block_sum_f64, block_sums};
use crate::fixed::{mean, to_fixed};
use crate::launch::{BLOCK, SmallLayout, SmallStep};
use crate::math::{AssignMetric, assign_distance, assign_score, assign_step, fma};
use crate::tile::{load_vec4s, store_vec4};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
/// dimensions, `S.unroll` centroids at a time (`MAXD`, `P`, `CU` spelled out for the register
/// arrays).
///
/// # Safety
/// `BLOCK` threads, `ceil(n / (BLOCK · P))` blocks, `SmallStep::layout(k, d).bytes` of 16-byte
/// aligned dynamic shared memory; `d ≤ MAXD`; pointers valid for the sizes; labels `< k` when
/// read.
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
    unsafe {
        stage_rows(e, s.x.add(first * s.d), rows, s.d, m.points, m.point_stride);
        if s.assign {
            stage_rows(e, s.centroids, s.k, s.d, m.centroids, d4);
        }
    }
    e.sync();
    let mut label = [0u32; P];
    if s.assign {
        if s.metric == AssignMetric::SqL2 {
            let norm_in_padding = MAXD == 4 && s.d < 4;
            unsafe { centroid_norms(e, &s, m.centroids, m.norms, d4, norm_in_padding) };
        }
        e.sync();
        // Loaded now so that their latency hides behind the centroid loop.
        let mut old = [0u32; P];
        for (p, o) in old.iter_mut().enumerate() {
            let i = point(p);
            if i < s.n {
                *o = unsafe { *s.labels.add(i) };
            }
        }
        let scan = Scan {
            metric: s.metric,
            centroids: m.centroids,
            norms: m.norms,
            k: s.k as u32,
            d4: d4 as u32,
        };
        let quads = s.d.div_ceil(4);
        let mut x_sq = [0f32; P];
        let (best, found) = if shape.rows_in_shared() {
            // Rows are zero-padded to whole quads; the padding leaves the norms unchanged.
            let xrows: [*const f32; P] = core::array::from_fn(|p| unsafe {
                m.points
                    .add((t + p * threads) * m.point_stride)
                    .cast_const()
            });
            if s.metric == AssignMetric::SqL2 {
                for (sq, row) in x_sq.iter_mut().zip(&xrows) {
                    for j4 in 0..quads {
                        let v: [f32; 4] = unsafe { load_vec4s(row.add(4 * j4)) };
                        for &w in &v {
                            *sq = fma(w, w, *sq);
                        }
                    }
                }
            }
            unsafe { scan.run_rows::<P, CU>(&xrows, quads) }
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
    if s.accumulate {
        unsafe { accumulate(e, &s, &label, &m, point) };
    }
}

/// The centroid scan of one thread: staged centroids (rows of `d4` words, zero-padded) and,
/// for squared L2, their squared norms.
#[derive(Clone, Copy)]
struct Scan {
    metric: AssignMetric,
    centroids: *const f32,
    norms: *const f32,
    k: u32,
    d4: u32,
}

impl Scan {
    /// Each point's best score and its centroid: every centroid in order, `CU` at a time, over
    /// the dimensions `0..WD` of the first `quads` quads (`LAST` of the last quad's lanes), in
    /// the CPU's order per (point, centroid); the first minimum in centroid order wins (strict
    /// `<`, from centroid 0). Padding dimensions are 0 in both operands and leave the
    /// accumulators unchanged.
    ///
    /// # Safety
    /// `WD ≤ MAXD`, `quads ≤ WD / 4`, `4 · quads ≤ d4`; the staged rows hold `k × d4` words.
    #[inline(always)]
    unsafe fn run<
        const MAXD: usize,
        const P: usize,
        const CU: usize,
        const WD: usize,
        const LAST: usize,
    >(
        self,
        xr: &[[f32; MAXD]; P],
        quads: usize,
    ) -> ([f32; P], [u32; P]) {
        let mut best = [f32::INFINITY; P];
        let mut label = [0u32; P];
        // Rows of whole quads are `WD` words apart: constant offsets from a running pointer.
        let d4 = if 4 * quads == WD {
            WD
        } else {
            self.d4 as usize
        };
        let grouped = self.k - self.k % CU as u32;
        let (mut c, mut row) = (0, self.centroids);
        while c < grouped {
            unsafe {
                self.group::<MAXD, P, CU, WD, LAST>(xr, quads, c, row, d4, &mut best, &mut label)
            };
            c += CU as u32;
            row = unsafe { row.add(CU * d4) };
        }
        while c < self.k {
            unsafe {
                self.group::<MAXD, P, 1, WD, LAST>(xr, quads, c, row, d4, &mut best, &mut label)
            };
            c += 1;
            row = unsafe { row.add(d4) };
        }
        (best, label)
    }

    /// Scores centroids `c..c + G` (staged from `row`, `d4` words apart) against the thread's
    /// points and keeps the better ones. With fewer than four dimensions the squared norm is
    /// the last word of the centroid's quad (see [`centroid_norms`]).
    ///
    /// # Safety
    /// As for [`Scan::run`], with `c + G ≤ k`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn group<
        const MAXD: usize,
        const P: usize,
        const G: usize,
        const WD: usize,
        const LAST: usize,
    >(
        self,
        xr: &[[f32; MAXD]; P],
        quads: usize,
        c: u32,
        row: *const f32,
        d4: usize,
        best: &mut [f32; P],
        label: &mut [u32; P],
    ) {
        let mut acc = [[0f32; G]; P];
        let mut c_sq = [0f32; G];
        for j4 in 0..WD / 4 {
            if j4 < quads {
                let lanes = if j4 + 1 == WD / 4 { LAST } else { 4 };
                for u in 0..G {
                    let v: [f32; 4] = unsafe { load_vec4s(row.add(u * d4 + 4 * j4)) };
                    for q in 0..4 {
                        if q < lanes {
                            for p in 0..P {
                                acc[p][u] =
                                    assign_step(self.metric, acc[p][u], xr[p][4 * j4 + q], v[q]);
                            }
                        }
                    }
                    if WD == 4 && LAST < 4 {
                        c_sq[u] = v[3];
                    }
                }
            }
        }
        if !(WD == 4 && LAST < 4) && self.metric == AssignMetric::SqL2 {
            for (u, c_sq) in c_sq.iter_mut().enumerate() {
                *c_sq = unsafe { *self.norms.add(c as usize + u) };
            }
        }
        unsafe { self.keep_better(&acc, &c_sq, c, best, label) };
    }

    /// As [`Scan::run`], reading each point's row (zero-padded to whole quads) from shared
    /// memory a quad at a time instead of holding it in registers.
    ///
    /// # Safety
    /// `xrows` are 16-byte aligned rows of `4 · quads ≤ d4` words.
    #[inline(always)]
    unsafe fn run_rows<const P: usize, const CU: usize>(
        self,
        xrows: &[*const f32; P],
        quads: usize,
    ) -> ([f32; P], [u32; P]) {
        let mut best = [f32::INFINITY; P];
        let mut label = [0u32; P];
        let grouped = self.k - self.k % CU as u32;
        let mut c = 0;
        while c < grouped {
            unsafe { self.group_rows::<P, CU>(xrows, quads, c, &mut best, &mut label) };
            c += CU as u32;
        }
        while c < self.k {
            unsafe { self.group_rows::<P, 1>(xrows, quads, c, &mut best, &mut label) };
            c += 1;
        }
        (best, label)
    }

    /// As [`Scan::group`], with the points' rows in shared memory.
    ///
    /// # Safety
    /// As for [`Scan::run_rows`], with `c + G ≤ k`.
    #[inline(always)]
    unsafe fn group_rows<const P: usize, const G: usize>(
        self,
        xrows: &[*const f32; P],
        quads: usize,
        c: u32,
        best: &mut [f32; P],
        label: &mut [u32; P],
    ) {
        let mut acc = [[0f32; G]; P];
        let crows: [*const f32; G] = core::array::from_fn(|u| unsafe {
            self.centroids.add(((c + u as u32) * self.d4) as usize)
        });
        for j4 in 0..quads {
            let xv: [[f32; 4]; P] =
                core::array::from_fn(|p| unsafe { load_vec4s(xrows[p].add(4 * j4)) });
            for (u, row) in crows.iter().enumerate() {
                let v: [f32; 4] = unsafe { load_vec4s(row.add(4 * j4)) };
                for q in 0..4 {
                    for p in 0..P {
                        acc[p][u] = assign_step(self.metric, acc[p][u], xv[p][q], v[q]);
                    }
                }
            }
        }
        let mut c_sq = [0f32; G];
        if self.metric == AssignMetric::SqL2 {
            for (u, c_sq) in c_sq.iter_mut().enumerate() {
                *c_sq = unsafe { *self.norms.add(c as usize + u) };
            }
        }
        unsafe { self.keep_better(&acc, &c_sq, c, best, label) };
    }

    /// Ranks centroids `c..c + G` (squared norms `c_sq`) by their finished accumulators, in
    /// centroid order, keeping each point's first minimum.
    ///
    /// # Safety
    /// `c + G ≤ k`.
    #[inline(always)]
    unsafe fn keep_better<const P: usize, const G: usize>(
        self,
        acc: &[[f32; G]; P],
        c_sq: &[f32; G],
        c: u32,
        best: &mut [f32; P],
        label: &mut [u32; P],
    ) {
        for u in 0..G {
            for p in 0..P {
                let score = assign_score(self.metric, acc[p][u], c_sq[u]);
                if score < best[p] {
                    best[p] = score;
                    label[p] = c + u as u32;
                }
            }
        }
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
                scratch: base.add(layout.scratch).cast(),
            }
        }
    }
}

/// Copies `rows` rows of `d` values (a contiguous run at `src`) into shared memory, row `r` at
/// `dst[r · stride..]`, and zeroes the rows' padding; consecutive threads read consecutive
/// values, so the loads coalesce. With `src` 16-byte aligned the run is read a quad at a time,
/// four loads in flight per thread (a quad spans at most two rows when `d ≥ 4`). No barrier.
#[inline(always)]
unsafe fn stage_rows<E: Exec>(
    e: E,
    src: *const f32,
    rows: usize,
    d: usize,
    dst: *mut f32,
    stride: usize,
) {
    let (t, threads, d, stride) = (e.thread() as u32, BLOCK, d as u32, stride as u32);
    let len = rows as u32 * d;
    let at = |r: u32, j: u32| (r * stride + j) as usize;
    if (src as usize).is_multiple_of(16) && (stride == d || d >= 4) {
        let quads = len / 4;
        // Quad q starts at element 4q = r·d + j; stepping q by `threads` steps (r, j) by
        // (4·threads / d, 4·threads % d).
        let (dr, dj) = (4 * threads / d, 4 * threads % d);
        let (mut r, mut j) = (4 * t / d, 4 * t % d);
        let mut q = t;
        while q < quads {
            let mut v = [[0f32; 4]; 4];
            for (u, v) in v.iter_mut().enumerate() {
                let qu = q + u as u32 * threads;
                if qu < quads {
                    *v = unsafe { load_vec4s(src.add(4 * qu as usize)) };
                }
            }
            for v in &v {
                if q < quads {
                    if stride == d {
                        unsafe { store_vec4(dst.add(4 * q as usize), *v) };
                    } else {
                        for l in 0..4 {
                            let jl = j + l;
                            let to = if jl < d { at(r, jl) } else { at(r + 1, jl - d) };
                            unsafe { *dst.add(to) = v[l as usize] };
                        }
                    }
                }
                q += threads;
                r += dr;
                j += dj;
                if j >= d {
                    j -= d;
                    r += 1;
                }
            }
        }
        let i = 4 * quads + t;
        if i < len {
            unsafe { *dst.add(at(i / d, i % d)) = *src.add(i as usize) };
        }
    } else {
        // Element i = r·d + j; stepping i by `threads` steps (r, j) by (threads / d, threads % d).
        let (dr, dj) = (threads / d, threads % d);
        let (mut r, mut j) = (t / d, t % d);
        let mut i = t;
        while i < len {
            unsafe { *dst.add(at(r, j)) = *src.add(i as usize) };
            i += threads;
            r += dr;
            j += dj;
            if j >= d {
                j -= d;
                r += 1;
            }
        }
    }
    if stride > d {
        let mut r = t;
        while r < rows as u32 {
            for j in d..stride {
                unsafe { *dst.add(at(r, j)) = 0.0 };
            }
            r += threads;
        }
    }
}

/// The staged centroids' squared norms (squared L2 only), in dimension order as `row_sq_norms`
/// computes them: a quad at a time, the zero padding leaving the sums unchanged. With
/// `norm_in_padding` (the 4-dimension kernel's exact scans of fewer than four dimensions) each
/// norm also goes to its row's padding word, which the scan reads with the coordinates (one
/// shared load per centroid instead of two).
///
/// # Safety
/// The centroids are staged (rows of `d4` words) and a barrier has passed.
#[inline(always)]
unsafe fn centroid_norms<E: Exec>(
    e: E,
    s: &Step,
    cs: *mut f32,
    cn: *mut f32,
    d4: usize,
    norm_in_padding: bool,
) {
    let mut c = e.thread();
    while c < s.k {
        let mut norm = 0.0;
        for j4 in 0..d4 / 4 {
            let v: [f32; 4] = unsafe { load_vec4s(cs.add(c * d4 + 4 * j4)) };
            for &w in &v {
                norm = fma(w, w, norm);
            }
        }
        unsafe { *cn.add(c) = norm };
        if norm_in_padding {
            // The padding word of the centroid's only quad, read with its coordinates.
            unsafe { *cs.add(c * d4 + 3) = norm };
        }
        c += BLOCK as usize;
    }
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
    if t < s.d {
        unsafe { *m.scales.add(t) = *s.scales.add(t) };
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
            let scale = unsafe { *m.scales.add(j) };
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
    // Cells t, t + threads, … in order, their loads issued four cells at a time (one round trip
    // per four instead of one per cell).
    const BATCH: usize = 4;
    let (cells, d, th) = ((f.k * f.d) as u32, f.d as u32, threads as u32);
    let mut first = t as u32;
    while first < cells {
        let cell = |u: usize| first + u as u32 * th;
        let mut loaded = [(0u32, 0f32, 0i64, 0f64); BATCH];
        for (u, l) in loaded.iter_mut().enumerate() {
            let i = cell(u);
            if i < cells {
                let (c, j) = (i / d, i % d);
                *l = unsafe {
                    (
                        *f.counts.add(c as usize),
                        *f.current.add(i as usize),
                        *f.sums.add(i as usize),
                        *f.inv_scales.add(j as usize),
                    )
                };
            }
        }
        for (u, &(count, old, sum, inv_scale)) in loaded.iter().enumerate() {
            let i = cell(u);
            if i < cells {
                let new = if count > 0 {
                    mean(sum, inv_scale, count)
                } else {
                    old
                };
                unsafe {
                    *f.next.add(i as usize) = new;
                    *f.sums.add(i as usize) = 0;
                }
                let diff = new as f64 - old as f64;
                shift += diff * diff;
                if i % d == 0 {
                    unsafe { *f.sizes.add((i / d) as usize) = count };
                    empty += (count == 0) as u32 as f64;
                }
            }
        }
        first += BATCH as u32 * th;
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
            unsafe {
                step::<{ SHAPE.max_d }, { SHAPE.points }, { SHAPE.unroll }, _>(crate::exec::Gpu, s)
            }
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
    use crate::math::{distance, sq_norm};

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

    /// 16-byte aligned storage for the points, so that both staging paths run.
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct Quad([f32; 4]);

    /// `x` copied to 16-byte aligned memory, or to one word past it when `misalign`.
    fn placed(x: &[f32], misalign: bool) -> (Vec<Quad>, usize) {
        let skip = misalign as usize;
        let mut buf = vec![Quad([0.0; 4]); (x.len() + skip).div_ceil(4)];
        let words = buf.as_mut_ptr().cast::<f32>();
        let dst = unsafe { core::slice::from_raw_parts_mut(words.add(skip), x.len()) };
        dst.copy_from_slice(x);
        (buf, skip)
    }

    fn run<const MAXD: usize, const PTS: usize, const CU: usize>(
        n: usize,
        d: usize,
        k: usize,
        metric: AssignMetric,
        misalign: bool,
    ) {
        let shape = SmallStep {
            max_d: MAXD,
            points: PTS,
            unroll: CU,
        };
        let x = grid(n * d, 1);
        let c = x[..k * d].to_vec();
        let (x_buf, skip) = placed(&x, misalign);
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
            x: unsafe { x_buf.as_ptr().cast::<f32>().add(skip) },
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
            step::<MAXD, PTS, CU, _>(e, *args.get())
        });
        let case = format!("{metric:?} n={n} d={d} k={k} {shape:?} misaligned {misalign}");
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
        // The shapes the kernels are built with, each with the dimension counts of its
        // specialised scans, odd and even d (contiguous and padded staging), k = 1, k = n, k not
        // a multiple of the unroll, n not a multiple of the block.
        const S: [SmallStep; 4] = crate::launch::SMALL_STEPS;
        // Runs shape `SMALL_STEPS[$i]` on each (n, d, k).
        macro_rules! shape {
            ($i:literal, $metric:expr, $misalign:expr, [$(($n:expr, $d:expr, $k:expr)),*]) => {
                $(run::<{ S[$i].max_d }, { S[$i].points }, { S[$i].unroll }>(
                    $n, $d, $k, $metric, $misalign,
                );)*
            };
        }
        for metric in [AssignMetric::SqL2, AssignMetric::L1] {
            for misalign in [false, true] {
                shape!(
                    0,
                    metric,
                    misalign,
                    [
                        (2100, 3, 7),
                        (5, 1, 5),
                        (777, 2, 9),
                        (1500, 4, 255),
                        (64, 3, 1)
                    ]
                );
                shape!(
                    1,
                    metric,
                    misalign,
                    [(1030, 9, 16), (600, 6, 5), (300, 16, 3), (90, 13, 90)]
                );
                shape!(
                    2,
                    metric,
                    misalign,
                    [(600, 17, 40), (300, 32, 7), (200, 24, 33), (150, 27, 1)]
                );
                shape!(
                    3,
                    metric,
                    misalign,
                    [
                        (300, 75, 80),
                        (100, 96, 5),
                        (70, 33, 6),
                        (40, 50, 40),
                        (120, 44, 9)
                    ]
                );
            }
        }
    }

    #[test]
    fn labels_only_and_sums_only_modes() {
        let (n, d, k) = (700, 5, 6);
        let x = grid(n * d, 3);
        let c = x[..k * d].to_vec();
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
                step::<8, 4, 2, _>(e, *args.get())
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
        unroll: 2,
    };
}
