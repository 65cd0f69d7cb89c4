//! Pruning of the wide small step's centroid scan by a lower bound per point (Hamerly's
//! algorithm), exact to the bit: a point keeps its label without a scan only when its FP32
//! scores are proven to rank its centroid first; every other point is scanned with the same
//! arithmetic as the full scan. Labels, distances, sums and inertia are those of the full step.
//!
//! Each point holds `lower`, a lower bound on its Euclidean distance to every centroid but its
//! own. After a scan it comes from the second-best score; after each update it drops by the
//! largest distance any centroid moved (`drift`, from [`super::finalize`]), by the triangle
//! inequality. The step computes every point's score `s_a` to its current centroid `a` (for
//! its distance and inertia anyway) and skips the scan when `lower² − ‖x‖² − E > s_a`.
//!
//! # The bound
//! With `u = 2^-24`, the FP32 dot product of `d` terms and the squared norms are within
//! `γ = d·u / (1 − d·u)` of the exact ones relative to `Σ|x_j c_j| ≤ ‖x‖‖c‖` and `‖·‖²`; the score
//! `s_c = fma(−2, dot, ‖c‖²)` adds one rounding. So `|s_c − (‖c‖² − 2 x·c)| ≤ (γ + 2u)(‖x‖ + ‖c‖)²
//! ≤ E = κ (‖x‖ + C)²` with `κ = 4 (d + 4) u` (twice what it takes) and `C²` the largest FP32
//! squared centroid norm times `1 + κ`. Every centroid `c ≠ a` then scores at least
//! `lower² − ‖x‖² − E`, where `‖x‖² ≤ x_sq · (1 + κ)`: if that exceeds `s_a`, the scan's first
//! minimum is `a`. The tests run in f64, whose rounding (≈ 2^-53 of the same terms) the factor
//! two of `κ` absorbs; a bound is stored in f32 rounded down.

use super::scan::SharedCentroidScan;
use super::{Smem, Step};
use crate::exec::Exec;
use crate::launch::BLOCK;
use crate::math::{fma, l2_score, sqrt_f64};
use crate::tile::load_vec4s;
use core::sync::atomic::{AtomicU32, Ordering};

/// What the bounded scan found for a thread's points: scores, labels and squared norms.
pub(super) struct Pruned<const P: usize> {
    pub best: [f32; P],
    pub label: [u32; P],
    pub x_sq: [f32; P],
}

/// Words of [`SmallLayout::pending`](super::SmallLayout::pending) for `points` points a block:
/// the pending points' best score, label and second-best score, then the pending count and the
/// largest centroid norm.
pub const fn pending_words(points: usize) -> usize {
    3 * points + 2
}

/// `κ` of the module comment for `d` dimensions.
#[inline(always)]
fn kappa(d: usize) -> f64 {
    4.0 * (d as f64 + 4.0) * (1.0 / 16_777_216.0)
}

/// `E` of the module comment and the upper bound on `‖x‖²`, from the FP32 `x_sq` and the
/// largest FP32 squared centroid norm `c_sq_max`.
#[inline(always)]
fn error_terms(x_sq: f32, c_sq_max: f32, kappa: f64) -> (f64, f64) {
    let x_hi = x_sq as f64 * (1.0 + kappa);
    let c_hi = c_sq_max as f64 * (1.0 + kappa);
    let root = sqrt_f64(x_hi) + sqrt_f64(c_hi);
    (kappa * root * root, x_hi)
}

/// Whether a point whose bound is `lower` keeps centroid `a` of score `score` without a scan.
#[inline(always)]
pub fn keeps_label(lower: f64, x_sq: f32, score: f32, c_sq_max: f32, kappa: f64) -> bool {
    let (e, x_hi) = error_terms(x_sq, c_sq_max, kappa);
    lower > 0.0 && lower * lower - x_hi - e > score as f64
}

/// The lower bound after a scan whose second-best score is `second` (+∞ for k = 1), rounded
/// down to f32.
#[inline(always)]
pub fn fresh_lower(x_sq: f32, second: f32, c_sq_max: f32, kappa: f64) -> f32 {
    let (e, _) = error_terms(x_sq, c_sq_max, kappa);
    let sq = x_sq as f64 * (1.0 - kappa) + second as f64 - e;
    if sq > 0.0 {
        f32_down(sqrt_f64(sq))
    } else {
        0.0
    }
}

/// `lower − drift`, rounded down to f32 (0 when not positive).
#[inline(always)]
pub fn moved_lower(lower: f32, drift: f64) -> f32 {
    let v = lower as f64 - drift;
    if v > 0.0 { f32_down(v) } else { 0.0 }
}

