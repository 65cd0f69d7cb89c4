//! Register-tiled CPU assign: `P` points × `L` SIMD blocks of centroids per tile, so every
//! centroid load feeds `P` fused multiply-adds and every point broadcast feeds `L` of them.
//!
//! The arithmetic is exactly that of [`nearest_generic`](super::nearest_generic) and the GPU
//! kernels: one accumulator per (point, centroid), updated over dimensions 0..d with
//! `assign_step` (a single-rounding FMA for squared L2), scored with `assign_score`. Only the
//! order in which independent accumulators are visited changes. The first minimum in centroid
//! order is kept per SIMD lane (lanes visit their centroids in increasing order with a strict
//! `<`) and resolved across lanes by (score, index), which picks the same centroid.

use crate::backend::cpu::simd::Panels;
#[cfg(target_arch = "x86_64")]
use crate::backend::cpu::simd::{self, Avx2, Avx512, Simd, SimdLevel, accumulate};
use kernels_gpu::math::{AssignMetric, assign_distance};

/// Per-lane running minimum of `P` points against panels `b0 .. b0 + L`.
///
/// # Safety
/// The CPU has `S`'s instruction set; `x` holds `P` rows of `pn.d` values; `pn.w == S::W`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tile<S: Simd, const P: usize, const L: usize, const L1: bool>(
    x: &[f32],
    pn: &Panels,
    b0: usize,
    best: &mut [S::V; P],
    idx: &mut [S::I; P],
) {
    let w = S::W;
    unsafe {
        let acc = accumulate::<S, P, L, L1>(x, pn, b0);
        // Plain loops, not `array::from_fn`: a closure would not inherit the target features.
        let (mut ids, mut sq) = ([S::izero(); L], [S::zero(); L]);
        for (l, (ids, sq)) in ids.iter_mut().zip(sq.iter_mut()).enumerate() {
            *ids = S::iota(((b0 + l) * w) as u32);
            *sq = S::load(pn.sq_norms.as_ptr().add((b0 + l) * w));
        }
        let minus_two = S::splat(-2.0);
        for ((acc, best), idx) in acc.iter().zip(best.iter_mut()).zip(idx.iter_mut()) {
            // Panels in increasing order: each lane keeps its first minimum.
            for l in 0..L {
                let score = if L1 {
                    acc[l]
                } else {
                    // assign_score for squared L2: fma(-2, dot, ‖c‖²).
                    S::fma(minus_two, acc[l], sq[l])
                };
                let m = S::lt(score, *best, pn.k - (b0 + l) * w);
                *best = S::blend(m, *best, score);
                *idx = S::blend_idx(m, *idx, ids[l]);
            }
        }
    }
}

/// Labels and distances of `P` consecutive rows of `x`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn rows<S: Simd, const P: usize, const L: usize, const L1: bool>(
    metric: AssignMetric,
    x: &[f32],
    x_sq: &[f32],
    pn: &Panels,
    labels: &mut [u32],
    dists: &mut [f32],
) {
    unsafe {
        let mut best = [S::splat(f32::INFINITY); P];
        let mut idx = [S::izero(); P];
        let mut b = 0;
        while b + L <= pn.nb {
            tile::<S, P, L, L1>(x, pn, b, &mut best, &mut idx);
            b += L;
        }
        while b < pn.nb {
            tile::<S, P, 1, L1>(x, pn, b, &mut best, &mut idx);
            b += 1;
        }
        for p in 0..P {
            // The lanes' minima, merged by (score, index): the first minimum in centroid order.
            let (score, label) = S::argmin(best[p], idx[p]);
            labels[p] = label;
            dists[p] = assign_distance(metric, x_sq[p], score);
        }
    }
}

