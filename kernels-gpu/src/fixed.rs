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

/// The mean of `count` fixed-point addends whose sum is `sum`, under `inv_scale = 2^−s`.
#[inline(always)]
pub fn mean(sum: i64, inv_scale: f64, count: u32) -> f32 {
    ((sum as f64) * inv_scale / (count as f64)) as f32
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
    fn subnormal_log2() {
        assert_eq!(ilog2_floor(f32::from_bits(1)), -149);
        assert_eq!(ilog2_floor(1.0), 0);
        assert_eq!(ilog2_floor(3.0), 1);
    }
}
