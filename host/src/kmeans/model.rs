//! A fitted k-means model.

use super::{Metric, Stop};
use crate::backend::{LloydSpec, SPHERICAL_POINT_SQ_NORM};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::math::{assign_distance, assign_score, assign_step, sq_norm};
use ndarray::Array2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// The result of [`super::KMeansParams::fit`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KMeansModel {
    /// Number of clusters.
    pub k: usize,
    /// Dimensions of every point.
    pub d: usize,
    /// The assignment metric the model was fitted with.
    pub metric: Metric,
    /// `k × d` centroids, row-major.
    pub centroids: Vec<f32>,
    /// Label of every training point (not saved with the model).
    #[serde(skip)]
    pub labels: Vec<u32>,
    /// Points per cluster (whatever their weight).
    pub cluster_sizes: Vec<u32>,
    /// Sum of the points' (weighted) distances to their centroids: squared for L2, `1 − cos`
    /// for cosine.
    pub inertia: f64,
    /// Lloyd iterations of the returned run.
    pub n_iter: usize,
    /// Whether the run stopped on tol or unchanged labels rather than max_iter.
    pub converged: bool,
    /// Why the returned run stopped (`None` after a `partial_fit` step, which has no end, and
    /// for a model read from a file).
    #[serde(skip)]
    pub stop: Option<Stop>,
    /// The backend that fitted the model.
    pub device: String,
}

impl KMeansModel {
    /// Centroid `c`.
    pub fn centroid(&self, c: usize) -> &[f32] {
        &self.centroids[c * self.d..(c + 1) * self.d]
    }

    /// The centroids as a `k × d` array.
    pub fn centroids_array(&self) -> Array2<f32> {
        Array2::from_shape_vec((self.k, self.d), self.centroids.clone()).expect("k × d values")
    }

    /// Nearest centroid of every row of `x`, computed on `device` (`Auto`: see
    /// [`Device::for_pairs`]; for cosine: the centroid of
    /// largest inner product with the row scaled to unit norm; a row of norm 0 is an
    /// [`Error::ZeroVector`]).
    pub fn predict_on<'a>(&self, x: impl Into<MatrixView<'a>>, device: Device) -> Result<Vec<u32>> {
        let x = self.input(x.into())?;
        let pairs = x.rows() as f64 * self.k as f64;
        let backend = device.for_pairs(pairs, self.d).backend()?;
        let spec = LloydSpec::predict(self.k, self.d, self.metric);
        let mut lloyd = backend.lloyd(&x, &spec)?;
        lloyd.set_centroids(&self.centroids)?;
        lloyd.assign()?;
        lloyd.labels()
    }

    /// Nearest centroid of every row of `x` ([`Device::Auto`]).
    pub fn predict<'a>(&self, x: impl Into<MatrixView<'a>>) -> Result<Vec<u32>> {
        self.predict_on(x, Device::Auto)
    }

    /// Distance of every row of `x` to every centroid (`n × k`): Euclidean for an L2 model (as
    /// scikit-learn's `transform`), Manhattan for an L1 model, the cosine distance `1 − cos`
    /// for a cosine model (rows of norm 0 are an [`Error::ZeroVector`]).
    pub fn transform<'a>(&self, x: impl Into<MatrixView<'a>>) -> Result<Array2<f32>> {
        let x = self.input(x.into())?;
        let (n, k) = (x.rows(), self.k);
        let metric = self.metric.assign();
        let cosine = self.metric == Metric::Cosine;
        let c_sq: Vec<f32> = match cosine {
            true => vec![0.0; k],
            false => self.centroids.chunks_exact(self.d).map(sq_norm).collect(),
        };
        let mut out = vec![0f32; n * k];
        // The same arithmetic as the assignment, so the smallest entry of a row is its label
        // (up to ties that rounding makes after the assignment's comparison).
        out.par_chunks_mut(k).enumerate().for_each(|(i, row)| {
            let x = x.row(i);
            let x_sq = match cosine {
                true => SPHERICAL_POINT_SQ_NORM,
                false => sq_norm(x),
            };
            for (c, v) in row.iter_mut().enumerate() {
                let acc = x
                    .iter()
                    .zip(self.centroid(c))
                    .fold(0.0, |a, (&p, &q)| assign_step(metric, a, p, q));
                let dist = assign_distance(metric, x_sq, assign_score(metric, acc, c_sq[c]));
                *v = match self.metric {
                    Metric::L2 => dist.sqrt(),
                    Metric::L1 => dist,
                    // 2·(1 − cos), halved exactly.
                    Metric::Cosine => dist / 2.0,
                };
            }
        });
        Ok(Array2::from_shape_vec((n, k), out).expect("n × k values"))
    }

    /// Validates `x` against the model; for cosine, its rows scaled to unit norm.
    fn input<'a>(&self, x: MatrixView<'a>) -> Result<MatrixView<'a>> {
        x.validate("the input")?;
        x.expect_cols("the input", self.d)?;
        if self.centroids.len() != self.k * self.d {
            return Err(Error::invalid(
                "model",
                "centroids do not hold k × d values",
            ));
        }
        match self.metric {
            Metric::Cosine => x.normalized("the input"),
            _ => Ok(x),
        }
    }
}