/// Labels and distances of every row of `x` (`labels.len()` rows).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn all_rows<S: Simd, const P: usize, const L: usize, const L1: bool>(
    metric: AssignMetric,
    x: &[f32],
    x_sq: &[f32],
    pn: &Panels,
    labels: &mut [u32],
    dists: &mut [f32],
) {
    let d = pn.d;
    let n = labels.len();
    let mut r = 0;
    unsafe {
        while r + P <= n {
            rows::<S, P, L, L1>(
                metric,
                &x[r * d..(r + P) * d],
                &x_sq[r..r + P],
                pn,
                &mut labels[r..r + P],
                &mut dists[r..r + P],
            );
            r += P;
        }
        while r < n {
            rows::<S, 1, L, L1>(
                metric,
                &x[r * d..(r + 1) * d],
                &x_sq[r..r + 1],
                pn,
                &mut labels[r..r + 1],
                &mut dists[r..r + 1],
            );
            r += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn all_rows_avx512(
    metric: AssignMetric,
    x: &[f32],
    x_sq: &[f32],
    pn: &Panels,
    labels: &mut [u32],
    dists: &mut [f32],
) {
    // 6 × 4 accumulators + 4 centroid vectors + 1 broadcast of the 32 zmm registers.
    unsafe {
        match metric {
            AssignMetric::SqL2 => {
                all_rows::<Avx512, 6, 4, false>(metric, x, x_sq, pn, labels, dists)
            }
            AssignMetric::L1 => all_rows::<Avx512, 4, 4, true>(metric, x, x_sq, pn, labels, dists),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn all_rows_avx2(
    metric: AssignMetric,
    x: &[f32],
    x_sq: &[f32],
    pn: &Panels,
    labels: &mut [u32],
    dists: &mut [f32],
) {
    // 4 × 2 accumulators + 2 centroid vectors + 1 broadcast of the 16 ymm registers.
    unsafe {
        match metric {
            AssignMetric::SqL2 => all_rows::<Avx2, 4, 2, false>(metric, x, x_sq, pn, labels, dists),
            AssignMetric::L1 => all_rows::<Avx2, 3, 2, true>(metric, x, x_sq, pn, labels, dists),
        }
    }
}

/// Labels and distances of the rows of `x` against `pn` (built with width [`width()`]).
pub(crate) fn assign_rows(
    metric: AssignMetric,
    x: &[f32],
    x_sq: &[f32],
    pn: &Panels,
    labels: &mut [u32],
    dists: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        let level = simd::level();
        if pn.w == Avx512::W && level == SimdLevel::Avx512 {
            // SAFETY: the active level is never above the detected one.
            return unsafe { all_rows_avx512(metric, x, x_sq, pn, labels, dists) };
        }
        if pn.w == Avx2::W && level >= SimdLevel::Avx2 {
            // SAFETY: the active level is never above the detected one.
            return unsafe { all_rows_avx2(metric, x, x_sq, pn, labels, dists) };
        }
    }
    let _ = (metric, x, x_sq, labels, dists);
    unreachable!("tiled::assign_rows without a SIMD width from tiled::width()");
}

#[cfg(test)]
mod tests {
    use super::super::{CentroidBlocks, nearest_generic};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Every width this CPU runs must match the portable per-point path bit for bit, on odd
    /// shapes (remainder points and panels, k not a multiple of the width) and on exact ties
    /// (duplicated centroids, coarse values).
    #[test]
    fn tiled_matches_portable_path() {
        let mut widths = vec![];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                widths.push(Avx512::W);
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                widths.push(Avx2::W);
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for &(n, d, k) in &[
            (1, 1, 1),
            (13, 3, 255),
            (50, 9, 16),
            (31, 75, 80),
            (27, 7, 37),
        ] {
            for coarse in [false, true] {
                let value = |rng: &mut ChaCha8Rng| {
                    if coarse {
                        rng.random_range(0..3) as f32
                    } else {
                        rng.random::<f32>() * 2.0 - 1.0
                    }
                };
                let x: Vec<f32> = (0..n * d).map(|_| value(&mut rng)).collect();
                let mut c: Vec<f32> = (0..k * d).map(|_| value(&mut rng)).collect();
                if k > 2 {
                    let (a, b) = c.split_at_mut((k - 1) * d);
                    b.copy_from_slice(&a[..d]);
                }
                let x_sq = crate::backend::cpu::kmeans::row_sq_norms(&x, d);
                for metric in [AssignMetric::SqL2, AssignMetric::L1] {
                    let cb = CentroidBlocks::new(&c, d);
                    let want: Vec<(u32, f32)> = x
                        .chunks_exact(d)
                        .zip(&x_sq)
                        .map(|(row, &s)| nearest_generic(metric, row, s, &cb))
                        .collect();
                    for &w in &widths {
                        let pn = Panels::new(&c, d, w);
                        let (mut labels, mut dists) = (vec![7u32; n], vec![0f32; n]);
                        assign_rows(metric, &x, &x_sq, &pn, &mut labels, &mut dists);
                        for (i, &(l, dist)) in want.iter().enumerate() {
                            assert_eq!(labels[i], l, "n{n} d{d} k{k} w{w} {metric:?} row {i}");
                            assert_eq!(dists[i].to_bits(), dist.to_bits());
                        }
                    }
                }
            }
        }
    }
}
