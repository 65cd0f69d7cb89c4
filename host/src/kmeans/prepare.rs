//! Everything a fit derives from its data and weights before the first iteration: the rows the
//! backend holds (unit rows for cosine), the weights in units, the fixed-point scales of the
//! centroid sums and of the inertia, the seeding weight scale and the absolute `tol`.
//!
//! Every scale is chosen for the total units `Σw` (the row count without weights) and the
//! largest magnitudes of the rows with weight, so that data with integer weights and the same
//! data with rows repeated get the same scales, hence the same sums bit for bit.

use super::weights::Weighting;
use super::{Init, KMeansParams, Metric, init};
use crate::backend::LloydSpec;
use crate::error::Result;
use crate::matrix::MatrixView;
use kernels_gpu::fixed::{
    inertia_exponent, inv_pow2_f64, pow2_f32, scale_exponent, to_fixed, weight_units,
};
use kernels_gpu::seeding::WeightScale;
use rayon::prelude::*;

/// A validated fit's data and everything derived from it.
pub(super) struct Prepared<'a> {
    /// The rows the backend holds: the data, or its unit rows for cosine.
    pub data: MatrixView<'a>,
    pub weights: Weighting,
    /// The given initial centroids (unit rows for cosine), with [`Init::Centroids`].
    pub init_centroids: Option<Vec<f32>>,
    /// Per-dimension fixed-point exponents of the centroid sums.
    pub scales: Vec<i32>,
    /// The seeding weights' scale.
    pub seeding: WeightScale,
    pub inertia_exponent: i32,
    pub inertia_unit: f64,
}

impl<'a> Prepared<'a> {
    /// Validates `data`, `params` and `sample_weight` (typed errors) and derives the scales.
    pub(super) fn new(
        params: &KMeansParams,
        data: &MatrixView<'a>,
        sample_weight: Option<&[f32]>,
    ) -> Result<Self> {
        data.validate("the data")?;
        let (n, d) = (data.rows(), data.cols());
        params.check(n, d)?;
        let weights = match sample_weight {
            Some(w) => Weighting::new(w, n)?,
            None => Weighting::uniform(n),
        };
        weights.check_k(params.k)?;
        let cosine = params.metric == Metric::Cosine;
        let data = if cosine {
            data.normalized("the data")?
        } else {
            data.clone()
        };
        let init_centroids = init_centroids(params, d)?;
        let total = weights.total();
        let max_abs = max_abs(&data, &weights);
        let scales: Vec<i32> = max_abs
            .iter()
            .map(|&m| scale_exponent(m, total as usize))
            .collect();
        let seeding = init::weight_scale(&max_abs, total, params.metric);
        // Centroids are means of rows with weight, those rows, or the given ones.
        let mut reach = max_abs;
        if let Some(c) = &init_centroids {
            for row in c.chunks_exact(d) {
                reach
                    .iter_mut()
                    .zip(row)
                    .for_each(|(m, v)| *m = m.max(v.abs()));
            }
        }
        let inertia_exponent = inertia_exponent(distance_bound(&reach, params.metric), total);
        // Spherical k-means' distances are 2·(1 − cos).
        let halve = if cosine { 1 } else { 0 };
        let inertia_unit = inv_pow2_f64(inertia_exponent + weights.shift() + halve);
        Ok(Prepared {
            data,
            weights,
            init_centroids,
            scales,
            seeding,
            inertia_exponent,
            inertia_unit,
        })
    }

    /// `params.tol` times the weighted mean per-feature variance: a pass over every row unless
    /// the tolerance is absolute.
    pub(super) fn tol(&self, params: &KMeansParams) -> f64 {
        params.tol_for(|| mean_variance(&self.data, &self.weights, &self.scales))
    }

    /// The backend's view of this fit with `k` clusters.
    pub(super) fn spec(&self, params: &KMeansParams) -> LloydSpec<'_> {
        LloydSpec {
            k: params.k,
            metric: params.metric,
            precision: params.precision,
            scales: self.scales.clone(),
            inertia_exponent: self.inertia_exponent,
            inertia_unit: self.inertia_unit,
            weights: self.weights.units(),
        }
    }
}

