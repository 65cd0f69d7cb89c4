//! Fused distance + argmin: every point's nearest centroid, without an n×k matrix.
//!
//! GEMM-style: a block owns `points()` points and sweeps the centroids in tiles of
//! `centroids()`; both tiles stream through shared memory `ASSIGN_JC` dimensions at a time,
//! transposed, and every thread accumulates a `tp × tc` register tile. For squared L2 the
//! accumulator is the dot product and centroids rank by `‖c‖² − 2·x·c` (one multiply-add per
//! dimension); for L1 it is the distance itself. Every (point, centroid) accumulator runs over
//! the dimensions in order 0..d, exactly as the CPU twin, and candidates merge with the
//! lower-index tie rule, so labels match the CPU bit for bit.

use crate::gpu::{self, atomic_add_u32, block_sum_f64, shared, sync_threads};
use crate::launch::{ASSIGN_JC, ASSIGN_NARROW, ASSIGN_WIDE, AssignTile, BLOCK};
use crate::math::{AssignMetric, assign_distance, assign_score, assign_step, better};
use crate::tile::{load_transposed, load_vec4s};

/// Arguments shared by the assign entry points.
#[derive(Clone, Copy)]
struct Assign {
    x: *const f32,
    x_sq_norms: *const f32,
    n: usize,
    d: usize,
    centroids: *const f32,
    c_sq_norms: *const f32,
    k: usize,
    labels: *mut u32,
    min_dist: *mut f32,
    changed: *mut u32,
    block_inertia: *mut f64,
}

macro_rules! assign_kernel {
    ($name:ident, $metric:expr, $tile:expr) => {
        /// Labels each of the `n` points of `x` (row-major, `d` columns) with its nearest of the
        /// `k` centroids and writes its distance. Squared norms of points and centroids are
        /// inputs (ignored by L1). With `changed` non-null, adds the number of labels that
        /// differ from what `labels` held; with `block_inertia` non-null, writes each block's
        /// fixed-order sum of distances at its index.
        ///
        /// # Safety
        /// Pointers valid for those sizes; `BLOCK` threads, `ceil(n / points())` blocks and
        /// `shared_bytes()` of dynamic shared memory for this kernel's tile.
        #[unsafe(no_mangle)]
        pub unsafe extern "gpu-kernel" fn $name(
            x: *const f32,
            x_sq_norms: *const f32,
            n: u32,
            d: u32,
            centroids: *const f32,
            c_sq_norms: *const f32,
            k: u32,
            labels: *mut u32,
            min_dist: *mut f32,
            changed: *mut u32,
            block_inertia: *mut f64,
        ) {
            let args = Assign {
                x,
                x_sq_norms,
                n: n as usize,
                d: (d as usize).max(1),
                centroids,
                c_sq_norms,
                k: k as usize,
                labels,
                min_dist,
                changed,
                block_inertia,
            };
            unsafe { run::<{ $tile.tp }, { $tile.tc }>(args, $metric, $tile) }
        }
    };
}

assign_kernel!(kmeans_assign_l2_wide, AssignMetric::SqL2, ASSIGN_WIDE);
assign_kernel!(kmeans_assign_l2_narrow, AssignMetric::SqL2, ASSIGN_NARROW);
assign_kernel!(kmeans_assign_l1_wide, AssignMetric::L1, ASSIGN_WIDE);
assign_kernel!(kmeans_assign_l1_narrow, AssignMetric::L1, ASSIGN_NARROW);

