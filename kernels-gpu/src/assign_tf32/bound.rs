//! The error bound of `kmeans_assign_l2_tf32`'s TF32 scores, from the measured TF32 rounding
//! residuals of each point and centroid (`tf32_tile_maxima` takes the centroids' largest per
//! tile once per step; the assign kernel's prologue computes the points').
//!
//! # The bound
//! `u = 2^-24`; `x, c ∈ R^d` a point and a centroid (f32); `x̃`, `c̃` what the tensor cores
//! multiply: `x̃_j = rna(x_j)` (`cvt.rna.tf32`), `c̃_j` the raw f32 read at TF32 precision
//! (truncated, or rounded to nearest), either possibly flushed to 0 when subnormal. Per value the
//! residual `ρ_j ≥ |v_j − ṽ_j|` is [`residual`]: `|v − rna(v)|` for points, the larger of that and
//! `|v − trunc(v)|` for centroids (ties to even give the same magnitude), `|v|` for subnormals.
//! `X ≥ ‖x‖`, `R_x ≥ ‖ρ(x)‖`, `C ≥ ‖c‖`, `R_c ≥ ‖ρ(c)‖` are f32 upper bounds ([`RowTerms`]: sums
//! of squares in f64, where no square of an f32 underflows, then rounded up). `nc` is the
//! squared norm both scores use.
//!
//! 1. Inputs: `x·c − x̃·c̃ = (x − x̃)·c + x̃·(c − c̃)`, and `‖x̃‖ ≤ ‖x‖ + ‖x − x̃‖`; by
//!    Cauchy–Schwarz `|x·c − x̃·c̃| ≤ R_x·C + R_c·(X + R_x)`.
//! 2. Tensor cores: the products of TF32 values are exact in f32 (22 bits); the FP32
//!    accumulation's order is unspecified and it may truncate and align the operands of a
//!    k-step to the largest one. Recursive sums in any order, rounding or truncating (unit
//!    `2u`), err by at most `γ_{d}(2u)·s`; aligned multi-operand adds of `g ≥ 2` products lose at
//!    most `2u` of the largest operand per operand and per normalisation, `(d + 2d/g)·2u·s`.
//!    Both are within `γ' = 4du / (1 − 4du)` times `s = Σ|x̃_j·c̃_j| ≤ (1 + 2^-11)²·X·C`;
//!    flushed subnormal products or sums add at most `2d·2^-126`.
//! 3. The exact path: an FMA chain, `|dot − x·c| ≤ γ_d·X·C + d·2^-150`, `γ_d = du / (1 − du)`.
//! 4. Scores: `T = fl(nc − 2·dot_tf32)` and `S = fl(nc − 2·dot)` (one FMA each), so
//!    `|T − S| ≤ 2·|dot_tf32 − dot| + u·|T| + u·|S| ≤ (2·|dot_tf32 − dot| + 2u·|T|) / (1 − u)`,
//!    with `|T| ≤ (1 + u)·(nc + 2·(1 + γ')·1.0011·X·C)`.
//! 5. Evaluation: the kernel forms `E = fma(p, C, fma(q, X + R_x, fma(4u, nc, 2^-90)))` with
//!    `p ≥ A·R_x + c2·X` and `q ≥ A·R_c` (f64, rounded up), `A = 2·(1 + 8u)`. Its three roundings
//!    of non-negative terms lose at most `(1 − u)^3`, and `L = fl(T − E)`, `U = fl(T + E)` each
//!    move by at most `u·(|T| + E)`. So `L ≤ S ≤ U` holds once
//!    `E·(1 − u)^4 ≥ (2·(R_x·C + R_c·(X + R_x)) + 2·(1.0011·γ' + γ_d)·X·C + 3u·|T|) / (1 − u)`
//!    plus the subnormal terms. Every coefficient carries `1 + 8u ≥ (1 − u)^-5`:
//!    `c2 = (1 + 8u)·(2·(1.0011·γ' + γ_d) + 6u·(1 + u)·(1 + γ')·1.0011)` ([`product_coefficient`],
//!    rounded up), `4u ≥ (1 + 8u)·3u·(1 + u)` for `nc`, and `2^-90` covers the subnormal terms
//!    (at most `8d·2^-126`) for `d < 2^30`.
//!
//! Non-finite values (NaN or ∞ in a row, overflowing norms, `4du ≥ 1`) make `E` or `T`
//! non-finite, which the shortlist keeps as "maybe nearest" (see [`super::shortlist`]). The
//! residual norms are about `2^-12·‖v‖` for points and `2^-11·‖v‖` for centroids, against the
//! `3·2^-10·‖x‖·‖c‖` a bound from the norms alone must assume.

