//! kNN regression: the prediction is the average of the k nearest training rows' targets.
//!
//! # Averages (the same bits on the CPU and the GPU)
//! * [`Weights::Uniform`]: the plain mean of the k neighbours' targets.
//! * [`Weights::Distance`]: a neighbour at distance `d` weighs `1 / d` (as scikit-learn). If any
//!   neighbour is at distance 0, only the neighbours at distance 0 count, equally.
//! * With sample weights ([`KnnRegressor::with_sample_weight`]) each neighbour's weight above is
//!   multiplied by its sample weight; when that leaves a query no weight at all, its neighbours
//!   count as without sample weights.
//! * The neighbours come from [`KnnIndex::search`] (nearest first, equal distances by training
//!   index), which is identical on both devices; the average is then taken on the host in that
//!   order, accumulated in `f64` and rounded once to `f32`, so the predictions are identical too.

use super::{KnnIndex, Selection, Weights, check_k};
use crate::device::Device;
use crate::distances::DistanceMetric;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use ndarray::Array2;
use rayon::prelude::*;

/// A fitted kNN regressor: the training rows stay resident on the device, their targets on the
/// host.
#[derive(Debug)]
pub struct KnnRegressor {
    index: KnnIndex,
    /// `rows × outputs` targets, row-major.
    targets: Vec<f32>,
    /// Every training row's sample weight; `None`: one each.
    sample_weight: Option<Vec<f32>>,
    outputs: usize,
    k: usize,
    weights: Weights,
}

/// The checks of [`KnnRegressor::fit`] that do not need the index.
fn check_targets(
    targets: &MatrixView<'_>,
    rows: usize,
    k: usize,
    weights: Weights,
    metric: DistanceMetric,
) -> Result<()> {
    if targets.rows() != rows {
        return Err(Error::TargetCount {
            targets: targets.rows(),
            rows,
        });
    }
    targets.validate("the targets")?;
    check_k(k, rows)?;
    super::check_weights(weights, metric)
}

impl KnnRegressor {
    /// Keeps `train` (one row per sample) with `targets` (one row of outputs per training row;
    /// a single output is an `n × 1` matrix) for `k`-nearest-neighbour averages under `metric`,
    /// in an index made by [`KnnIndex::new`] (see [`KnnRegressor::from_index`]).
    ///
    /// Errors: empty or non-finite data or targets, target rows ≠ training rows
    /// ([`Error::TargetCount`]), `k = 0` or `k > rows`, and distance weights with the inner
    /// product (whose "distances" can be negative).
    pub fn fit<'a, 't>(
        train: impl Into<MatrixView<'a>>,
        targets: impl Into<MatrixView<'t>>,
        k: usize,
        weights: Weights,
        metric: DistanceMetric,
        device: Device,
    ) -> Result<KnnRegressor> {
        let (train, targets) = (train.into(), targets.into());
        // Checked before the training rows go to the device.
        train.validate("the training data")?;
        check_targets(&targets, train.rows(), k, weights, metric)?;
        let index = KnnIndex::new(&train, metric, device)?;
        Self::from_index(index, targets, k, weights)
    }

