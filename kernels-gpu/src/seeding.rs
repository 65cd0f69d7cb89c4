//! Arithmetic of k-means++ and k-means‖ seeding shared by the GPU kernels (`init`) and the CPU
//! backend: the seeding distance, exact integer weights, the draw rule of k-means++ and the
//! per-point uniforms of k-means‖.
//!
//! Every seeding distance (a point to a candidate, to the nearest seed, to an accepted trial) is
//! [`distance_from`] of an accumulator run over the dimensions in order 0..d with
//! [`assign_step`], as the Lloyd assignment's: for squared L2 the expanded (GEMM) form
//! `max(‖x‖² + fma(−2, x·c, ‖c‖²), 0)`, one multiply-add per dimension, from the rows' squared
//! norms (`row_sq_norms` on the GPU, `backend::cpu::kmeans::row_sq_norms` on the CPU: the same
//! bits); for L1 the direct sum of `|x − c|`. A row's distance to itself (or to a duplicate) is
//! exactly 0: `x·x` is the same float as `‖x‖²`, and `‖x‖² + fma(−2, s, s)` is `s − s`.
//!
//! A point's weight is its seeding distance (squared L2, or the square of the L1 distance)
//! scaled by a power of two and truncated to an integer, capped so that `n` weights cannot
//! overflow a u64, then multiplied by the point's sample-weight units (see [`crate::fixed`]; the
//! cap is then for the total units in place of `n`). Sums of weights (trial potentials, prefix
//! sums for sampling) are then exact and independent of the order in which threads, blocks or
//! rayon tasks add them, so both backends make the same choices.

use crate::math::{AssignMetric, assign_distance, assign_score, assign_step};

/// No row: the seeding kernels' argument for an absent pending winner.
pub const NO_ROW: u32 = u32::MAX;

/// The fixed-point scale of seeding weights: `weight = min(⌊w · scale⌋, cap)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WeightScale {
    /// A power of two.
    pub scale: f64,
    /// `⌊2^63 / n⌋`: no sum of `n` weights exceeds 2^63.
    pub cap: u64,
}

impl WeightScale {
    /// The scale for `n` points whose weights are at most about `bound`: `2^s` with
    /// `n · bound · 2^s ≤ 2^62`, leaving a factor two for rounding in the distances.
    #[cfg(not(target_arch = "nvptx64"))]
    pub fn new(bound: f64, n: usize) -> Self {
        let log = if bound > 0.0 && bound.is_finite() {
            bound.log2()
        } else {
            0.0
        };
        let s = (62.0 - (n.max(1) as f64).log2() - log)
            .floor()
            .clamp(-1000.0, 1000.0) as i32;
        WeightScale {
            scale: 2f64.powi(s),
            cap: (1u64 << 63) / n.max(1) as u64,
        }
    }

    /// The integer weight of a point of one unit at seeding distance `dist` (as `distance`
    /// computes it).
    #[inline(always)]
    pub fn weight(self, metric: AssignMetric, dist: f32) -> u64 {
        let w = match metric {
            AssignMetric::SqL2 => dist as f64,
            AssignMetric::L1 => dist as f64 * dist as f64,
        };
        // Exact scaling by a power of two, then truncation (saturating; NaN → 0).
        ((w * self.scale) as u64).min(self.cap)
    }

    /// The integer weight of a point of `units` units (its sample weight) at seeding distance
    /// `dist`: what `units` copies of a one-unit point weigh together.
    #[inline(always)]
    pub fn weight_of(self, metric: AssignMetric, dist: f32, units: u64) -> u64 {
        self.weight(metric, dist) * units
    }
}

/// The seeding distance from an accumulator of [`assign_step`] over every dimension (the dot
/// product `x·c` for squared L2, the distance itself for L1) and the squared norms of the point
/// and the candidate (read for squared L2 only): the Lloyd assignment's distance
/// ([`assign_distance`] of [`assign_score`]).
#[inline(always)]
pub fn distance_from(metric: AssignMetric, acc: f32, x_sq_norm: f32, c_sq_norm: f32) -> f32 {
    assign_distance(metric, x_sq_norm, assign_score(metric, acc, c_sq_norm))
}

/// The seeding distance between rows `x` and `c` of squared norms `x_sq_norm` and `c_sq_norm`:
/// [`distance_from`] of their accumulator, in dimension order.
#[inline(always)]
pub fn row_distance(
    metric: AssignMetric,
    x: &[f32],
    c: &[f32],
    x_sq_norm: f32,
    c_sq_norm: f32,
) -> f32 {
    let mut acc = 0.0;
    for (&a, &b) in x.iter().zip(c) {
        acc = assign_step(metric, acc, a, b);
    }
    distance_from(metric, acc, x_sq_norm, c_sq_norm)
}

