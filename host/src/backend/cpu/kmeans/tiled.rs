//! Register-tiled CPU assign: `P` points × `L` SIMD blocks of centroids per tile, so every
//! centroid load feeds `P` fused multiply-adds and every point broadcast feeds `L` of them.
//!
//! The arithmetic is exactly that of [`nearest_generic`](super::nearest_generic) and the GPU
//! kernels: one accumulator per (point, centroid), updated over dimensions 0..d with
//! `assign_step` (a single-rounding FMA for squared L2), scored with `assign_score`. Only the
//! order in which independent accumulators are visited changes. The first minimum in centroid
//! order is kept per SIMD lane (lanes visit their centroids in increasing order with a strict
//! `<`) and resolved across lanes by (score, index), which picks the same centroid.

use kernels_gpu::math::{AssignMetric, assign_distance};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Centroids regrouped in panels of `w` (the SIMD width): panel `b` holds centroids
/// `b·w .. (b+1)·w` dimension-major (`d × w`), zero-padded past `k`; plus their squared norms.
pub(crate) struct Panels {
    data: Vec<f32>,
    sq_norms: Vec<f32>,
    w: usize,
    nb: usize,
    k: usize,
    d: usize,
}

impl Panels {
    pub(crate) fn new(centroids: &[f32], d: usize, w: usize) -> Self {
        let k = centroids.len() / d;
        let nb = k.div_ceil(w);
        let mut data = vec![0f32; nb * d * w];
        let mut sq_norms = vec![0f32; nb * w];
        for (c, row) in centroids.chunks_exact(d).enumerate() {
            let (b, l) = (c / w, c % w);
            for (j, &v) in row.iter().enumerate() {
                data[(b * d + j) * w + l] = v;
            }
            sq_norms[c] = kernels_gpu::math::sq_norm(row);
        }
        Panels {
            data,
            sq_norms,
            w,
            nb,
            k,
            d,
        }
    }
}

