//! An exact sum of non-negative `f32` values (the distances whose sum is the inertia).
//!
//! A float sum depends on the order of its additions, so the inertia of rows split over shards,
//! threads or GPU blocks would depend on the split. Here every value `m · 2^e` (`m` its 24-bit
//! significand, `e` its exponent field) adds `m` to a 64-bit bucket of its exponent: the buckets
//! are exact integers, so any grouping of the values gives the same buckets, and
//! [`ExactSum::value`] rounds their total once, correctly, to the nearest `f64`.

use rayon::prelude::*;

/// Buckets: one per value of the 8-bit exponent field of an `f32`.
pub const BUCKETS: usize = 256;

/// Values per parallel task of [`ExactSum::of`].
const CHUNK: usize = 1 << 16;

/// The exact sum of non-negative `f32` values, as integer buckets (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactSum {
    buckets: Vec<u64>,
}

impl Default for ExactSum {
    fn default() -> Self {
        ExactSum {
            buckets: vec![0; BUCKETS],
        }
    }
}

impl ExactSum {
    /// The sum of `values` (their signs are ignored: distances are never negative).
    pub fn of(values: &[f32]) -> Self {
        values
            .par_chunks(CHUNK)
            .map(|chunk| {
                let mut sum = ExactSum::default();
                chunk.iter().for_each(|&v| sum.add(v));
                sum
            })
            .reduce(ExactSum::default, |mut a, b| {
                a.merge(&b);
                a
            })
    }

    /// Adds `|value|`. A bucket overflows only after 2^40 values, more rows than the library
    /// takes.
    #[inline]
    pub fn add(&mut self, value: f32) {
        let bits = value.to_bits() & 0x7fff_ffff;
        let exponent = (bits >> 23) as usize;
        let hidden = if exponent == 0 { 0 } else { 1 << 23 };
        self.buckets[exponent] += u64::from((bits & 0x7f_ffff) | hidden);
    }

    /// Adds another sum: the buckets of the union of both sets of values.
    pub fn merge(&mut self, other: &ExactSum) {
        self.buckets
            .iter_mut()
            .zip(&other.buckets)
            .for_each(|(a, b)| *a += b);
    }

    /// The buckets (for the wire).
    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// A sum from its buckets; `None` unless there are exactly [`BUCKETS`].
    pub fn from_buckets(buckets: Vec<u64>) -> Option<Self> {
        (buckets.len() == BUCKETS).then_some(ExactSum { buckets })
    }

    /// The sum, rounded once to the nearest `f64` (ties to even).
    pub fn value(&self) -> f64 {
        // Bucket e holds significands of 2^(max(e, 1) − 150): in units of 2^−149, shifted left
        // by max(e, 1) − 1 ≤ 253 bits. Seven 64-bit limbs hold 448 bits.
        let mut limbs = [0u64; 7];
        for (e, &b) in self.buckets.iter().enumerate() {
            if b == 0 {
                continue;
            }
            let shift = e.max(1) - 1;
            let (limb, bit) = (shift / 64, shift % 64);
            add_at(&mut limbs, limb, b << bit);
            if bit > 0 {
                add_at(&mut limbs, limb + 1, b >> (64 - bit));
            }
        }
        let Some(top) = (0..limbs.len()).rev().find(|&i| limbs[i] != 0) else {
            return 0.0;
        };
        // Highest set bit, counted from bit 0 of the whole number.
        let high = top * 64 + 63 - limbs[top].leading_zeros() as usize;
        if high <= 52 {
            return limbs[0] as f64 * pow2(-149);
        }
        let drop = high - 52;
        let mut mantissa = bits(&limbs, drop, 53);
        let half = bits(&limbs, drop - 1, 1) == 1;
        let sticky = (0..drop - 1).any(|i| bits(&limbs, i, 1) == 1);
        if half && (sticky || mantissa & 1 == 1) {
            mantissa += 1; // 2^53 at most: still exact as an f64
        }
        mantissa as f64 * pow2(drop as i32 - 149)
    }
}

/// Adds `v` at limb `at`, carrying upwards.
fn add_at(limbs: &mut [u64], mut at: usize, v: u64) {
    let (sum, mut carry) = limbs[at].overflowing_add(v);
    limbs[at] = sum;
    while carry {
        at += 1;
        (limbs[at], carry) = limbs[at].overflowing_add(1);
    }
}

/// `count ≤ 64` bits of the number starting at bit `from`.
fn bits(limbs: &[u64], from: usize, count: usize) -> u64 {
    let (limb, bit) = (from / 64, from % 64);
    let mut v = limbs[limb] >> bit;
    if bit > 0 && limb + 1 < limbs.len() {
        v |= limbs[limb + 1] << (64 - bit);
    }
    if count == 64 {
        v
    } else {
        v & ((1 << count) - 1)
    }
}

/// `2^e` for a normal `f64` exponent.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((1023 + e) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The exact sum of values in [2^−40, 2^40), in units of 2^−63, rounded once by `as f64`.
    fn reference(values: &[f32]) -> f64 {
        let units: u128 = values
            .iter()
            .map(|&v| (v as f64 * 2f64.powi(63)) as u128)
            .sum();
        units as f64 * 2f64.powi(-63)
    }

    fn spread(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| rng.random_range(0.5f32..1.0) * 2f32.powi(rng.random_range(-39..39)))
            .collect()
    }

    #[test]
    fn rounds_the_exact_sum_once() {
        for seed in 0..20 {
            let v = spread(1000 + seed as usize, seed);
            assert_eq!(ExactSum::of(&v).value(), reference(&v), "seed {seed}");
        }
    }

    #[test]
    fn any_split_and_order_gives_the_same_buckets() {
        let mut v = spread(200_000, 7);
        let whole = ExactSum::of(&v);
        v.reverse();
        let mut parts = ExactSum::default();
        for part in v.chunks(7777) {
            parts.merge(&ExactSum::of(part));
        }
        assert_eq!(parts, whole);
        assert_eq!(parts.value().to_bits(), whole.value().to_bits());
    }

    #[test]
    fn ties_round_to_even() {
        // 2^53 + 1 lies halfway between 2^53 and 2^53 + 2: it goes to the even 2^53; 2^53 + 3
        // lies halfway between 2^53 + 2 and 2^53 + 4: it goes to the even 2^53 + 4.
        let mut exact = ExactSum::default();
        exact.add(2f32.powi(53));
        exact.add(1.0);
        assert_eq!(exact.value(), 2f64.powi(53));
        exact.add(1.0);
        exact.add(1.0);
        assert_eq!(exact.value(), 2f64.powi(53) + 4.0);
    }

    #[test]
    fn zeros_subnormals_and_the_largest_values() {
        assert_eq!(ExactSum::of(&[0.0, -0.0]).value(), 0.0);
        let tiny = f32::from_bits(1);
        assert_eq!(ExactSum::of(&[tiny, tiny, tiny]).value(), 3.0 * tiny as f64);
        let big = ExactSum::of(&[f32::MAX; 3]).value();
        assert_eq!(big, 3.0 * f32::MAX as f64);
    }

    #[test]
    fn buckets_round_trip() {
        let s = ExactSum::of(&spread(100, 1));
        assert_eq!(ExactSum::from_buckets(s.buckets().to_vec()), Some(s));
        assert_eq!(ExactSum::from_buckets(vec![0; 3]), None);
    }
}
