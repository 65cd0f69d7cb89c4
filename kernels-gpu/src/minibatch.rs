//! Mini-batch k-means (Sculley, WWW 2010, as scikit-learn's `MiniBatchKMeans`): the kernels of
//! one step over a batch of row indices, and the arithmetic they share with the CPU backend.
//!
//! A step runs three kernels over data that stays resident:
//! 1. [`assign`] (`kmeans_minibatch_assign_{l2,l1}`): every batch row's nearest current centroid
//!    and its distance — the same accumulation over dimensions 0..d, the same scores and the
//!    same tie rule (first minimum in centroid order) as the Lloyd kernels and the CPU backend —
//!    then the row is added to its cluster's exact fixed-point sums ([`crate::fixed`]) and
//!    count. Duplicate rows in the batch are simply added twice.
//! 2. [`update`] (`kmeans_minibatch_update`): every centroid that received `b > 0` rows moves to
//!    the mean of all the rows it has received so far, `c ← (c·n + Σ batch) / (n + b)`
//!    ([`learning_rate_update`]: one f64 fused multiply-add and one division per coordinate, so
//!    the CPU computes the same float), its count becomes `n + b`, and the sums are zeroed for
//!    the next batch.
//! 3. only when the fit has a tolerance, [`shifts`] (`kmeans_minibatch_shift`): each centroid's
//!    squared move, summed over its coordinates in order in f64 ([`row_shift`]); the host adds
//!    the `k` values in centroid order.
//!
//! What the host reads back per step is `b` distances and `k` batch counts (and `k` shifts).

use crate::launch::Kernel;
use crate::math::{AssignMetric, assign_distance, assign_score, assign_step, better, sq_norm};
use crate::params::DevPtr;
use crate::{exec::Exec, fixed::to_fixed};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Batch rows per block of the assign kernel: each thread keeps one accumulator per row for the
/// centroid it is scanning, so every centroid value it loads feeds this many multiply-adds.
pub const BATCH_ROWS: usize = 8;

/// Threads per block of the update kernel (one block per centroid).
pub const UPDATE_THREADS: u32 = 64;

/// "No centroid yet" in the assign kernel's per-thread minimum.
const NONE: u32 = u32::MAX;

/// Blocks of the assign kernel for a batch of `batch` rows.
pub const fn assign_blocks(batch: usize) -> usize {
    batch.div_ceil(BATCH_ROWS)
}

/// Dynamic shared memory of the assign kernel with `threads` threads per block: each thread's
/// best (score, centroid) for every row of the block, then the rows' labels.
pub const fn assign_shared_bytes(threads: usize) -> usize {
    BATCH_ROWS * threads * 8 + BATCH_ROWS * 4
}

/// `fma(a, b, c)` in f64 with one rounding, on both targets.
#[inline(always)]
fn fma64(a: f64, b: f64, c: f64) -> f64 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::f64::math::mul_add(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a.mul_add(b, c)
    }
}

/// The new value of a centroid coordinate `current` that has seen `seen` rows, after a batch
/// added `batch > 0` rows whose fixed-point sum is `sum` (scale `2^s`, `inv_scale = 2^−s`):
/// the mean of all `seen + batch` rows, `(current·seen + sum·2^−s) / (seen + batch)`, in f64
/// (one fused multiply-add, one correctly rounded division), rounded to f32.
#[inline(always)]
pub fn learning_rate_update(current: f32, seen: u64, sum: i64, inv_scale: f64, batch: u32) -> f32 {
    let total = seen + batch as u64;
    (fma64(current as f64, seen as f64, sum as f64 * inv_scale) / total as f64) as f32
}

/// `Σ_j (next_j − current_j)²` in f64, in dimension order.
#[inline(always)]
pub fn row_shift(next: &[f32], current: &[f32]) -> f64 {
    let mut shift = 0.0;
    for (&a, &b) in next.iter().zip(current) {
        let v = a as f64 - b as f64;
        shift += v * v;
    }
    shift
}

/// Arguments of the assign kernels.
#[derive(Clone, Copy)]
pub struct BatchAssign {
    /// The resident rows, row-major with `d` columns.
    pub x: *const f32,
    pub d: usize,
    /// The batch: `batch` row indices (repeats allowed).
    pub rows: *const u32,
    pub batch: usize,
    /// The current centroids by dimension (`d × k_padded`, as `kmeans_centroids_by_dimension` writes
    /// them) and, for squared L2, their squared norms.
    pub centroids_t: *const f32,
    pub k_padded: usize,
    pub c_sq_norms: *const f32,
    pub k: usize,
    /// Fixed-point scales `2^s` of the dimensions.
    pub scales: *const f32,
    /// `k × d` fixed-point sums and `k` counts, added to (zero before the first batch; the
    /// update kernel zeroes them after reading).
    pub sums: *mut i64,
    pub counts: *mut u32,
    /// Each batch row's distance to its centroid.
    pub distances: *mut f32,
}

