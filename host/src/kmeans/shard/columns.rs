//! The per-column quantities a fit needs before its first step, computed so that they do not
//! depend on how the rows are split: the largest magnitudes (a max, in any order), then the
//! fixed-point scales, then exact integer moments for `tol`.

use crate::backend::vocab::CHUNK;
use crate::kmeans::prepare::column_moments;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::{scale_exponent, weight_units};
use rayon::prelude::*;

/// Each column's largest magnitude over the rows with weight (every row without `units`; else
/// those with a unit or more).
pub fn column_max_abs(data: &MatrixView<'_>, units: Option<&[f32]>) -> Vec<f32> {
    let d = data.cols();
    data.as_slice()
        .par_chunks(CHUNK * d)
        .enumerate()
        .map(|(ci, rows)| {
            let mut m = vec![0f32; d];
            for (r, row) in rows.chunks_exact(d).enumerate() {
                if units.is_none_or(|u| u[ci * CHUNK + r] > 0.0) {
                    m.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
                }
            }
            m
        })
        .reduce(|| vec![0f32; d], |a, b| merge_max_abs(a, &b))
}

/// The column maxima of two sets of rows, combined.
pub fn merge_max_abs(mut a: Vec<f32>, b: &[f32]) -> Vec<f32> {
    a.iter_mut().zip(b).for_each(|(a, &b)| *a = a.max(b));
    a
}

/// The fixed-point exponents of the cluster sums ([`kernels_gpu::fixed`]) for `n` rows in all
/// whose columns reach `max_abs`: a function of the whole data set, not of a shard.
pub fn scale_exponents(max_abs: &[f32], n: usize) -> Vec<i32> {
    max_abs.iter().map(|&m| scale_exponent(m, n)).collect()
}

/// Exact per-column sums of the rows' fixed-point values `q` (under the scales of
/// [`scale_exponents`]) and of their squares, each times the row's units (one without sample
/// weights): integers, so shards add up to the whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moments {
    /// Units counted (rows, without sample weights).
    pub rows: u64,
    /// `Σ units · q` per column (no overflow: `|q| ≤ 2^(61 − ⌈log₂ n⌉)` for `n` units in all).
    pub sums: Vec<i64>,
    /// `Σ units · q²` per column.
    pub squares: Vec<u128>,
}

impl Moments {
    /// No rows, `d` columns.
    pub fn zeros(d: usize) -> Self {
        Moments {
            rows: 0,
            sums: vec![0; d],
            squares: vec![0; d],
        }
    }

    /// The moments of `data` (its rows weighing `units`, one each without) under the exponents
    /// `scales`: the single-process fit's `Σ units · q` and `Σ units · q²`.
    pub fn of(data: &MatrixView<'_>, units: Option<&[f32]>, scales: &[i32]) -> Self {
        let (first, second) = column_moments(data, units, scales);
        let rows = match units {
            Some(u) => u.iter().map(|&w| weight_units(Some(w)) as u64).sum(),
            None => data.rows() as u64,
        };
        // |Σ units · q| ≤ 2^61 (the bound of the centroid sums); the squares are non-negative.
        Moments {
            rows,
            sums: first.iter().map(|&s| s as i64).collect(),
            squares: second.iter().map(|&s| s as u128).collect(),
        }
    }

    /// Adds the moments of other rows.
    pub fn merge(&mut self, other: &Moments) {
        self.rows += other.rows;
        self.sums
            .iter_mut()
            .zip(&other.sums)
            .for_each(|(a, b)| *a += b);
        self.squares
            .iter_mut()
            .zip(&other.squares)
            .for_each(|(a, b)| *a += b);
    }

    /// The mean over columns of each column's population variance, as a single-process fit
    /// computes it from the same exact moments (`kmeans::prepare`): the same `f64` however the
    /// rows are split.
    pub fn mean_variance(&self, scales: &[i32]) -> f64 {
        let first: Vec<i128> = self.sums.iter().map(|&s| i128::from(s)).collect();
        let second: Vec<i128> = self.squares.iter().map(|&s| s as i128).collect();
        crate::kmeans::prepare::variance_of_moments(&first, &second, self.rows, scales)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_of_shards_add_up_to_the_whole() {
        let values: Vec<f32> = (0..3000)
            .map(|i| ((i * 37) % 101) as f32 * 0.37 - 9.0)
            .collect();
        let data = MatrixView::new(&values, 1000, 3).unwrap();
        let max_abs = column_max_abs(&data, None);
        let scales = scale_exponents(&max_abs, 1000);
        let whole = Moments::of(&data, None, &scales);
        let mut parts = Moments::zeros(3);
        let mut maxes = vec![0f32; 3];
        for rows in values.chunks(3 * 77) {
            let part = MatrixView::new(rows, rows.len() / 3, 3).unwrap();
            parts.merge(&Moments::of(&part, None, &scales));
            maxes = merge_max_abs(maxes, &column_max_abs(&part, None));
        }
        assert_eq!(parts, whole);
        assert_eq!(maxes, max_abs);
    }

    #[test]
    fn variance_of_integer_moments() {
        // Values 1e4 ± 0.5: the moments are exact integers, whatever the split.
        let values: Vec<f32> = (0..4096)
            .map(|i| 1e4 + if i % 2 == 0 { 0.5 } else { -0.5 })
            .collect();
        let data = MatrixView::new(&values, 4096, 1).unwrap();
        let scales = scale_exponents(&column_max_abs(&data, None), 4096);
        let variance = Moments::of(&data, None, &scales).mean_variance(&scales);
        assert!((variance - 0.25).abs() < 1e-5, "{variance}");
    }
}