use super::TF32_CENTROIDS;
use crate::exec::Exec;
use crate::knn_tf32::tf32_round;
use crate::launch::{BLOCK, Kernel};
use crate::math::fma;
use crate::params::DevPtr;
use crate::tile::for_each_in_row;

/// The `tf32_tile_maxima` entry point (built for sm_80 only, beside its kernel). CPU twin:
/// `tile_maxima_of` (test builds).
pub const TF32_TILE_MAXIMA: Kernel<TileMaximaParams> = Kernel::new("tf32_tile_maxima").only_sm80();

kernel_params! {
    /// `tf32_tile_maxima`'s parameters.
    pub struct TileMaximaParams {
        pub centroids: DevPtr<f32>,
        pub k: u32,
        pub d: u32,
        pub c_sq_norms: DevPtr<f32>,
        pub out: DevPtr<f32>,
    }
    entries: tile_maxima_entry;
}

/// Words of `tf32_tile_maxima`'s output per centroid tile: the largest `C`, `A·R_c` and squared
/// norm of the tile's centroids.
pub const TILE_MAXIMA_WORDS: usize = 3;

/// Dynamic shared memory of a `tf32_tile_maxima` block, in bytes: each warp's three maxima.
pub const TILE_MAXIMA_SHARED_BYTES: usize = TILE_MAXIMA_WORDS * (BLOCK as usize / 32) * 4;

/// Values of a row a thread loads at a time (four 16-byte loads in flight).
const ROW_LOADS: usize = 16;

/// Weight of the squared centroid norm in the bound (`4u`).
pub const BOUND_NORM: f32 = 1.0 / 4_194_304.0; // 2^-22
/// Absolute term of the bound (flushed subnormal products and sums).
pub const BOUND_ABS: f32 = crate::knn_tf32::BOUND_ABS; // 2^-90
/// Weight `A = 2·(1 + 8u)` of the residual terms.
const RESIDUAL_WEIGHT: f64 = 2.0 * (1.0 + 8.0 / 16_777_216.0);

/// The largest TF32 rounding error of `v` the tensor cores may make: for a point (rounded with
/// `cvt.rna`) or a centroid (read raw: truncated or rounded); `|v|` where it may flush.
#[inline(always)]
pub fn residual(v: f32, point: bool) -> f32 {
    let a = v.abs();
    if a < f32::MIN_POSITIVE {
        return a;
    }
    // Both differences are exact (the result fits in the 13 dropped bits).
    let near = (v - tf32_round(v)).abs();
    if point {
        near
    } else {
        let truncated = (v - f32::from_bits(v.to_bits() & !0x1fff)).abs();
        if truncated > near { truncated } else { near }
    }
}

/// `v` rounded up to f32 after a relative margin of `4·2^-52` for the f64 roundings before it.
#[inline(always)]
fn up(v: f64) -> f32 {
    let v = v * (1.0 + 4.0 * f64::EPSILON);
    let f = v as f32;
    if (f as f64) < v {
        f32::from_bits(f.to_bits() + 1)
    } else {
        f
    }
}

#[inline(always)]
fn sqrt64(v: f64) -> f64 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::f64::math::sqrt(v)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        v.sqrt()
    }
}

/// `c2` of the bound for `d` dimensions (see the module), rounded up; `+∞` when `4du ≥ 1`.
#[inline(always)]
pub fn product_coefficient(d: usize) -> f32 {
    let u = 1.0 / 16_777_216.0;
    let du = d as f64 * u;
    if 4.0 * du >= 1.0 {
        return f32::INFINITY;
    }
    let acc = 4.0 * du / (1.0 - 4.0 * du);
    let exact = du / (1.0 - du);
    let t_size = 6.0 * u * (1.0 + u) * (1.0 + acc) * 1.0011;
    up((1.0 + 8.0 * u) * (2.0 * (1.0011 * acc + exact) + t_size))
}

