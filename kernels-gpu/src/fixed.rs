//! Fixed-point cluster sums.
//!
//! Centroid sums are accumulated as 64-bit integers: every coordinate is scaled by a power of two
//! chosen per dimension and rounded, so the sum is exact and independent of the order in which
//! threads, blocks or rayon tasks add it up. That is what makes the centroids reproducible run
//! after run and identical on the CPU and the GPU, without float atomics.
//!
//! The scale leaves room for `n` addends: `|q| ≤ 2^(62 − ⌈log2 n⌉ − 1)`, so no sum can overflow.
//! A coordinate is resolved to `2^−(61 − ⌈log2 n⌉)` of its dimension's largest magnitude — 44 bits
//! for 10^5 points, 31 bits for 10^9 — finer than the 24 bits of an f32 accumulator.
//!
//! **Sample weights** are integers too: the host quantises every weight to an integer number of
//! units ([`weight_units`]; an integer weight is its own number of units), and a point adds
//! `units · q` to its cluster's sum and `units` to its cluster's weight. The scales are then
//! chosen for the total number of units `Σw` in place of `n` (`Σ units · |q| ≤ Σw · 2^(61 − ⌈log2
//! Σw⌉)`), so a point of weight 3 adds exactly what three copies of it add, and integer weights
//! give the same centroids, bit for bit, as the data with rows repeated.
//!
//! **Inertia** is a fixed-point sum as well: every distance is scaled by `2^u`
//! ([`inertia_exponent`]), rounded, multiplied by its point's units and added as an integer, so it
//! too is independent of the order of the additions (and the same on every backend).

/// Largest and smallest power-of-two exponent a scale may take (keeps `2^s` a normal f32).
const MAX_SHIFT: i32 = 100;

/// The power-of-two exponent that scales dimension values up to `max_abs` for `n` addends.
pub fn scale_exponent(max_abs: f32, n: usize) -> i32 {
    if max_abs == 0.0 || !max_abs.is_finite() {
        return 0;
    }
    let log_n = usize::BITS - n.max(1).saturating_sub(1).leading_zeros(); // ⌈log2 n⌉
    // max_abs < 2^e
    let e = ilog2_floor(max_abs) + 1;
    (62 - log_n as i32 - 1 - e).clamp(-MAX_SHIFT, MAX_SHIFT)
}

/// `⌊log2 x⌋` of a positive finite f32, subnormals included.
fn ilog2_floor(x: f32) -> i32 {
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32;
    if exp == 0 {
        // subnormal: value = mantissa · 2^−149
        let mantissa = bits & 0x7f_ffff;
        (31 - mantissa.leading_zeros() as i32) - 149
    } else {
        exp - 127
    }
}

/// `2^s` as an f32 (exact for the clamped range).
pub fn pow2_f32(s: i32) -> f32 {
    f32::from_bits(((s + 127) as u32) << 23)
}

/// `2^−s` as an f64 (exact for the clamped range).
pub fn inv_pow2_f64(s: i32) -> f64 {
    f64::from_bits(((1023 - s) as u64) << 52)
}

/// The fixed-point value of `x` under scale `2^s` (given as `scale = pow2_f32(s)`).
#[inline(always)]
pub fn to_fixed(x: f32, scale: f32) -> i64 {
    // x · 2^s is exact; rounding to the nearest integer (ties to even) is the only rounding.
    // On the GPU one `cvt.rni` rounds and converts, saturating with NaN → 0 as `as i64` does;
    // the Rust spelling of the same costs a rounding and seven compares and selects.
    #[cfg(target_arch = "nvptx64")]
    {
        let q: i64;
        unsafe {
            core::arch::asm!("cvt.rni.s64.f32 {q}, {v};", q = out(reg64) q, v = in(reg32) x * scale,
                options(pure, nomem, nostack));
        }
        q
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        (x * scale).round_ties_even() as i64
    }
}

/// The mean of fixed-point addends whose weighted sum is `sum` and whose weights (units, or the
/// count without weights) add to `weight`, under `inv_scale = 2^−s`.
#[inline(always)]
pub fn mean(sum: i64, inv_scale: f64, weight: u64) -> f32 {
    ((sum as f64) * inv_scale / (weight as f64)) as f32
}

/// The units of a point whose quantised weight is `units` (an integer-valued f32, as the host
/// makes them); without weights every point is one unit.
#[inline(always)]
pub fn weight_units(units: Option<f32>) -> i64 {
    match units {
        Some(w) => w as i64,
        None => 1,
    }
}

/// The units of point `i` of a kernel's weights argument: 1 when `weights` is null.
///
/// # Safety
/// `weights` is null or holds more than `i` values.
#[inline(always)]
pub unsafe fn units_at(weights: *const f32, i: usize) -> i64 {
    weight_units(if weights.is_null() {
        None
    } else {
        Some(unsafe { *weights.add(i) })
    })
}