/// The k-means++ draw of uniform `u` (a u64 of the host's ChaCha8 stream) in `[0, total)`:
/// `⌊u · total / 2^64⌋`, exact in 128 bits. Host, shards and the GPU's step loop all draw this
/// way from the same pre-generated uniforms, so every path locates the same candidates.
#[inline(always)]
pub fn draw(u: u64, total: u64) -> u64 {
    ((u as u128 * total as u128) >> 64) as u64
}

/// The uniform 32-bit number of k-means‖ for (`seed`, `round`, `row`): a counter-based hash
/// (SplitMix64's finaliser), so every backend draws the same number for a point without state.
#[inline(always)]
pub fn uniform32(seed: u64, round: u32, row: u32) -> u32 {
    let mut z = seed
        ^ (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (row as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 32) as u32
}

/// Whether k-means‖ samples a point of weight `weight` with probability `min(1, ell·weight/phi)`
/// given its uniform `u` (`u / 2^32 < ell·weight/phi`, in exact integers; `phi > 0`).
#[inline(always)]
pub fn sampled(u: u32, weight: u64, ell: u64, phi: u64) -> bool {
    let want = ell as u128 * weight as u128;
    want >= phi as u128 || ((u as u128) * (phi as u128)) < (want << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_capped_weights_cannot_overflow() {
        let w = WeightScale::new(1e6, 1000);
        assert!(w.weight(AssignMetric::SqL2, f32::INFINITY) == w.cap);
        assert!(w.cap as u128 * 1000 <= 1u128 << 63);
        assert_eq!(w.weight(AssignMetric::SqL2, f32::NAN), 0);
    }

    #[test]
    fn weights_are_monotone_and_fine() {
        let w = WeightScale::new(4.0, 1 << 20);
        let a = w.weight(AssignMetric::SqL2, 1.0);
        let b = w.weight(AssignMetric::SqL2, 1.0 + f32::EPSILON);
        assert!(b > a);
        assert_eq!(
            w.weight(AssignMetric::L1, 2.0),
            w.weight(AssignMetric::SqL2, 4.0)
        );
    }

    #[test]
    fn a_row_is_at_distance_zero_from_itself() {
        let rows: [&[f32]; 4] = [&[0.1, -3.7, 2.9e3], &[1e-20, 7.0], &[-0.0], &[0.3; 37]];
        for x in rows {
            let sq = crate::math::sq_norm(x);
            assert_eq!(row_distance(AssignMetric::SqL2, x, x, sq, sq).to_bits(), 0);
            assert_eq!(row_distance(AssignMetric::L1, x, x, 0.0, 0.0), 0.0);
        }
    }

    #[test]
    fn expanded_distance_is_the_clamped_gemm_form() {
        let (x, c) = ([1.0f32, 2.0, -1.0], [0.5f32, 2.0, 3.0]);
        let (xs, cs) = (crate::math::sq_norm(&x), crate::math::sq_norm(&c));
        let dot = crate::math::fma(-1.0, 3.0, crate::math::fma(2.0, 2.0, 0.5));
        let want = (xs + crate::math::fma(-2.0, dot, cs)).max(0.0);
        assert_eq!(row_distance(AssignMetric::SqL2, &x, &c, xs, cs), want);
        assert_eq!(want, 16.25);
        // Cancellation never goes below zero.
        assert_eq!(distance_from(AssignMetric::SqL2, 1.0 + 1e-7, 1.0, 1.0), 0.0);
        assert_eq!(
            row_distance(AssignMetric::L1, &x, &c, 7.0, 9.0),
            crate::math::distance(AssignMetric::L1, &x, &c)
        );
    }

    #[test]
    fn draws_stay_below_the_total_and_spread_over_it() {
        assert_eq!(draw(u64::MAX, 1), 0);
        assert_eq!(draw(u64::MAX, u64::MAX), u64::MAX - 1);
        assert_eq!(draw(0, 1000), 0);
        assert_eq!(draw(1 << 63, 1000), 500);
        assert_eq!(draw(u64::MAX, 0), 0);
    }

    #[test]
    fn sampling_probability_is_respected() {
        let hits = (0..100_000u32)
            .filter(|&r| sampled(uniform32(7, 1, r), 1, 1, 4))
            .count();
        assert!((23_000..27_000).contains(&hits), "{hits}");
        assert!(sampled(u32::MAX, 5, 2, 10));
        assert!(!sampled(0, 0, 2, 10));
    }
}