/// The SIMD operations the tiled kernel needs. Every method is `unsafe`: callers must have
/// checked that the CPU has the instruction set (see [`assign_rows`]).
#[cfg(target_arch = "x86_64")]
trait Simd {
    const W: usize;
    type V: Copy;
    type M: Copy;
    type I: Copy;
    unsafe fn zero() -> Self::V;
    unsafe fn splat(v: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    /// `fma(a, b, acc)` with one rounding.
    unsafe fn fma(a: Self::V, b: Self::V, acc: Self::V) -> Self::V;
    /// `acc + |x − c|`, each operation rounded like the scalar `l1_step`.
    unsafe fn l1_step(acc: Self::V, x: Self::V, c: Self::V) -> Self::V;
    /// Lanes where `a < b` (false on NaN), restricted to the first `valid` lanes.
    unsafe fn lt(a: Self::V, b: Self::V, valid: usize) -> Self::M;
    unsafe fn blend(m: Self::M, old: Self::V, new: Self::V) -> Self::V;
    unsafe fn blend_idx(m: Self::M, old: Self::I, new: Self::I) -> Self::I;
    /// `[base, base + 1, ..]`.
    unsafe fn iota(base: u32) -> Self::I;
    unsafe fn izero() -> Self::I;
    /// The smallest lane of `best` and, among the lanes holding it, the smallest `idx`; label 0
    /// when no lane is below infinity (no lane of `best` is NaN).
    unsafe fn argmin(best: Self::V, idx: Self::I) -> (f32, u32);
}

#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    const W: usize = 16;
    type V = __m512;
    type M = __mmask16;
    type I = __m512i;
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn splat(v: f32) -> __m512 {
        _mm512_set1_ps(v)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn fma(a: __m512, b: __m512, acc: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, acc)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn l1_step(acc: __m512, x: __m512, c: __m512) -> __m512 {
        _mm512_add_ps(acc, _mm512_abs_ps(_mm512_sub_ps(x, c)))
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn lt(a: __m512, b: __m512, valid: usize) -> __mmask16 {
        let valid = if valid >= 16 {
            0xffff
        } else {
            (1u16 << valid) - 1
        };
        _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(valid, a, b)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn blend(m: __mmask16, old: __m512, new: __m512) -> __m512 {
        _mm512_mask_blend_ps(m, old, new)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn blend_idx(m: __mmask16, old: __m512i, new: __m512i) -> __m512i {
        _mm512_mask_blend_epi32(m, old, new)
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn iota(base: u32) -> __m512i {
        let b = base as i32;
        _mm512_setr_epi32(
            b,
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6,
            b + 7,
            b + 8,
            b + 9,
            b + 10,
            b + 11,
            b + 12,
            b + 13,
            b + 14,
            b + 15,
        )
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn izero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn argmin(best: __m512, idx: __m512i) -> (f32, u32) {
        let m = _mm512_reduce_min_ps(best);
        if m == f32::INFINITY {
            return (m, 0);
        }
        let at = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(best, _mm512_set1_ps(m));
        (m, _mm512_mask_reduce_min_epu32(at, idx) as u32)
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Simd for Avx2 {
    const W: usize = 8;
    type V = __m256;
    type M = __m256;
    type I = __m256i;
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn splat(v: f32) -> __m256 {
        _mm256_set1_ps(v)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma(a: __m256, b: __m256, acc: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, acc)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn l1_step(acc: __m256, x: __m256, c: __m256) -> __m256 {
        let diff = _mm256_sub_ps(x, c);
        _mm256_add_ps(acc, _mm256_andnot_ps(_mm256_set1_ps(-0.0), diff))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn lt(a: __m256, b: __m256, valid: usize) -> __m256 {
        let m = _mm256_cmp_ps::<_CMP_LT_OQ>(a, b);
        if valid >= 8 {
            m
        } else {
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid as i32), lanes);
            _mm256_and_ps(m, _mm256_castsi256_ps(keep))
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn blend(m: __m256, old: __m256, new: __m256) -> __m256 {
        _mm256_blendv_ps(old, new, m)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn blend_idx(m: __m256, old: __m256i, new: __m256i) -> __m256i {
        _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(old),
            _mm256_castsi256_ps(new),
            m,
        ))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn iota(base: u32) -> __m256i {
        let b = base as i32;
        _mm256_setr_epi32(b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn izero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn argmin(best: __m256, idx: __m256i) -> (f32, u32) {
        let (mut s, mut i) = ([0f32; 8], [0u32; 8]);
        unsafe {
            _mm256_storeu_ps(s.as_mut_ptr(), best);
            _mm256_storeu_si256(i.as_mut_ptr().cast(), idx);
        }
        let m = s.iter().fold(f32::INFINITY, |a, &b| a.min(b));
        if m == f32::INFINITY {
            return (m, 0);
        }
        let label = s.iter().zip(&i).fold(
            u32::MAX,
            |a, (&sl, &il)| if sl == m { a.min(il) } else { a },
        );
        (m, label)
    }
}

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
    let (d, w) = (pn.d, S::W);
    unsafe {
        let mut acc = [[S::zero(); L]; P];
        let panel = pn.data.as_ptr().add(b0 * d * w);
        let xp = x.as_ptr();
        for j in 0..d {
            let mut c = [S::zero(); L];
            for (l, c) in c.iter_mut().enumerate() {
                *c = S::load(panel.add((l * d + j) * w));
            }
            for (p, acc) in acc.iter_mut().enumerate() {
                let v = S::splat(*xp.add(p * d + j));
                for (a, &c) in acc.iter_mut().zip(&c) {
                    *a = if L1 {
                        S::l1_step(*a, v, c)
                    } else {
                        S::fma(v, c, *a)
                    };
                }
            }
        }
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

/// The SIMD width the tiled kernel uses on this CPU, or `None` where it has no kernel (then
/// the caller uses the portable path).
pub(crate) fn width() -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            return Some(Avx512::W);
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return Some(Avx2::W);
        }
    }
    None
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
        if pn.w == Avx512::W && std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was just detected.
            return unsafe { all_rows_avx512(metric, x, x_sq, pn, labels, dists) };
        }
        if pn.w == Avx2::W
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were just detected.
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