/// A row's squared norm and squared residual norm, summed in f64 (exact squares).
#[derive(Clone, Copy, Debug, Default)]
pub struct RowTerms {
    sq_norm: f64,
    sq_residual: f64,
}

impl RowTerms {
    /// Adds value `v` of a point (`point`) or centroid row.
    #[inline(always)]
    pub fn add(&mut self, v: f32, point: bool) {
        let (v64, r) = (v as f64, residual(v, point) as f64);
        self.sq_norm += v64 * v64;
        self.sq_residual += r * r;
    }

    /// The sums of two parts of a row.
    #[inline(always)]
    pub fn plus(self, other: RowTerms) -> RowTerms {
        RowTerms {
            sq_norm: self.sq_norm + other.sq_norm,
            sq_residual: self.sq_residual + other.sq_residual,
        }
    }

    /// Both sums through `f` (a warp shuffle of the terms).
    #[inline(always)]
    pub fn map(self, f: impl Fn(f64) -> f64) -> RowTerms {
        RowTerms {
            sq_norm: f(self.sq_norm),
            sq_residual: f(self.sq_residual),
        }
    }

    /// The terms of a whole row.
    pub fn of(row: &[f32], point: bool) -> RowTerms {
        let mut t = RowTerms::default();
        for &v in row {
            t.add(v, point);
        }
        t
    }

    /// [`Self::of`] the `d` values at `row` (part of a point's in the assign kernel), in the
    /// same order, [`ROW_LOADS`] loads at a time.
    ///
    /// # Safety
    /// `row` is valid for `d` values.
    #[inline(always)]
    pub unsafe fn read(row: *const f32, d: usize, point: bool) -> RowTerms {
        let mut t = RowTerms::default();
        unsafe { for_each_in_row::<ROW_LOADS>(row, d, |v| t.add(v, point)) };
        t
    }

    /// `(X, R)`: upper bounds on the norm and the residual norm in f64 (a sum of `d` squares
    /// errs by at most `γ_d(2^-53) ≤ (d + 2)·2^-52` relative; the roots' roundings are [`up`]'s).
    #[inline(always)]
    fn roots(self, d: usize) -> (f64, f64) {
        let slack = 1.0 + (d as f64 + 2.0) * f64::EPSILON;
        (
            sqrt64(self.sq_norm * slack),
            sqrt64(self.sq_residual * slack),
        )
    }

    /// A centroid's `(C, q)`: its norm and `A·R_c`, rounded up.
    #[inline(always)]
    pub fn centroid(self, d: usize) -> (f32, f32) {
        let (c, r) = self.roots(d);
        (up(c), up(RESIDUAL_WEIGHT * r))
    }

    /// A point's `(p, X + R_x)`: `A·R_x + c2·X` and its norm plus its residual norm, rounded up.
    #[inline(always)]
    pub fn point(self, d: usize, c2: f32) -> (f32, f32) {
        let (x, r) = self.roots(d);
        (up(RESIDUAL_WEIGHT * r + c2 as f64 * x), up(x + r))
    }
}

/// `E`, the bound on `|T − S|` of a point with terms `(p, x_sum)` ([`RowTerms::point`]) and a
/// centroid with terms `(c_norm, q)` ([`RowTerms::centroid`]) and squared norm `nc`.
#[inline(always)]
pub fn error_bound(p: f32, x_sum: f32, c_norm: f32, q: f32, nc: f32) -> f32 {
    fma(p, c_norm, fma(q, x_sum, fma(BOUND_NORM, nc, BOUND_ABS)))
}

/// Scores below this magnitude are finite with room to spare (`2^126`).
const SCORE_LIMIT: f32 = 8.507_059e37;

