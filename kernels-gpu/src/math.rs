//! Distance arithmetic shared by the GPU kernels and the CPU backend.
//!
//! Both backends accumulate over the dimensions in order 0..d with the same operations (an
//! explicit fused multiply-add for squared L2), so a distance is the same float on either side
//! and the argmin — first minimum in centroid order — picks the same label.

/// Assignment metric of k-means, as passed to the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AssignMetric {
    /// Squared Euclidean distance.
    SqL2 = 0,
    /// Manhattan (L1) distance.
    L1 = 1,
}

impl AssignMetric {
    /// The kernel argument for this metric.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The metric for a kernel argument; anything but L1 is squared L2.
    pub const fn from_id(id: u32) -> Self {
        if id == AssignMetric::L1 as u32 {
            AssignMetric::L1
        } else {
            AssignMetric::SqL2
        }
    }
}

/// Fused multiply-add `a * b + c` with a single rounding, on both targets.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::f32::math::mul_add(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a.mul_add(b, c)
    }
}

/// Correctly rounded square root on both targets.
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::f32::math::sqrt(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x.sqrt()
    }
}

/// Correctly rounded f64 square root on both targets.
#[inline(always)]
pub fn sqrt_f64(x: f64) -> f64 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::f64::math::sqrt(x)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x.sqrt()
    }
}

/// One dimension's contribution to a running squared-L2 distance.
#[inline(always)]
pub fn sq_l2_step(acc: f32, x: f32, c: f32) -> f32 {
    let t = x - c;
    fma(t, t, acc)
}

/// One dimension's contribution to a running L1 distance.
#[inline(always)]
pub fn l1_step(acc: f32, x: f32, c: f32) -> f32 {
    acc + (x - c).abs()
}

/// One dimension's contribution under `metric`.
#[inline(always)]
pub fn step(metric: AssignMetric, acc: f32, x: f32, c: f32) -> f32 {
    match metric {
        AssignMetric::SqL2 => sq_l2_step(acc, x, c),
        AssignMetric::L1 => l1_step(acc, x, c),
    }
}

/// Distance between two equal-length vectors, accumulated in dimension order.
#[inline(always)]
pub fn distance(metric: AssignMetric, x: &[f32], c: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (&a, &b) in x.iter().zip(c) {
        acc = step(metric, acc, a, b);
    }
    acc
}

/// Squared norm of a vector, accumulated in dimension order with fused multiply-adds.
#[inline(always)]
pub fn sq_norm(x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for &v in x {
        acc = fma(v, v, acc);
    }
    acc
}

/// Scales `row` to unit L2 norm in place: divides every value by `sqrt` of its [`sq_norm`] (both
/// correctly rounded on either target). A zero row stays as it is. The cosine points and the
/// spherical k-means centroids are normalised this way on both backends.
#[inline(always)]
pub fn normalize(row: &mut [f32]) {
    let norm = sqrt(sq_norm(row));
    if norm > 0.0 {
        for v in row {
            *v /= norm;
        }
    }
}

/// The squared-L2 ranking score of a centroid: `‖c‖² − 2·x·c`, which orders centroids exactly
/// as `‖x − c‖²` does but costs one multiply-add per dimension (the GEMM form).
#[inline(always)]
pub fn l2_score(dot: f32, c_sq_norm: f32) -> f32 {
    fma(-2.0, dot, c_sq_norm)
}

/// The squared distance recovered from a point's squared norm and its best score (≥ 0).
#[inline(always)]
pub fn l2_from_score(x_sq_norm: f32, score: f32) -> f32 {
    (x_sq_norm + score).max(0.0)
}

/// One dimension's contribution to the accumulator the assign step keeps per (point, centroid):
/// the dot product for squared L2 (see [`l2_score`]), the distance itself for L1.
#[inline(always)]
pub fn assign_step(metric: AssignMetric, acc: f32, x: f32, c: f32) -> f32 {
    match metric {
        AssignMetric::SqL2 => fma(x, c, acc),
        AssignMetric::L1 => l1_step(acc, x, c),
    }
}

