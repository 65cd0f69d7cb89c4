//! Real powers `t^p` and roots `s^(1/p)` of non-negative numbers in f64, for the Minkowski
//! distance, built from IEEE add, multiply and divide alone (round to nearest, no fused
//! multiply-add, no libm) in one fixed order, so the GPU and the CPU get the same bits.
//!
//! `t^p = 2^(p · log2 t)`: `log2` from the exponent bits and the `atanh` series of the mantissa
//! folded into [√½, √2); `2^z` as `2^round(z)` (exponent bits) times a Taylor polynomial of
//! `e^(f·ln 2)`, |f| ≤ ½. Both series are cut where their next term is below 2⁻⁵⁶, so a result
//! is within a few f64 ulps of the exact power (about 1e-13 relative when |p · log2 t| is near
//! 1000), far finer than the f32 distances built from it.

const LN_2: f64 = core::f64::consts::LN_2;
const LOG2_E: f64 = core::f64::consts::LOG2_E;
const SQRT_2: f64 = core::f64::consts::SQRT_2;
const MANTISSA: u64 = (1 << 52) - 1;
/// Adding and subtracting 1.5 · 2^52 rounds an f64 of magnitude below 2^51 to an integer.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// `1 / (2i + 1)` for the `atanh` series `ln m = 2s · Σ s^(2i) / (2i + 1)`, `s = (m−1)/(m+1)`;
/// |s| ≤ 0.172, so `s^22 / 23` < 2⁻⁶⁰.
const ATANH: [f64; 11] = [
    1.0,
    1.0 / 3.0,
    1.0 / 5.0,
    1.0 / 7.0,
    1.0 / 9.0,
    1.0 / 11.0,
    1.0 / 13.0,
    1.0 / 15.0,
    1.0 / 17.0,
    1.0 / 19.0,
    1.0 / 21.0,
];

/// `1 / i!` for the Taylor series of `e^g`, |g| ≤ ½ ln 2, where `g^14 / 14!` < 2⁻⁵⁷.
const EXP: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// `2^i` for `−1022 ≤ i ≤ 1023`, from its exponent bits.
#[inline(always)]
fn pow2(i: i64) -> f64 {
    f64::from_bits(((i + 1023) as u64) << 52)
}

/// `log2 x` for a positive finite `x`.
#[inline(always)]
pub fn log2(x: f64) -> f64 {
    let (mut bits, mut e) = (x.to_bits(), 0i64);
    if bits >> 52 == 0 {
        // Subnormal: scale into the normal range first.
        bits = (x * pow2(54)).to_bits();
        e = -54;
    }
    e += (bits >> 52) as i64 - 1023;
    let mut m = f64::from_bits((bits & MANTISSA) | (1023 << 52));
    if m > SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut series = ATANH[ATANH.len() - 1];
    let mut i = ATANH.len() - 1;
    while i > 0 {
        i -= 1;
        series = series * s2 + ATANH[i];
    }
    e as f64 + (2.0 * s * series) * LOG2_E
}

/// `2^z` (0 below the smallest subnormal, +∞ from 1024 up).
#[inline(always)]
pub fn exp2(z: f64) -> f64 {
    if z >= 1024.0 {
        return f64::INFINITY;
    }
    if z < -1076.0 {
        return 0.0;
    }
    let k = (z + ROUND) - ROUND;
    let g = (z - k) * LN_2;
    let mut poly = EXP[EXP.len() - 1];
    let mut i = EXP.len() - 1;
    while i > 0 {
        i -= 1;
        poly = poly * g + EXP[i];
    }
    let k = k as i64;
    // poly ∈ [0.7, 1.42]: two exact power-of-two factors reach every exponent, and only the
    // last product rounds (to a subnormal, or to +∞ just below 1024).
    if k > 1023 {
        poly * pow2(1023) * pow2(k - 1023)
    } else if k < -1022 {
        poly * pow2(-1022) * pow2(k + 1022)
    } else {
        poly * pow2(k)
    }
}