/// Per-column largest magnitude (for the fixed-point scales) and mean variance (for `tol`) of
/// unweighted rows, as [`Prepared::new`] derives them: for mini-batch k-means.
pub(super) struct ColumnSummary {
    pub(super) max_abs: Vec<f32>,
    pub(super) mean_variance: f64,
}

impl ColumnSummary {
    pub(super) fn of(data: &MatrixView<'_>) -> Self {
        let weights = Weighting::uniform(data.rows());
        let max_abs = max_abs(data, &weights);
        let scales: Vec<i32> = max_abs
            .iter()
            .map(|&m| scale_exponent(m, data.rows()))
            .collect();
        let mean_variance = mean_variance(data, &weights, &scales);
        ColumnSummary {
            max_abs,
            mean_variance,
        }
    }
}

/// The initial centroids of [`Init::Centroids`] (unit rows for cosine), `k × d`.
pub(crate) fn init_centroids(params: &KMeansParams, d: usize) -> Result<Option<Vec<f32>>> {
    Ok(match &params.init {
        Init::Centroids(c) if params.metric == Metric::Cosine => Some(
            MatrixView::new(c, params.k, d)?
                .normalized("the initial centroids")?
                .as_slice()
                .to_vec(),
        ),
        Init::Centroids(c) => Some(c.clone()),
        _ => None,
    })
}

/// The largest distance (as the backend reports it) between points and centroids whose
/// coordinates are at most `reach` per column; f32 rounding may add a little, which
/// [`inertia_exponent`] leaves room for.
pub(crate) fn distance_bound(reach: &[f32], metric: Metric) -> f64 {
    match metric {
        Metric::L2 => reach.iter().map(|&m| 4.0 * m as f64 * m as f64).sum(),
        Metric::L1 => reach.iter().map(|&m| 2.0 * m as f64).sum(),
        // 2·(1 − cos) of unit rows.
        Metric::Cosine => 4.0,
    }
}

/// Per-column largest magnitude over the rows with weight.
fn max_abs(data: &MatrixView<'_>, weights: &Weighting) -> Vec<f32> {
    let d = data.cols();
    data.as_slice()
        .par_chunks(crate::backend::vocab::CHUNK * d)
        .enumerate()
        .map(|(ci, rows)| {
            let mut m = vec![0f32; d];
            for (r, row) in rows.chunks_exact(d).enumerate() {
                if weights.is_positive(ci * crate::backend::vocab::CHUNK + r) {
                    m.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
                }
            }
            m
        })
        .reduce(
            || vec![0f32; d],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| *a = a.max(*b));
                a
            },
        )
}

/// The weighted mean over the columns of their variance (as scikit-learn's `tol` uses it), from
/// the exact integer moments `Σ units · q` and `Σ units · q²` of the fixed-point values `q` under
/// `scales` (which leave room for the total units, so both fit in 128 bits): the same result in
/// any order of the rows' additions, and for integer weights the same as for repeated rows.
fn mean_variance(data: &MatrixView<'_>, weights: &Weighting, scales: &[i32]) -> f64 {
    let (first, second) = column_moments(data, weights.units(), scales);
    variance_of_moments(&first, &second, weights.total(), scales)
}

/// Per-column `Σ units · q` and `Σ units · q²` of the rows' fixed-point values `q` under
/// `scales` (`units`: one per row, `None`: one each), on the rayon threads a chunk of rows each:
/// integers, so any split of the rows adds up to the same.
pub(crate) fn column_moments(
    data: &MatrixView<'_>,
    units: Option<&[f32]>,
    scales: &[i32],
) -> (Vec<i128>, Vec<i128>) {
    let d = data.cols();
    let chunk = crate::backend::vocab::CHUNK;
    let factors: Vec<f32> = scales.iter().map(|&s| pow2_f32(s)).collect();
    let zero = || Moments {
        first: vec![0; d],
        second: vec![0; d],
    };
    let sums = data
        .as_slice()
        .par_chunks(chunk * d)
        .enumerate()
        .map(|(ci, rows)| {
            let mut m = zero();
            let units = units.map(|u| &u[ci * chunk..ci * chunk + rows.len() / d]);
            m.add_rows(rows, units, &factors);
            m
        })
        .reduce(zero, |mut a, b| {
            a.first.iter_mut().zip(&b.first).for_each(|(a, b)| *a += b);
            a.second
                .iter_mut()
                .zip(&b.second)
                .for_each(|(a, b)| *a += b);
            a
        });
    (sums.first, sums.second)
}