/// A point's fixed-point addend `q` counted `units` times. Wrapping, like the GPU's integer
/// arithmetic: within the bounds of the scales it never wraps, and a zero-weight point adds 0
/// even when its coordinates lie outside them.
#[inline(always)]
pub fn weighted(q: i64, units: i64) -> i64 {
    q.wrapping_mul(units)
}

/// The exponent `u` of the fixed-point inertia for distances up to about `bound` (f32 rounding may
/// exceed it, up to twice) and `total` units of weight: `total · 2 · bound · 2^u < 2^62`, so the
/// integer sum `Σ units · round(dist · 2^u)` cannot overflow an i64. A distance is then resolved to
/// `2^−(60 − ⌈log2 total⌉)` of the bound: far below the rounding of the f32 distance itself.
pub fn inertia_exponent(bound: f64, total: u64) -> i32 {
    if bound <= 0.0 || !bound.is_finite() {
        return 0;
    }
    let log_total = u64::BITS - total.max(1).saturating_sub(1).leading_zeros(); // ⌈log2 total⌉
    // bound < 2^e
    let e = ((bound.to_bits() >> 52) & 0x7ff) as i32 - 1023 + 1;
    (60 - log_total as i32 - e).clamp(-MAX_SHIFT, MAX_SHIFT)
}

/// A point's term of the fixed-point inertia: its distance under `scale = 2^u`, rounded, times its
/// units (see [`inertia_exponent`]).
#[inline(always)]
pub fn inertia_term(dist: f32, scale: f32, units: i64) -> i64 {
    weighted(to_fixed(dist, scale), units)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_leaves_room_for_n_addends() {
        for &(max_abs, n) in &[
            (1.0f32, 1usize),
            (255.0, 1_000_000),
            (3.0e38, 10),
            (1e-30, 7),
        ] {
            let s = scale_exponent(max_abs, n);
            let q = to_fixed(max_abs, pow2_f32(s)).unsigned_abs() as u128;
            assert!(q * n as u128 <= 1u128 << 62, "{max_abs} {n} {s}");
        }
    }

    #[test]
    fn resolution_is_fine_for_typical_data() {
        let s = scale_exponent(255.0, 1 << 20);
        let scale = pow2_f32(s);
        let inv = inv_pow2_f64(s);
        let xs = [0.1f32, 17.25, 254.999, -3.5];
        let sum: i64 = xs.iter().map(|&x| to_fixed(x, scale)).sum();
        let exact: f64 = xs.iter().map(|&x| x as f64).sum::<f64>() / 4.0;
        assert!((mean(sum, inv, 4) as f64 - exact).abs() <= 1e-5);
    }

    #[test]
    fn zero_dimension_is_exact() {
        assert_eq!(scale_exponent(0.0, 100), 0);
        assert_eq!(to_fixed(0.0, pow2_f32(0)), 0);
    }

    #[test]
    fn powers_of_two_are_exact() {
        for s in [-100, -1, 0, 1, 45, 100] {
            assert_eq!(pow2_f32(s) as f64, 2f64.powi(s));
            assert_eq!(inv_pow2_f64(s), 2f64.powi(-s));
        }
    }

    #[test]
    fn inertia_leaves_room_for_the_total_weight() {
        for &(bound, total) in &[
            (1.0f64, 1u64),
            (12.0, 1_000_000),
            (1e30, 1 << 40),
            (3e-9, 77),
        ] {
            let u = inertia_exponent(bound, total);
            let q = to_fixed((2.0 * bound) as f32, pow2_f32(u)) as u128;
            assert!(q * total as u128 <= 1u128 << 62, "{bound} {total} {u}");
            assert!(
                q * total as u128 > 1u128 << 58,
                "{bound} {total} {u}: too coarse"
            );
        }
        assert_eq!(inertia_exponent(0.0, 10), 0);
    }

    #[test]
    fn weighted_terms_equal_repeated_terms() {
        let scale = pow2_f32(scale_exponent(3.0, 12));
        for x in [0.1f32, -2.75, 2.999] {
            let q = to_fixed(x, scale);
            assert_eq!(weighted(q, 3), q + q + q);
            assert_eq!(
                inertia_term(x.abs(), scale, 3),
                3 * to_fixed(x.abs(), scale)
            );
        }
        assert_eq!(
            weighted(to_fixed(1e30, scale), 0),
            0,
            "zero weight, value out of range"
        );
        assert_eq!(weight_units(None), 1);
        assert_eq!(weight_units(Some(7.0)), 7);
    }

    #[test]
    fn subnormal_log2() {
        assert_eq!(ilog2_floor(f32::from_bits(1)), -149);
        assert_eq!(ilog2_floor(1.0), 0);
        assert_eq!(ilog2_floor(3.0), 1);
    }
}
