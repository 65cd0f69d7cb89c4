//! Sample weights as the backends use them: every weight quantised to an integer number of units
//! (see `kernels_gpu::fixed`), so that centroid sums, cluster weights, inertia and seeding
//! weights stay exact integers.
//!
//! A weight `w` becomes `round(w · 2^shift)` units, with `shift` the fewest fractional bits that
//! make every weight exact (0 for integer weights, so a weight of 3 is 3 units: what three copies
//! of the row count for), unless the total would then pass 2^40 units: `shift` is then lowered
//! until it does not, and weights are rounded to the nearest unit (a weight below half a unit
//! then counts as zero).

use crate::error::{Error, Result};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Most total units of quantised weights (unless there are more rows than that).
const MAX_TOTAL_BITS: i32 = 40;

/// The weights of the rows of a fit, in units.
pub(crate) struct Weighting {
    /// Every row's units, an integer held exactly in an f32; `None`: one unit each.
    units: Option<Vec<f32>>,
    /// `cumulative[i]`: the units of rows `0..=i` (empty without weights).
    cumulative: Vec<u64>,
    /// Units per unit of weight: `2^shift`.
    shift: i32,
    total: u64,
    positive: usize,
}

impl Weighting {
    /// One unit per row.
    pub(crate) fn uniform(n: usize) -> Self {
        Weighting {
            units: None,
            cumulative: Vec::new(),
            shift: 0,
            total: n as u64,
            positive: n,
        }
    }

    /// Validates `weights` (one per row of `n`, finite, ≥ 0, not all zero) and quantises them.
    pub(crate) fn new(weights: &[f32], n: usize) -> Result<Self> {
        crate::sample_weight::check(weights, n)?;
        let sum: f64 = weights.iter().map(|&w| w as f64).sum();
        let exact = weights.iter().map(|&w| fraction_bits(w)).max().unwrap_or(0);
        let budget = MAX_TOTAL_BITS.max(ceil_log2(n as f64));
        let shift = exact.min(budget - ceil_log2(sum));
        let unit = 2f64.powi(shift);
        // `w · 2^shift` keeps w's 24 significant bits and rounding to an integer cannot add any,
        // so every unit count is held exactly in an f32.
        let units: Vec<f32> = weights
            .iter()
            .map(|&w| (w as f64 * unit).round_ties_even() as f32)
            .collect();
        let cumulative: Vec<u64> = units
            .iter()
            .scan(0u64, |acc, &u| {
                *acc += u as u64;
                Some(*acc)
            })
            .collect();
        let total = *cumulative.last().expect("n ≥ 1 rows");
        if total == 0 {
            return Err(Error::ZeroSampleWeights);
        }
        let positive = units.iter().filter(|&&u| u > 0.0).count();
        Ok(Weighting {
            units: Some(units),
            cumulative,
            shift,
            total,
            positive,
        })
    }

    /// Every row's units (integer-valued), or `None` for one unit each.
    pub(crate) fn units(&self) -> Option<&[f32]> {
        self.units.as_deref()
    }

    /// The rows weighted.
    pub(crate) fn rows(&self) -> usize {
        self.units.as_ref().map_or(self.total as usize, Vec::len)
    }

    /// The total units.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Units per unit of weight are `2^shift`.
    pub(crate) fn shift(&self) -> i32 {
        self.shift
    }

    /// Rows with at least one unit.
    pub(crate) fn positive(&self) -> usize {
        self.positive
    }

    /// Refuses `k` centroids for fewer rows with weight.
    pub(crate) fn check_k(&self, k: usize) -> Result<()> {
        if k > self.positive {
            return Err(Error::invalid(
                "k",
                format!(
                    "k = {k} is larger than the number of points with a positive weight ({})",
                    self.positive
                ),
            ));
        }
        Ok(())
    }

    /// Whether row `i` has at least one unit.
    pub(crate) fn is_positive(&self, i: usize) -> bool {
        self.units.as_ref().is_none_or(|u| u[i] > 0.0)
    }