    /// A regressor over the rows of `index` (e.g. one made with
    /// [`KnnIndex::with_memory_budget`]), with `targets` (a row per index row); the errors of
    /// [`KnnRegressor::fit`].
    pub fn from_index<'t>(
        index: KnnIndex,
        targets: impl Into<MatrixView<'t>>,
        k: usize,
        weights: Weights,
    ) -> Result<KnnRegressor> {
        let targets = targets.into();
        check_targets(&targets, index.len(), k, weights, index.metric())?;
        Ok(KnnRegressor {
            index,
            targets: targets.as_slice().to_vec(),
            sample_weight: None,
            outputs: targets.cols(),
            k,
            weights,
        })
    }

    /// Weighs every training row by its sample weight in the averages (one per training row,
    /// finite, ≥ 0, not all zero; else [`Error::SampleWeightCount`],
    /// [`Error::InvalidSampleWeight`] naming the row, or [`Error::ZeroSampleWeights`]).
    pub fn with_sample_weight(mut self, sample_weight: &[f32]) -> Result<KnnRegressor> {
        crate::sample_weight::check(sample_weight, self.index.len())?;
        self.sample_weight = Some(sample_weight.to_vec());
        Ok(self)
    }

    /// Uses `selection` for the neighbour search (default [`Selection::Auto`]).
    pub fn with_selection(mut self, selection: Selection) -> KnnRegressor {
        self.index = self.index.with_selection(selection);
        self
    }

    /// Caps the memory of a prediction's query batches (see [`KnnIndex::with_memory_limit`]).
    pub fn with_memory_limit(mut self, max_bytes: Option<usize>) -> KnnRegressor {
        self.index = self.index.with_memory_limit(max_bytes);
        self
    }

    /// Number of outputs per prediction (columns of the targets).
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Neighbours per prediction.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The weighting of the neighbours.
    pub fn weights(&self) -> Weights {
        self.weights
    }

    /// The index of the training rows.
    pub fn index(&self) -> &KnnIndex {
        &self.index
    }

    /// Makes ahead what a first prediction of `queries` rows needs on the GPU: see
    /// [`KnnIndex::prepare`].
    pub fn prepare(&self, queries: usize) -> Result<()> {
        self.index.prepare(queries, self.k)
    }

    /// The predicted targets of every query row (`queries × outputs()`).
    pub fn predict<'q>(&self, queries: impl Into<MatrixView<'q>>) -> Result<Array2<f32>> {
        let found = self.index.search(queries, self.k)?;
        let (t, k) = (self.outputs, self.k);
        let mut out = Array2::<f32>::zeros((found.indices.nrows(), t));
        let standard = "search results and a fresh array are in standard layout";
        // A few tasks of a megabyte or more of neighbours (`host_tasks`), not one per query.
        let per_task = crate::host_tasks::items_per_task(out.nrows(), 8 * k + 4 * t, 1);
        out.as_slice_mut()
            .expect(standard)
            .par_chunks_mut(t)
            .zip(found.indices.as_slice().expect(standard).par_chunks(k))
            .zip(found.distances.as_slice().expect(standard).par_chunks(k))
            .with_min_len(per_task)
            .for_each(|((row, indices), distances)| self.average(indices, distances, row));
        Ok(out)
    }

    /// One query's weighted mean of its neighbours' targets, nearest first, in `f64`.
    fn average(&self, indices: &[u32], distances: &[f32], out: &mut [f32]) {
        let (mut sum, mut total) =
            self.weighted_sum(indices, distances, self.sample_weight.as_deref());
        if total == 0.0 {
            // No neighbour that counts has weight: they count as without sample weights.
            (sum, total) = self.weighted_sum(indices, distances, None);
        }
        for (o, s) in out.iter_mut().zip(sum) {
            *o = (s / total) as f32;
        }
    }

    /// The weighted sum of the neighbours' targets and the total weight.
    fn weighted_sum(
        &self,
        indices: &[u32],
        distances: &[f32],
        sample: Option<&[f32]>,
    ) -> (Vec<f64>, f64) {
        let t = self.outputs;
        let exact = self.weights == Weights::Distance && distances.contains(&0.0);
        let mut sum = vec![0f64; t];
        let mut total = 0f64;
        for (&i, &d) in indices.iter().zip(distances) {
            let w = match (self.weights, exact) {
                (Weights::Uniform, _) => 1.0,
                (Weights::Distance, true) => f64::from(u8::from(d == 0.0)),
                (Weights::Distance, false) => 1.0 / f64::from(d),
            } * sample.map_or(1.0, |s| f64::from(s[i as usize]));
            let target = &self.targets[i as usize * t..][..t];
            for (s, &y) in sum.iter_mut().zip(target) {
                *s += w * f64::from(y);
            }
            total += w;
        }
        (sum, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(targets: &[f32], outputs: usize, k: usize, weights: Weights) -> KnnRegressor {
        // x = 0, 1, 2, 10.
        let x = [0.0f32, 1.0, 2.0, 10.0];
        let train = MatrixView::new(&x, 4, 1).unwrap();
        let targets = MatrixView::new(targets, 4, outputs).unwrap();
        KnnRegressor::fit(train, targets, k, weights, DistanceMetric::L1, Device::Cpu).unwrap()
    }

    fn predict(reg: &KnnRegressor, q: &[f32]) -> Vec<f32> {
        let q = MatrixView::new(q, q.len(), 1).unwrap();
        reg.predict(q).unwrap().into_iter().collect()
    }

    #[test]
    fn uniform_is_the_mean_of_the_k_nearest() {
        let reg = fit(&[1.0, 2.0, 6.0, 100.0], 1, 3, Weights::Uniform);
        assert_eq!(predict(&reg, &[0.4, 9.0]), vec![3.0, 36.0]);
    }

    #[test]
    fn distance_weights_are_inverse_distances() {
        let reg = fit(&[1.0, 2.0, 6.0, 100.0], 1, 2, Weights::Distance);
        // At 0.25: distances 0.25 and 0.75 → weights 4 and 4/3 → (4·1 + 4/3·2) / (16/3) = 1.25.
        assert_eq!(predict(&reg, &[0.25]), vec![1.25]);
    }

    #[test]
    fn zero_distance_neighbours_count_alone() {
        // Rows 0 and 1 both sit at x = 0 (targets 1 and 3); row 2 at x = 1.
        let x = [0.0f32, 0.0, 1.0];
        let train = MatrixView::new(&x, 3, 1).unwrap();
        let y = MatrixView::new(&[1.0, 3.0, 50.0], 3, 1).unwrap();
        let reg = KnnRegressor::fit(
            train,
            y,
            3,
            Weights::Distance,
            DistanceMetric::Euclidean,
            Device::Cpu,
        )
        .unwrap();
        assert_eq!(predict(&reg, &[0.0]), vec![2.0]);
    }

    #[test]
    fn multi_output_averages_every_column() {
        let y = [1.0, -1.0, 3.0, -3.0, 5.0, -5.0, 0.0, 0.0];
        let reg = fit(&y, 2, 2, Weights::Uniform);
        assert_eq!(reg.outputs(), 2);
        assert_eq!(predict(&reg, &[0.1]), vec![2.0, -2.0]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let x = [0.0f32, 1.0, 2.0];
        let train = MatrixView::new(&x, 3, 1).unwrap();
        let fit = |y: &[f32], k, w, m| {
            let y = MatrixView::new(y, y.len(), 1).unwrap();
            KnnRegressor::fit(&train, y, k, w, m, Device::Cpu)
        };
        let (u, l1) = (Weights::Uniform, DistanceMetric::L1);
        assert!(matches!(
            fit(&[1.0, 2.0], 1, u, l1),
            Err(Error::TargetCount {
                targets: 2,
                rows: 3
            })
        ));
        assert!(matches!(
            fit(&[1.0, f32::NAN, 2.0], 1, u, l1),
            Err(Error::NonFinite { row: 1, .. })
        ));
        for k in [0, 4] {
            assert!(matches!(
                fit(&[1.0, 2.0, 3.0], k, u, l1),
                Err(Error::InvalidParameter { name: "k", .. })
            ));
        }
        assert!(matches!(
            fit(
                &[1.0, 2.0, 3.0],
                1,
                Weights::Distance,
                DistanceMetric::InnerProduct
            ),
            Err(Error::InvalidParameter {
                name: "weights",
                ..
            })
        ));
    }
}