/// The mean over the columns of their variance from the exact moments `Σ units · q` (`first`)
/// and `Σ units · q²` (`second`) of `total` units under `scales`: what [`Prepared::new`] makes
/// `tol` from, and what a sharded fit makes it from with the moments its shards add up.
pub(crate) fn variance_of_moments(
    first: &[i128],
    second: &[i128],
    total: u64,
    scales: &[i32],
) -> f64 {
    let d = first.len();
    let total = total as f64;
    let variance: f64 = (0..d)
        .map(|j| {
            let mean = first[j] as f64 / total;
            let unit = inv_pow2_f64(scales[j]);
            ((second[j] as f64 / total - mean * mean) * unit * unit).max(0.0)
        })
        .sum();
    variance / d as f64
}

/// Per-column `Σ units · q` and `Σ units · q²`.
struct Moments {
    first: Vec<i128>,
    second: Vec<i128>,
}

impl Moments {
    /// Adds the rows of `rows` with units (`None`: one each; rows without units are skipped).
    fn add_rows(&mut self, rows: &[f32], units: Option<&[f32]>, factors: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("sse4.1") {
            // SAFETY: the feature was just detected.
            return unsafe { self.add_rows_sse41(rows, units, factors) };
        }
        self.add_rows_generic(rows, units, factors)
    }

    /// [`Moments::add_rows_generic`] with SSE4.1's one-instruction rounding (see
    /// `backend::cpu::kmeans::accumulate`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.1")]
    fn add_rows_sse41(&mut self, rows: &[f32], units: Option<&[f32]>, factors: &[f32]) {
        self.add_rows_generic(rows, units, factors)
    }

    #[inline(always)]
    fn add_rows_generic(&mut self, rows: &[f32], units: Option<&[f32]>, factors: &[f32]) {
        for (r, row) in rows.chunks_exact(factors.len()).enumerate() {
            let u = weight_units(units.map(|u| u[r]));
            if u == 0 {
                continue;
            }
            for (j, (&v, &f)) in row.iter().zip(factors).enumerate() {
                let q = to_fixed(v, f);
                // |u·q| ≤ 2^61: the bound of the centroid sums.
                let uq = (u * q) as i128;
                self.first[j] += uq;
                self.second[j] += uq * q as i128;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variance_matches_the_plain_formula_and_repetition() {
        let x = [1.0f32, 10.0, 2.0, 20.0, 4.0, -5.0];
        let data = MatrixView::new(&x, 3, 2).unwrap();
        let w = Weighting::uniform(3);
        let scales: Vec<i32> = [4.0f32, 20.0]
            .iter()
            .map(|&m| scale_exponent(m, 3))
            .collect();
        let got = mean_variance(&data, &w, &scales);
        let var = |v: &[f64]| {
            let m = v.iter().sum::<f64>() / v.len() as f64;
            v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
        };
        let want = (var(&[1.0, 2.0, 4.0]) + var(&[10.0, 20.0, -5.0])) / 2.0;
        assert!((got - want).abs() <= 1e-12 * want, "{got} {want}");

        // Weights 2, 0, 1 against the rows repeated.
        let weighted = Weighting::new(&[2.0, 0.0, 1.0], 3).unwrap();
        let repeated = [1.0f32, 10.0, 1.0, 10.0, 4.0, -5.0];
        let rep = MatrixView::new(&repeated, 3, 2).unwrap();
        let scales: Vec<i32> = [4.0f32, 10.0]
            .iter()
            .map(|&m| scale_exponent(m, 3))
            .collect();
        assert_eq!(
            mean_variance(&data, &weighted, &scales).to_bits(),
            mean_variance(&rep, &Weighting::uniform(3), &scales).to_bits()
        );
        assert_eq!(
            max_abs(&data, &weighted),
            [4.0, 10.0],
            "zero-weight rows left out"
        );
    }
}