    /// How many copies of row `i` its weight stands for: `⌈w⌉` (the weight itself when it is an
    /// integer), at least 1.
    pub(crate) fn copies(&self, i: usize) -> usize {
        self.units.as_ref().map_or(1, |u| {
            let weight = u[i] as f64 * 2f64.powi(-self.shift);
            (weight.ceil() as usize).max(1)
        })
    }

    /// The `p`-th row with at least one unit (`p < positive()`).
    pub(crate) fn positive_row(&self, p: usize) -> usize {
        match &self.units {
            None => p,
            Some(units) => (0..units.len())
                .filter(|&i| units[i] > 0.0)
                .nth(p)
                .expect("p < positive()"),
        }
    }

    /// The row that unit `r < total` belongs to (rows own consecutive runs of units in order).
    pub(crate) fn row_of(&self, r: u64) -> usize {
        if self.units.is_none() {
            return r as usize;
        }
        self.cumulative.partition_point(|&c| c <= r)
    }

    /// A row drawn with probability proportional to its units (uniformly without weights: the
    /// same number of the stream as `rng.random_range(0..n)`).
    pub(crate) fn draw(&self, rng: &mut ChaCha8Rng) -> usize {
        self.row_of(rng.random_range(0..self.total as usize) as u64)
    }

    /// `k ≤ positive()` distinct rows drawn one after the other with probability proportional to
    /// their units among the rows not drawn yet (as NumPy's `choice(replace=False, p=…)`); with
    /// equal weights, uniformly and the same rows as without weights.
    pub(crate) fn draw_distinct(&self, k: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
        let units = match &self.units {
            Some(units) if units.iter().any(|&u| u != units[0]) => units,
            _ => return rand::seq::index::sample(rng, self.positive, k).into_vec(),
        };
        let mut tree = Fenwick::new(units.iter().map(|&u| u as u64));
        let mut left = self.total;
        (0..k)
            .map(|_| {
                let row = tree.find(rng.random_range(0..left));
                let u = units[row] as u64;
                tree.remove(row, u);
                left -= u;
                row
            })
            .collect()
    }
}

/// Fractional bits of a finite `w ≥ 0`: the smallest `t ≥ 0` with `w · 2^t` an integer.
fn fraction_bits(w: f32) -> i32 {
    if w == 0.0 {
        return 0;
    }
    let bits = w.to_bits();
    let (field, mantissa) = ((bits >> 23) & 0xff, bits & 0x7f_ffff);
    // w = m · 2^e with m the integer significand.
    let (m, e) = if field == 0 {
        (mantissa, -149)
    } else {
        (mantissa | 0x80_0000, field as i32 - 150)
    };
    (-(e + m.trailing_zeros() as i32)).max(0)
}

/// `⌈log2 x⌉` of a positive finite x.
fn ceil_log2(x: f64) -> i32 {
    x.log2().ceil() as i32
}

/// A Fenwick tree of unit counts: remove a row's units, find the row a unit falls in.
struct Fenwick {
    tree: Vec<u64>,
}

impl Fenwick {
    fn new(values: impl Iterator<Item = u64>) -> Self {
        let mut tree: Vec<u64> = values.collect();
        for i in 0..tree.len() {
            let parent = i | (i + 1);
            if parent < tree.len() {
                tree[parent] += tree[i];
            }
        }
        Fenwick { tree }
    }

    fn remove(&mut self, mut i: usize, value: u64) {
        while i < self.tree.len() {
            self.tree[i] -= value;
            i |= i + 1;
        }
    }