#[inline(always)]
unsafe fn run<const TP: usize, const TC: usize>(a: Assign, metric: AssignMetric, tile: AssignTile) {
    let t = gpu::thread();
    let (tx, ty) = (t % tile.ct, t / tile.ct);
    let (pb, cb) = (tile.points(), tile.centroids());
    let (xs_stride, cs_stride) = (tile.x_stride(), tile.c_stride());
    let first_point = gpu::block() * pb;

    let scratch = shared::<f64>();
    let xs = unsafe { scratch.add(2 * BLOCK as usize) }.cast::<f32>();
    let cs = unsafe { xs.add(ASSIGN_JC * xs_stride) };
    let merge_score = unsafe { cs.add(ASSIGN_JC * cs_stride) };
    let merge_index = unsafe { merge_score.add(pb * tile.ct) }.cast::<u32>();

    let mut best_score = [f32::INFINITY; TP];
    let mut best_index = [u32::MAX; TP];
    let mut first_centroid = 0;
    while first_centroid < a.k {
        let mut acc = [[0f32; TC]; TP];
        let mut j0 = 0;
        while j0 < a.d {
            let width = ASSIGN_JC.min(a.d - j0);
            sync_threads();
            unsafe {
                let (x, c, bt) = (a.x, a.centroids, BLOCK as usize);
                let (n, k, d) = (a.n, a.k, a.d);
                load_transposed::<ASSIGN_JC>(
                    t,
                    bt,
                    x,
                    n,
                    d,
                    first_point,
                    pb,
                    j0,
                    width,
                    xs,
                    xs_stride,
                );
                load_transposed::<ASSIGN_JC>(
                    t,
                    bt,
                    c,
                    k,
                    d,
                    first_centroid,
                    cb,
                    j0,
                    width,
                    cs,
                    cs_stride,
                );
            }
            sync_threads();
            // A full chunk has a constant trip count, so it unrolls and the shared loads of one
            // dimension overlap the multiply-adds of the previous one.
            if width == ASSIGN_JC {
                for jj in 0..ASSIGN_JC {
                    unsafe {
                        accumulate(metric, &mut acc, xs, cs, jj, xs_stride, cs_stride, tx, ty)
                    };
                }
            } else {
                for jj in 0..width {
                    unsafe {
                        accumulate(metric, &mut acc, xs, cs, jj, xs_stride, cs_stride, tx, ty)
                    };
                }
            }
            j0 += width;
        }
        // Branch-free so the loops unroll and `acc` stays in registers.
        let mut c_sq = [0f32; TC];
        let mut valid = [false; TC];
        for q in 0..TC {
            let c = first_centroid + tx * TC + q;
            valid[q] = c < a.k;
            if valid[q] && metric == AssignMetric::SqL2 {
                c_sq[q] = unsafe { *a.c_sq_norms.add(c) };
            }
        }
        for i in 0..TP {
            for q in 0..TC {
                let c = (first_centroid + tx * TC + q) as u32;
                let score = assign_score(metric, acc[i][q], c_sq[q]);
                let take = valid[q] && better(score, c, best_score[i], best_index[i]);
                best_score[i] = if take { score } else { best_score[i] };
                best_index[i] = if take { c } else { best_index[i] };
            }
        }
        first_centroid += cb;
    }

    // Merge the centroid groups' candidates per point, in group order.
    for i in 0..TP {
        let p = ty * TP + i;
        unsafe {
            *merge_score.add(p * tile.ct + tx) = best_score[i];
            *merge_index.add(p * tile.ct + tx) = best_index[i];
        }
    }
    sync_threads();
    let mut moved = 0.0;
    let mut dist_sum = 0.0;
    let mut p = t;
    while p < pb {
        let i = first_point + p;
        if i < a.n {
            let (mut score, mut label) = (f32::INFINITY, u32::MAX);
            for g in 0..tile.ct {
                let (s, l) = unsafe {
                    (
                        *merge_score.add(p * tile.ct + g),
                        *merge_index.add(p * tile.ct + g),
                    )
                };
                if better(s, l, score, label) {
                    score = s;
                    label = l;
                }
            }
            if label == u32::MAX {
                // Every score was +inf (or NaN): the CPU's first-minimum scan keeps centroid 0.
                label = 0;
            }
            let x_sq = match metric {
                AssignMetric::SqL2 => unsafe { *a.x_sq_norms.add(i) },
                AssignMetric::L1 => 0.0,
            };
            let dist = assign_distance(metric, x_sq, score);
            unsafe {
                if *a.labels.add(i) != label {
                    moved += 1.0;
                }
                *a.labels.add(i) = label;
                *a.min_dist.add(i) = dist;
            }
            dist_sum += dist as f64;
        }
        p += BLOCK as usize;
    }
    if !a.changed.is_null() {
        let total = unsafe { block_sum_f64(scratch, moved) };
        if t == 0 && total > 0.0 {
            unsafe { atomic_add_u32(a.changed, total as u32) };
        }
    }
    if !a.block_inertia.is_null() {
        let total = unsafe { block_sum_f64(scratch.add(BLOCK as usize), dist_sum) };
        if t == 0 {
            unsafe { *a.block_inertia.add(gpu::block()) = total };
        }
    }
}

/// Adds dimension `jj` of the staged tiles to the thread's `TP × TC` accumulators.
///
/// # Safety
/// The tiles hold dimension `jj` at the strides given; `xs`, `cs` are 16-byte aligned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate<const TP: usize, const TC: usize>(
    metric: AssignMetric,
    acc: &mut [[f32; TC]; TP],
    xs: *const f32,
    cs: *const f32,
    jj: usize,
    xs_stride: usize,
    cs_stride: usize,
    tx: usize,
    ty: usize,
) {
    let xv: [f32; TP] = unsafe { load_vec4s(xs.add(jj * xs_stride + ty * TP)) };
    let cv: [f32; TC] = unsafe { load_vec4s(cs.add(jj * cs_stride + tx * TC)) };
    for i in 0..TP {
        for q in 0..TC {
            acc[i][q] = assign_step(metric, acc[i][q], xv[i], cv[q]);
        }
    }
}