/// The largest f32 not above `v > 0` (+∞ stays).
#[inline(always)]
fn f32_down(v: f64) -> f32 {
    let f = v as f32;
    if f as f64 > v {
        f32::from_bits(f.to_bits() - 1)
    } else {
        f
    }
}

/// The wide step's assignment with bounds (squared L2, rows staged in shared memory, centroids
/// and norms staged with a barrier passed): each thread tests its points, then the points that
/// fail are packed into the block's first threads, one a thread, and scanned with `scan` (the
/// full step's scan, which also keeps the second-best score), so that whole warps skip. Writes
/// the points' new bounds. With `s.drift` null (bounds not yet valid) every point is scanned.
///
/// # Safety
/// As for [`super::step`] with `s.lower` non-null; `old` are the points' labels (`< k` unless
/// `s.drift` is null); every thread of the block calls this.
#[inline(always)]
pub(super) unsafe fn assign<const P: usize, const CU: usize, E: Exec>(
    e: E,
    s: &Step,
    m: &Smem,
    scan: SharedCentroidScan,
    old: &[u32; P],
    point: impl Fn(usize) -> usize,
) -> Pruned<P> {
    let (t, threads) = (e.thread(), BLOCK as usize);
    let quads = s.d.div_ceil(4);
    let d4 = 4 * quads;
    let points = P * threads;
    let (res_best, res_label, res_second) = unsafe {
        (
            m.pending.cast::<f32>(),
            m.pending.add(points),
            m.pending.add(2 * points).cast::<f32>(),
        )
    };
    let (count, c_max) = unsafe {
        (
            AtomicU32::from_ptr(m.pending.add(3 * points)),
            AtomicU32::from_ptr(m.pending.add(3 * points + 1)),
        )
    };
    let row = |r: usize| unsafe { m.points.add(r * m.point_stride).cast_const() };
    let fresh = s.drift.is_null();
    let mut out = Pruned {
        best: [0f32; P],
        label: *old,
        x_sq: [0f32; P],
    };
    for p in 0..P {
        if point(p) < s.n {
            let xrow = row(t + p * threads);
            out.x_sq[p] = unsafe { super::stage::quads_sq_norm(xrow, quads) };
            if !fresh {
                // The score of the current centroid, as the scan computes it.
                let crow = unsafe { m.centroids.add(old[p] as usize * d4) };
                let mut acc = 0f32;
                for j4 in 0..quads {
                    let (xv, cv): ([f32; 4], [f32; 4]) =
                        unsafe { (load_vec4s(xrow.add(4 * j4)), load_vec4s(crow.add(4 * j4))) };
                    for q in 0..4 {
                        acc = fma(xv[q], cv[q], acc);
                    }
                }
                out.best[p] = l2_score(acc, unsafe { *m.norms.add(old[p] as usize) });
            }
        }
    }
    // The norms are non-negative: their bits order as they do (a NaN above all).
    let mut c = t;
    while c < s.k {
        c_max.fetch_max(unsafe { *m.norms.add(c) }.to_bits(), Ordering::Relaxed);
        c += threads;
    }
    e.sync();
    let (c_sq_max, kappa) = (f32::from_bits(c_max.load(Ordering::Relaxed)), kappa(s.d));
    let drift = if fresh { 0.0 } else { unsafe { *s.drift } };
    let mut lower = [0f32; P];
    let mut pending = [false; P];
    for p in 0..P {
        let i = point(p);
        if i < s.n {
            let moved = if fresh {
                0.0
            } else {
                moved_lower(unsafe { *s.lower.add(i) }, drift)
            };
            if !fresh && keeps_label(moved as f64, out.x_sq[p], out.best[p], c_sq_max, kappa) {
                lower[p] = moved;
            } else {
                pending[p] = true;
                let slot = count.fetch_add(1, Ordering::Relaxed) as usize;
                unsafe { *m.order.add(slot) = (t + p * threads) as u32 };
            }
        }
    }
    e.sync();
    let pending_count = count.load(Ordering::Relaxed) as usize;
    let mut slot = t;
    while slot < pending_count {
        let r = unsafe { *m.order.add(slot) } as usize;
        let (best, label, second) = unsafe { scan.run_rows::<1, CU, true>(&[row(r)], quads) };
        unsafe {
            *res_best.add(r) = best[0];
            *res_label.add(r) = label[0];
            *res_second.add(r) = second[0];
        }
        slot += threads;
    }
    e.sync();
    for p in 0..P {
        let i = point(p);
        if i < s.n {
            if pending[p] {
                let r = t + p * threads;
                unsafe {
                    out.best[p] = *res_best.add(r);
                    out.label[p] = *res_label.add(r);
                    lower[p] = fresh_lower(out.x_sq[p], *res_second.add(r), c_sq_max, kappa);
                }
            }
            unsafe { *s.lower.add(i) = lower[p] };
        }
    }
    out
}