    /// The row whose run of units holds unit `r` (`r <` the total left).
    fn find(&self, mut r: u64) -> usize {
        let mut pos = 0;
        let mut step = self.tree.len().next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= self.tree.len() && self.tree[next - 1] <= r {
                r -= self.tree[next - 1];
                pos = next;
            }
            step /= 2;
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn integer_weights_are_their_own_units() {
        let w = Weighting::new(&[3.0, 0.0, 1.0, 2.0], 4).unwrap();
        assert_eq!(w.units(), Some(&[3.0, 0.0, 1.0, 2.0][..]));
        assert_eq!((w.total(), w.shift(), w.positive()), (6, 0, 3));
        let rows: Vec<usize> = (0..6).map(|r| w.row_of(r)).collect();
        assert_eq!(rows, [0, 0, 0, 2, 3, 3]);
    }

    #[test]
    fn copies_are_whole_weights_rounded_up() {
        let w = Weighting::new(&[3.0, 0.25, 1.5, 0.0], 4).unwrap();
        let copies: Vec<usize> = (0..4).map(|i| w.copies(i)).collect();
        assert_eq!(copies, [3, 1, 2, 1]);
        assert_eq!(Weighting::uniform(2).copies(1), 1);
    }

    #[test]
    fn dyadic_fractions_are_exact() {
        let w = Weighting::new(&[0.5, 1.25, 2.0], 3).unwrap();
        assert_eq!(w.units(), Some(&[2.0, 5.0, 8.0][..]));
        assert_eq!(w.shift(), 2);
        let twice = Weighting::new(&[1.0, 2.5, 4.0], 3).unwrap();
        assert_eq!(twice.units(), w.units());
        assert_eq!(fraction_bits(f32::from_bits(1)), 149);
        assert_eq!(fraction_bits(3.0), 0);
        assert_eq!(fraction_bits(0.1), 27);
    }

    #[test]
    fn wide_totals_are_rounded_to_the_budget() {
        // 1e-6 needs 43 fractional bits; with 2^20 of total weight only 20 are left.
        let w = Weighting::new(&[1e6, 1e-6, 0.3], 3).unwrap();
        assert_eq!(w.shift(), MAX_TOTAL_BITS - 20);
        assert!(w.total() <= 1 << MAX_TOTAL_BITS, "{}", w.total());
        assert!(w.total() > 1 << (MAX_TOTAL_BITS - 1));
        assert_eq!(w.units().unwrap()[1], 1.0);
        let small: Vec<f32> = (0..1000).map(|i| 0.1 + i as f32 * 1e-3).collect();
        let exact = Weighting::new(&small, 1000).unwrap();
        assert_eq!(exact.shift(), 27, "exact when the budget allows");
        let huge = Weighting::new(&[3e38, 1.0], 2).unwrap();
        assert!(huge.total() <= 1 << MAX_TOTAL_BITS);
        assert_eq!(huge.units().unwrap()[1], 0.0, "below half a unit");
    }

    #[test]
    fn bad_weights_are_typed_errors() {
        assert!(matches!(
            Weighting::new(&[1.0], 2),
            Err(Error::SampleWeightCount {
                weights: 1,
                rows: 2
            })
        ));
        for bad in [-1.0, f32::NAN, f32::INFINITY] {
            assert!(matches!(
                Weighting::new(&[1.0, bad], 2),
                Err(Error::InvalidSampleWeight { row: 1, .. })
            ));
        }
        assert!(matches!(
            Weighting::new(&[0.0, 0.0], 2),
            Err(Error::ZeroSampleWeights)
        ));
    }

    #[test]
    fn draws_follow_the_units() {
        let w = Weighting::new(&[0.0, 3.0, 1.0, 0.0], 4).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut hits = [0; 4];
        for _ in 0..4000 {
            hits[w.draw(&mut rng)] += 1;
        }
        assert_eq!((hits[0], hits[3]), (0, 0));
        assert!((2800..3200).contains(&hits[1]), "{hits:?}");
        let mut picked = w.draw_distinct(2, &mut rng);
        picked.sort();
        assert_eq!(picked, [1, 2]);
        let uniform = Weighting::uniform(10);
        let (mut a, mut b) = (ChaCha8Rng::seed_from_u64(5), ChaCha8Rng::seed_from_u64(5));
        assert_eq!(uniform.draw(&mut a), b.random_range(0..10usize));
    }

    #[test]
    fn fenwick_finds_runs() {
        let mut f = Fenwick::new([2u64, 0, 3, 1].into_iter());
        let found: Vec<usize> = (0..6).map(|r| f.find(r)).collect();
        assert_eq!(found, [0, 0, 2, 2, 2, 3]);
        f.remove(2, 3);
        assert_eq!((f.find(1), f.find(2)), (0, 3));
    }
}