/// The body of `kmeans_minibatch_assign_{l2,l1}`: block `b` labels batch rows
/// `b·BATCH_ROWS..` (fewer in the last block), thread `t` scanning centroids `t, t + threads, …`
/// in increasing order, then the block's fixed-order minimum; then adds the rows to the sums.
///
/// # Safety
/// `assign_blocks(batch)` blocks of `threads` threads (a power of two),
/// `assign_shared_bytes(threads)` bytes of dynamic shared memory; `batch ≥ 1`, `k ≥ 1`, every
/// row index valid, pointers valid for the sizes above (`c_sq_norms` read for squared L2 only).
#[inline(always)]
pub unsafe fn assign<const L1: bool, E: Exec>(e: E, threads: usize, a: BatchAssign) {
    let metric = if L1 {
        AssignMetric::L1
    } else {
        AssignMetric::SqL2
    };
    let t = e.thread();
    let first = e.block() * BATCH_ROWS;
    let here = (a.batch - first).min(BATCH_ROWS);
    // Row offsets; past the end of the batch, the last row again (computed, never written).
    let mut offsets = [0usize; BATCH_ROWS];
    for (r, offset) in offsets.iter_mut().enumerate() {
        *offset = unsafe { *a.rows.add(first + r.min(here - 1)) } as usize * a.d;
    }

    let mut best = [f32::INFINITY; BATCH_ROWS];
    let mut best_c = [NONE; BATCH_ROWS];
    let mut c = t;
    while c < a.k {
        let mut acc = [0f32; BATCH_ROWS];
        for j in 0..a.d {
            let cv = unsafe { *a.centroids_t.add(j * a.k_padded + c) };
            for r in 0..BATCH_ROWS {
                acc[r] = assign_step(metric, acc[r], unsafe { *a.x.add(offsets[r] + j) }, cv);
            }
        }
        let norm = if L1 {
            0.0
        } else {
            unsafe { *a.c_sq_norms.add(c) }
        };
        for r in 0..BATCH_ROWS {
            let score = assign_score(metric, acc[r], norm);
            if score < best[r] {
                best[r] = score;
                best_c[r] = c as u32;
            }
        }
        c += threads;
    }

    let scores = e.shared::<f32>();
    let ids = unsafe { scores.add(BATCH_ROWS * threads) }.cast::<u32>();
    let labels = unsafe { ids.add(BATCH_ROWS * threads) };
    unsafe {
        for r in 0..BATCH_ROWS {
            *scores.add(r * threads + t) = best[r];
            *ids.add(r * threads + t) = best_c[r];
        }
        e.sync();
        let mut stride = threads / 2;
        while stride > 0 {
            if t < stride {
                for r in 0..BATCH_ROWS {
                    let (mine, other) = (r * threads + t, r * threads + t + stride);
                    if better(
                        *scores.add(other),
                        *ids.add(other),
                        *scores.add(mine),
                        *ids.add(mine),
                    ) {
                        *scores.add(mine) = *scores.add(other);
                        *ids.add(mine) = *ids.add(other);
                    }
                }
            }
            e.sync();
            stride /= 2;
        }
        if t < here {
            // No score below +∞ (overflow): centroid 0 at +∞, as the CPU's scan leaves it.
            let (label, score) = match *ids.add(t * threads) {
                NONE => (0, f32::INFINITY),
                id => (id, *scores.add(t * threads)),
            };
            let x_sq = if L1 {
                0.0
            } else {
                sq_norm(core::slice::from_raw_parts(a.x.add(offsets[t]), a.d))
            };
            *a.distances.add(first + t) = assign_distance(metric, x_sq, score);
            *labels.add(t) = label;
            AtomicU32::from_ptr(a.counts.add(label as usize)).fetch_add(1, Ordering::Relaxed);
        }
        e.sync();
        // Integer sums: the same totals in any order.
        let mut v = t;
        while v < here * a.d {
            let (r, j) = (v / a.d, v % a.d);
            let q = to_fixed(*a.x.add(offsets[r] + j), *a.scales.add(j));
            let at = *labels.add(r) as usize * a.d + j;
            AtomicU64::from_ptr(a.sums.add(at).cast::<u64>())
                .fetch_add(q as u64, Ordering::Relaxed);
            v += threads;
        }
    }
}