/// `Ē`, a bound on `E` for a point with terms `(p, x_sum)` and every centroid of a tile with
/// maxima `(c_max, q_max, nc_max)` ([`TILE_MAXIMA_WORDS`]): [`error_bound`] is non-decreasing
/// in each of its non-negative arguments, roundings included, so `Ē ≥ E_c` and
/// `fl(T_c − Ē) ≤ fl(T_c − E_c) ≤ S_c`. `+∞` where a TF32 score of the tile may not be finite
/// (`|T| ≤ nc + 2·1.0011·(X + R_x)·C·(1 + 2^-10)` stays below `SCORE_LIMIT` otherwise) or the
/// bound itself is not: the point's shortlist is not trusted then.
#[inline(always)]
pub fn tile_bound(p: f32, x_sum: f32, c_max: f32, q_max: f32, nc_max: f32) -> f32 {
    let e = error_bound(p, x_sum, c_max, q_max, nc_max);
    let size = fma(4.0 * x_sum, c_max, nc_max);
    if size < SCORE_LIMIT && e < f32::INFINITY {
        e
    } else {
        f32::INFINITY
    }
}

tile_maxima_entry! {
    /// Writes each of the `k` centroids' (`d` columns) squared norm to `c_sq_norms` (the FMA
    /// chain in dimension order of `row_sq_norms`, from the same reads), and for each tile of
    /// `TF32_CENTROIDS` the largest `C`, `A·R_c` ([`RowTerms::centroid`]) and squared norm of
    /// its centroids at `out[3·tile..]` ([`TILE_MAXIMA_WORDS`]), a block per tile and a thread
    /// per centroid.
    ///
    /// # Safety
    /// `centroids` holds `k × d` values, `c_sq_norms` `k` and `out` `3·⌈k / TF32_CENTROIDS⌉`;
    /// that many blocks of `BLOCK` threads with [`TILE_MAXIMA_SHARED_BYTES`] of dynamic shared
    /// memory.
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
    fn tf32_tile_maxima(params) {
        let TileMaximaParams {
            centroids,
            k,
            d,
            c_sq_norms,
            out,
        } = params;
        let (centroids, c_sq_norms, out) =
            (centroids.as_ptr(), c_sq_norms.as_mut_ptr(), out.as_mut_ptr());
        unsafe {
            tile_maxima(crate::exec::Gpu, centroids, c_sq_norms, k as usize, d as usize, out)
        }
    }
}

/// The body of `tf32_tile_maxima`. The values are non-negative (or NaN), so their bits with the
/// sign cleared order as the values do, NaN above `+∞`: a NaN anywhere in a tile reaches its
/// maxima, and every point's [`tile_bound`] there is `+∞`.
///
/// # Safety
/// As the kernel's.
#[inline(always)]
pub unsafe fn tile_maxima<E: Exec>(
    e: E,
    centroids: *const f32,
    c_sq_norms: *mut f32,
    k: usize,
    d: usize,
    out: *mut f32,
) {
    let t = e.thread();
    let c = e.block() * TF32_CENTROIDS + t;
    let mut m = [0u32; TILE_MAXIMA_WORDS];
    if t < TF32_CENTROIDS && c < k {
        let (mut terms, mut sq_norm) = (RowTerms::default(), 0.0);
        let row = unsafe { centroids.add(c * d) };
        unsafe {
            for_each_in_row::<ROW_LOADS>(row, d, |v| {
                terms.add(v, false);
                sq_norm = fma(v, v, sq_norm);
            })
        };
        unsafe { *c_sq_norms.add(c) = sq_norm };
        let (norm, q) = terms.centroid(d);
        m = [norm, q, sq_norm].map(|v| v.to_bits() & 0x7fff_ffff);
    }
    for mask in [16, 8, 4, 2, 1] {
        for v in &mut m {
            *v = (*v).max(e.shfl_xor_u32(*v, mask));
        }
    }
    let warps = e.shared::<u32>();
    if t.is_multiple_of(32) {
        for (j, v) in m.iter().enumerate() {
            unsafe { *warps.add(TILE_MAXIMA_WORDS * (t / 32) + j) = *v };
        }
    }
    e.sync();
    if t < TILE_MAXIMA_WORDS {
        let mut v = 0;
        for w in 0..BLOCK as usize / 32 {
            v = v.max(unsafe { *warps.add(TILE_MAXIMA_WORDS * w + t) });
        }
        unsafe { *out.add(TILE_MAXIMA_WORDS * e.block() + t) = f32::from_bits(v) };
    }
}