/// The score a finished accumulator ranks by (lower is nearer).
#[inline(always)]
pub fn assign_score(metric: AssignMetric, acc: f32, c_sq_norm: f32) -> f32 {
    match metric {
        AssignMetric::SqL2 => l2_score(acc, c_sq_norm),
        AssignMetric::L1 => acc,
    }
}

/// The distance reported for the best score.
#[inline(always)]
pub fn assign_distance(metric: AssignMetric, x_sq_norm: f32, score: f32) -> f32 {
    match metric {
        AssignMetric::SqL2 => l2_from_score(x_sq_norm, score),
        AssignMetric::L1 => score,
    }
}

/// Whether candidate `(dist, index)` beats the current best: smaller distance, and on an exact
/// tie the smaller index. Both backends visit candidates in index order, so a strict `<` on the
/// distance is all it takes; this is spelled out for the selection code that merges out of order.
#[inline(always)]
pub fn better(dist: f32, index: u32, best_dist: f32, best_index: u32) -> bool {
    dist < best_dist || (dist == best_dist && index < best_index)
}

/// `v` rounded to TF32 as `cvt.rna.tf32.f32` does: to nearest with 10 mantissa bits, ties away
/// from zero (non-finite values unchanged).
pub fn tf32_round(v: f32) -> f32 {
    if !v.is_finite() {
        return v;
    }
    let bits = v.to_bits();
    let r = bits.wrapping_add(0x1000) & !0x1fff;
    f32::from_bits(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sq_l2_matches_hand_computation() {
        let d = distance(AssignMetric::SqL2, &[1.0, 2.0, 3.0], &[0.0, 0.0, 1.0]);
        assert_eq!(d, 1.0 + 4.0 + 4.0);
    }

    #[test]
    fn l1_matches_hand_computation() {
        let d = distance(AssignMetric::L1, &[1.0, -2.0, 3.0], &[0.0, 0.0, 1.0]);
        assert_eq!(d, 1.0 + 2.0 + 2.0);
    }

    #[test]
    fn fma_rounds_once() {
        // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the last term survives only with a single rounding.
        let a = 1.0 + f32::EPSILON * 2048.0;
        assert_eq!(fma(a, a, -1.0), 2.0f32.powi(-11) + 2.0f32.powi(-24));
        assert_ne!(a * a - 1.0, fma(a, a, -1.0));
    }

    #[test]
    fn ties_go_to_the_lower_index() {
        assert!(better(1.0, 3, 1.0, 5));
        assert!(!better(1.0, 5, 1.0, 3));
        assert!(better(0.5, 9, 1.0, 0));
    }

    #[test]
    fn gemm_form_ranks_like_the_direct_distance() {
        let x = [1.0, 2.0, -1.0];
        let cs = [[0.0, 0.0, 0.0], [1.0, 2.0, -0.5], [3.0, 1.0, 0.0]];
        let x2 = sq_norm(&x);
        for c in cs {
            let mut dot = 0.0;
            for j in 0..3 {
                dot = assign_step(AssignMetric::SqL2, dot, x[j], c[j]);
            }
            let via_score = assign_distance(AssignMetric::SqL2, x2, l2_score(dot, sq_norm(&c)));
            assert_eq!(via_score, distance(AssignMetric::SqL2, &x, &c));
        }
    }

    #[test]
    fn normalize_gives_unit_rows_and_keeps_zero_rows() {
        let mut row = [3.0, 4.0];
        normalize(&mut row);
        assert_eq!(row, [0.6, 0.8]);
        let mut zero = [0.0, 0.0, 0.0];
        normalize(&mut zero);
        assert_eq!(zero, [0.0; 3]);
    }

    #[test]
    fn metric_ids_round_trip() {
        for m in [AssignMetric::SqL2, AssignMetric::L1] {
            assert_eq!(AssignMetric::from_id(m.id()), m);
        }
    }
}