/// Arguments of the update kernel.
#[derive(Clone, Copy)]
pub struct BatchUpdate {
    /// `k × d` current centroids (read) and next centroids (written).
    pub current: *const f32,
    pub next: *mut f32,
    pub d: usize,
    /// The batch's sums and counts (zeroed here after reading).
    pub sums: *mut i64,
    pub batch_counts: *mut u32,
    /// Rows every centroid has received before this batch (increased by the batch's).
    pub counts: *mut u64,
    /// `2^−s` of the dimensions.
    pub inv_scales: *const f64,
    /// The batch's count of every centroid, for the host.
    pub report: *mut u32,
}

/// The body of `kmeans_minibatch_update`: block `c` updates centroid `c`.
///
/// # Safety
/// `k` blocks of `threads` threads; pointers valid for `k × d` / `k` / `d` values.
#[inline(always)]
pub unsafe fn update<E: Exec>(e: E, threads: usize, u: BatchUpdate) {
    let (c, t) = (e.block(), e.thread());
    unsafe {
        let batch = *u.batch_counts.add(c);
        let seen = *u.counts.add(c);
        let mut j = t;
        while j < u.d {
            let i = c * u.d + j;
            *u.next.add(i) = if batch > 0 {
                learning_rate_update(
                    *u.current.add(i),
                    seen,
                    *u.sums.add(i),
                    *u.inv_scales.add(j),
                    batch,
                )
            } else {
                *u.current.add(i)
            };
            *u.sums.add(i) = 0;
            j += threads;
        }
        // Every thread has read the counts before they change.
        e.sync();
        if t == 0 {
            *u.counts.add(c) = seen + batch as u64;
            *u.report.add(c) = batch;
            *u.batch_counts.add(c) = 0;
        }
    }
}

/// The body of `kmeans_minibatch_shift`: `out[c] = row_shift(next[c], current[c])`, one thread
/// per centroid.
///
/// # Safety
/// `ceil(k / threads)` blocks of `threads` threads; `next`, `current`: `k × d`; `out`: `k`.
#[inline(always)]
pub unsafe fn shifts<E: Exec>(
    e: E,
    threads: usize,
    next: *const f32,
    current: *const f32,
    k: usize,
    d: usize,
    out: *mut f64,
) {
    let c = e.block() * threads + e.thread();
    if c < k {
        unsafe {
            let row = |p: *const f32| core::slice::from_raw_parts(p.add(c * d), d);
            *out.add(c) = row_shift(row(next), row(current));
        }
    }
}

/// The `kmeans_minibatch_assign_l2` entry point. CPU twin: `backend::cpu::minibatch::assign_rows`.
pub const KMEANS_MINIBATCH_ASSIGN_L2: Kernel<MinibatchAssignParams> =
    Kernel::new("kmeans_minibatch_assign_l2");

/// The `kmeans_minibatch_assign_l1` entry point. CPU twin: `backend::cpu::minibatch::assign_rows`.
pub const KMEANS_MINIBATCH_ASSIGN_L1: Kernel<MinibatchAssignParams> =
    Kernel::new("kmeans_minibatch_assign_l1");

kernel_params! {
    /// The parameters of both `kmeans_minibatch_assign_*` entry points: the `batch` rows of `x`
    /// (`d` columns) named by `rows`, the centroids by dimension (`d × k_padded`) with their squared
    /// norms, and the batch's `scales`, `sums`, `counts` and `distances` (see [`BatchAssign`]).
    pub struct MinibatchAssignParams {
        pub x: DevPtr<f32>,
        pub d: u32,
        pub rows: DevPtr<u32>,
        pub batch: u32,
        pub centroids_t: DevPtr<f32>,
        pub k_padded: u32,
        pub c_sq_norms: DevPtr<f32>,
        pub k: u32,
        pub scales: DevPtr<f32>,
        pub sums: DevPtr<i64>,
        pub counts: DevPtr<u32>,
        pub distances: DevPtr<f32>,
    }
    entries: minibatch_assign_entry;
}

/// The `kmeans_minibatch_update` entry point. CPU twin: `backend::cpu::minibatch::update_row`.
pub const KMEANS_MINIBATCH_UPDATE: Kernel<MinibatchUpdateParams> =
    Kernel::new("kmeans_minibatch_update").threads(UPDATE_THREADS);