/// The CPU twin of `tf32_tile_maxima`: the squared norms of `centroids` (`d` columns) and the
/// maxima of each tile.
#[cfg(test)]
pub fn tile_maxima_of(centroids: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
    let c_sq_norms: Vec<f32> = centroids.chunks(d).map(crate::math::sq_norm).collect();
    let mut out = Vec::new();
    for (rows, norms) in centroids
        .chunks(TF32_CENTROIDS * d)
        .zip(c_sq_norms.chunks(TF32_CENTROIDS))
    {
        let mut m = [0u32; TILE_MAXIMA_WORDS];
        for (row, &nc) in rows.chunks(d).zip(norms) {
            let (norm, q) = RowTerms::of(row, false).centroid(d);
            for (m, v) in m.iter_mut().zip([norm, q, nc]) {
                *m = (*m).max(v.to_bits() & 0x7fff_ffff);
            }
        }
        out.extend(m.map(f32::from_bits));
    }
    (c_sq_norms, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::emu::{P, launch};
    use crate::knn_tf32::tests::{Rng, tf32_dot};
    use crate::launch::BLOCK;
    use crate::math::{l2_score, sq_norm};

    /// `fl(T − E) ≤ S ≤ fl(T + E)` on random and adversarial pairs, `T` from every emulated
    /// accumulation order and centroid reading; prints how much of `E` the worst case uses.
    #[test]
    fn the_bound_holds_against_brute_force() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut worst, mut cases) = (0f64, 0);
        for trial in 0..4200 {
            let d = [1usize, 2, 3, 7, 8, 31, 128, 129, 256, 1000][trial % 10];
            let kind = (trial / 10) % 7;
            let sample = |rng: &mut Rng| -> f32 {
                let u = rng.unit();
                match kind {
                    0 => u,                                               // uniform [0, 1)
                    1 => 2.0 * u - 1.0,                                   // centred
                    2 => (u - 0.5) * 1e6,                                 // large
                    3 => (u - 0.5) * 1e-12,                               // tiny
                    4 => (1.0 + (u * 1024.0).floor()) * 0.5e-3,           // few levels, ties
                    5 => (u - 0.5) * 1e-37,                               // subnormal squares
                    _ => (2f32).powi((u * 60.0) as i32 - 30) * (u - 0.4), // mixed scales
                }
            };
            let x: Vec<f32> = (0..d).map(|_| sample(&mut rng)).collect();
            let mut c: Vec<f32> = (0..d).map(|_| sample(&mut rng)).collect();
            if trial % 7 == 0 {
                // Near-duplicates: the scores' difference is all rounding.
                for (cv, xv) in c.iter_mut().zip(&x) {
                    *cv = xv * (1.0 + (rng.unit() - 0.5) * 1e-6);
                }
            }
            let nc = sq_norm(&c);
            let dot = x.iter().zip(&c).fold(0f32, |a, (&p, &q)| fma(p, q, a));
            let s = l2_score(dot, nc);
            let (p, x_sum) = RowTerms::of(&x, true).point(d, product_coefficient(d));
            let (c_norm, q) = RowTerms::of(&c, false).centroid(d);
            let e = error_bound(p, x_sum, c_norm, q, nc);
            for (order, truncated) in (0..3).flat_map(|o| [(o, true), (o, false)]) {
                let t = l2_score(tf32_dot(&x, &c, order, truncated), nc);
                assert!(
                    t - e <= s && s <= t + e,
                    "d={d} kind={kind}: T = {t:e}, S = {s:e}, E = {e:e}"
                );
                worst = worst.max((t as f64 - s as f64).abs() / e as f64);
                cases += 1;
            }
        }
        assert!(cases > 20_000);
        // (Near 1 where one dimension dominates: then Cauchy–Schwarz is tight.)
        eprintln!("largest |T − S| / E over {cases} cases: {worst:.3}");
    }

    #[test]
    fn residuals_cover_every_reading() {
        let v = 1.0 + 3.0 * 2f32.powi(-12); // between TF32 values, nearer the upper
        assert_eq!(residual(v, true), 2f32.powi(-12));
        assert_eq!(residual(v, false), 3.0 * 2f32.powi(-12));
        assert_eq!(residual(1.5, false), 0.0);
        let tiny = f32::from_bits(5); // subnormal: may flush
        assert_eq!(residual(-tiny, true), tiny);
        assert_eq!(residual(1e-39, false), 1e-39);
    }

    #[test]
    fn emulated_tile_maxima_equal_the_twin() {
        // One centroid; a tile and one; a NaN in the second tile (its maxima NaN, the first's not).
        for (d, k, nan) in [
            (7, 1usize, None),
            (7, 255, None),
            (40, 257, Some(200 * 40 + 3)),
        ] {
            let mut cents: Vec<f32> = (0..k * d)
                .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1.37e-3)
                .collect();
            if let Some(at) = nan {
                cents[at] = f32::NAN;
            }
            let tiles = k.div_ceil(TF32_CENTROIDS);
            let mut out = vec![-1.0; TILE_MAXIMA_WORDS * tiles];
            let mut c_sq = vec![-1.0; k];
            let (pc, pn, po) = (
                P(cents.as_ptr() as *mut f32),
                P::of(&mut c_sq),
                P::of(&mut out),
            );
            launch(
                tiles,
                BLOCK as usize,
                TILE_MAXIMA_SHARED_BYTES,
                |e| unsafe { tile_maxima(e, pc.get(), pn.get(), k, d, po.get()) },
            );
            let (want_sq, want) = tile_maxima_of(&cents, d);
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&want), "d {d} k {k}");
            assert_eq!(bits(&c_sq), bits(&want_sq), "d {d} k {k}");
            let rows_sq: Vec<f32> = cents.chunks(d).map(sq_norm).collect();
            assert_eq!(bits(&c_sq), bits(&rows_sq), "d {d} k {k}");
            for (tile, rows) in cents.chunks(TF32_CENTROIDS * d).enumerate() {
                let m = &out[TILE_MAXIMA_WORDS * tile..][..TILE_MAXIMA_WORDS];
                if rows.iter().any(|v| v.is_nan()) {
                    assert!(m[0].is_nan() && m[2].is_nan(), "tile {tile}");
                    continue;
                }
                for (row, &nc) in rows.chunks(d).zip(&c_sq[tile * TF32_CENTROIDS..]) {
                    let (c, q) = RowTerms::of(row, false).centroid(d);
                    assert!(c <= m[0] && q <= m[1] && nc <= m[2], "tile {tile}");
                }
            }
        }
    }

    #[test]
    fn the_tile_bound_covers_every_centroid_and_flags_overflow() {
        let d = 16;
        let x: Vec<f32> = (0..d).map(|j| 0.3 + j as f32 * 0.01).collect();
        let cents: Vec<f32> = (0..5 * d).map(|i| ((i * 31 % 17) as f32) * 0.2).collect();
        let c_sq: Vec<f32> = cents.chunks(d).map(sq_norm).collect();
        let (_, m) = tile_maxima_of(&cents, d);
        let (p, x_sum) = RowTerms::of(&x, true).point(d, product_coefficient(d));
        let bar = tile_bound(p, x_sum, m[0], m[1], m[2]);
        for (row, &nc) in cents.chunks(d).zip(&c_sq) {
            let (c_norm, q) = RowTerms::of(row, false).centroid(d);
            assert!(error_bound(p, x_sum, c_norm, q, nc) <= bar);
        }
        // Scores that may overflow, a NaN row: not trusted.
        let big: Vec<f32> = x.iter().map(|v| v * 1e37).collect();
        let (p, x_sum) = RowTerms::of(&big, true).point(d, product_coefficient(d));
        assert_eq!(tile_bound(p, x_sum, m[0], m[1], m[2]), f32::INFINITY);
        assert_eq!(tile_bound(f32::NAN, 1.0, m[0], m[1], m[2]), f32::INFINITY);
    }
}