/// `t^p` for `t ≥ 0` (+∞ stays +∞) and `p > 0`.
#[inline(always)]
pub fn pow(t: f64, p: f64) -> f64 {
    if t == 0.0 || t == f64::INFINITY {
        t
    } else {
        exp2(p * log2(t))
    }
}

/// `s^(1/p)` for `s ≥ 0` (+∞ stays +∞) and `p > 0`, rounded to f32.
#[inline(always)]
pub fn root(s: f64, p: f64) -> f32 {
    if s == 0.0 || s == f64::INFINITY {
        s as f32
    } else {
        exp2(log2(s) / p) as f32
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;

    fn rel(got: f64, want: f64) -> f64 {
        ((got - want) / want).abs()
    }

    #[test]
    fn log2_and_exp2_are_exact_on_powers_of_two() {
        for i in -1074..1024i64 {
            let x = if i < -1022 {
                f64::from_bits(1 << (i + 1074))
            } else {
                pow2(i)
            };
            assert_eq!(log2(x), i as f64, "{i}");
            assert_eq!(exp2(i as f64), x, "{i}");
        }
        assert_eq!(exp2(1024.0), f64::INFINITY);
        assert_eq!(exp2(-1080.0), 0.0);
        assert_eq!(pow(3.0, 2.0) as f32, 9.0);
        assert!(rel(pow(3.0, 2.0), 9.0) < 1e-15);
    }

    #[test]
    fn powers_are_close_to_libm_over_a_sweep() {
        let mut worst = 0f64;
        let ps = [1.0, 1.5, 2.0, 2.5, 3.0, 3.3, 4.0, 7.25, 10.0, 31.0, 100.0];
        let mut t = 1e-30f64;
        while t < 1e30 {
            for p in ps {
                let want = t.powf(p);
                if want.is_finite() && want > 1e-300 {
                    worst = worst.max(rel(pow(t, p), want));
                }
                let r = root(t, p) as f64;
                let want = t.powf(1.0 / p);
                // Within half an f32 ulp (2^-24 relative) plus the f64 error.
                assert!(rel(r, want) < 6.0e-8, "root({t}, {p}) = {r}, want {want}");
            }
            t *= 1.37;
        }
        eprintln!("worst relative error of pow against libm: {worst:e}");
        assert!(worst < 2e-13, "worst relative error {worst:e}");
        // f32 powers are the correctly rounded f32 of libm's f64 power on a dense sweep.
        let mut mismatches = 0;
        for i in 1..20_000 {
            let t = i as f32 * 0.001_3;
            for p in [1.5f64, 3.0, 4.5] {
                let got = pow(t as f64, p) as f32;
                let want = (t as f64).powf(p) as f32;
                mismatches += (got != want) as usize;
                assert!(
                    rel(got as f64, want as f64) <= f32::EPSILON as f64,
                    "{t} {p}"
                );
            }
        }
        eprintln!("{mismatches} of 60k f32 powers differ from libm's");
        assert!(
            mismatches <= 2,
            "{mismatches} of 60k f32 powers differ from libm's"
        );
    }

    #[test]
    fn subnormals_and_extremes() {
        let tiny = f64::from_bits(1);
        assert_eq!(log2(tiny), -1074.0);
        assert!(rel(pow(1e-200, 1.2), 1e-240) < 1e-13);
        assert_eq!(pow(0.0, 3.0), 0.0);
        assert_eq!(pow(f64::INFINITY, 3.0), f64::INFINITY);
        assert_eq!(pow(1e200, 3.0), f64::INFINITY);
        assert_eq!(root(0.0, 3.0), 0.0);
        assert_eq!(root(f64::INFINITY, 3.0), f32::INFINITY);
        assert_eq!(root(8.0, 3.0), 2.0);
        assert_eq!(root(1e300, 3.0), f32::INFINITY);
        let sub = pow(1e-160, 2.0);
        assert!(sub > 0.0 && rel(sub, 1e-320) < 1e-3, "{sub:e}");
    }
}