kernel_params! {
    /// `kmeans_minibatch_update`'s parameters.
    pub struct MinibatchUpdateParams {
        pub current: DevPtr<f32>,
        pub next: DevPtr<f32>,
        pub d: u32,
        pub sums: DevPtr<i64>,
        pub batch_counts: DevPtr<u32>,
        pub counts: DevPtr<u64>,
        pub inv_scales: DevPtr<f64>,
        pub report: DevPtr<u32>,
    }
    entries: minibatch_update_entry;
}

/// The `kmeans_minibatch_shift` entry point. CPU twin: `backend::cpu::minibatch::CpuMiniBatch`.
pub const KMEANS_MINIBATCH_SHIFT: Kernel<MinibatchShiftParams> =
    Kernel::new("kmeans_minibatch_shift");

kernel_params! {
    /// `kmeans_minibatch_shift`'s parameters.
    pub struct MinibatchShiftParams {
        pub next: DevPtr<f32>,
        pub current: DevPtr<f32>,
        pub k: u32,
        pub d: u32,
        pub out: DevPtr<f64>,
    }
    entries: minibatch_shift_entry;
}

/// Blocks of `kmeans_minibatch_update` for `k` centroids: one per centroid, `UPDATE_THREADS`
/// threads each.
pub const fn update_grid(k: usize) -> usize {
    k
}

/// Blocks of `kmeans_minibatch_shift` for `k` centroids: a thread per centroid.
pub const fn shift_grid(k: usize) -> usize {
    k.div_ceil(crate::launch::BLOCK as usize)
}

#[cfg(target_arch = "nvptx64")]
mod kernels {
    use super::*;
    use crate::exec::Gpu;

    macro_rules! assign_kernel {
        ($name:ident, $l1:expr) => {
            minibatch_assign_entry! {
                /// See [`assign`]; `d`, `k`, `k_padded` of at least 1.
                ///
                /// # Safety
                /// As for [`assign`].
                fn $name(params) {
                    let MinibatchAssignParams {
                        x,
                        d,
                        rows,
                        batch,
                        centroids_t,
                        k_padded,
                        c_sq_norms,
                        k,
                        scales,
                        sums,
                        counts,
                        distances,
                    } = params;
                    let a = BatchAssign {
                        x: x.as_ptr(),
                        d: d as usize,
                        rows: rows.as_ptr(),
                        batch: batch as usize,
                        centroids_t: centroids_t.as_ptr(),
                        k_padded: k_padded as usize,
                        c_sq_norms: c_sq_norms.as_ptr(),
                        k: k as usize,
                        scales: scales.as_ptr(),
                        sums: sums.as_mut_ptr(),
                        counts: counts.as_mut_ptr(),
                        distances: distances.as_mut_ptr(),
                    };
                    unsafe { assign::<$l1, _>(Gpu, Gpu.block_dim(), a) }
                }
            }
        };
    }

    assign_kernel!(kmeans_minibatch_assign_l2, false);
    assign_kernel!(kmeans_minibatch_assign_l1, true);

    minibatch_update_entry! {
        /// See [`update`].
        ///
        /// # Safety
        /// As for [`update`].
        fn kmeans_minibatch_update(params) {
            let MinibatchUpdateParams {
                current,
                next,
                d,
                sums,
                batch_counts,
                counts,
                inv_scales,
                report,
            } = params;
            let (current, next, sums, batch_counts, counts, inv_scales, report) = (
                current.as_ptr(),
                next.as_mut_ptr(),
                sums.as_mut_ptr(),
                batch_counts.as_mut_ptr(),
                counts.as_mut_ptr(),
                inv_scales.as_ptr(),
                report.as_mut_ptr(),
            );
            let u = BatchUpdate {
                current,
                next,
                d: d as usize,
                sums,
                batch_counts,
                counts,
                inv_scales,
                report,
            };
            unsafe { update(Gpu, Gpu.block_dim(), u) }
        }
    }

    minibatch_shift_entry! {
        /// See [`shifts`].
        ///
        /// # Safety
        /// As for [`shifts`].
        fn kmeans_minibatch_shift(params) {
            let MinibatchShiftParams {
                next,
                current,
                k,
                d,
                out,
            } = params;
            let (next, current, out) = (next.as_ptr(), current.as_ptr(), out.as_mut_ptr());
            unsafe {
                shifts(
                    Gpu,
                    Gpu.block_dim(),
                    next,
                    current,
                    k as usize,
                    d as usize,
                    out,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;
