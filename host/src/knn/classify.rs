//! kNN classification: the k nearest training rows vote for their labels.
//!
//! # Votes and ties (the same on the CPU and the GPU)
//! * [`Weights::Uniform`]: every neighbour casts one vote.
//! * [`Weights::Distance`]: a neighbour at distance `d` casts `d₁ / d`, where `d₁` is the
//!   query's nearest distance (proportional to `1 / d`; the common factor changes neither the
//!   winner nor the probabilities). If the nearest distance is 0, only the neighbours at distance
//!   0 vote, one vote each. Weights are summed as 64-bit fixed-point integers, so the sums are
//!   exact and independent of the order in which the GPU's atomics land.
//! * The class with the most votes wins. Among tied classes, by default ([`TieBreak::Nearest`])
//!   the one whose nearest member ranks first among the neighbours (nearest distance, then
//!   lowest training index); with [`TieBreak::SmallestLabel`] (scikit-learn's rule) the smallest
//!   label: the winner is then the first class with the largest share of
//!   [`KnnClassifier::predict_proba`], so `predict` is always the argmax of the probabilities.
//! * With sample weights ([`KnnClassifier::with_sample_weight`]) every vote above is multiplied
//!   by the neighbour's weight over the largest training weight; a neighbour of weight 0 casts
//!   none. (When no neighbour of a query has weight, every class has 0 votes and every
//!   probability is 0: the class of the nearest neighbour wins by the nearest-first rule, the
//!   smallest label by the other.)
//! * [`KnnClassifier::predict_proba`] gives every class its share of the vote total.

use super::{KnnIndex, Selection, check_k};
use crate::device::Device;
use crate::distances::DistanceMetric;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use ndarray::Array2;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How the neighbours' votes are weighted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Weights {
    /// One vote per neighbour.
    #[default]
    Uniform,
    /// Votes proportional to the inverse distance (see the module documentation).
    Distance,
}

impl fmt::Display for Weights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Weights::Uniform => "uniform",
            Weights::Distance => "distance",
        })
    }
}

impl FromStr for Weights {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "uniform" => Ok(Weights::Uniform),
            "distance" => Ok(Weights::Distance),
            _ => Err(Error::invalid(
                "weights",
                format!("'{s}' is not one of uniform, distance"),
            )),
        }
    }
}

/// Which class wins a tie of votes (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TieBreak {
    /// The class whose nearest member ranks first among the neighbours.
    #[default]
    Nearest,
    /// The smallest label, as scikit-learn's `KNeighborsClassifier`.
    SmallestLabel,
}

impl fmt::Display for TieBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TieBreak::Nearest => "nearest",
            TieBreak::SmallestLabel => "smallest-label",
        })
    }
}

impl FromStr for TieBreak {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "nearest" => Ok(TieBreak::Nearest),
            "smallest-label" => Ok(TieBreak::SmallestLabel),
            _ => Err(Error::invalid(
                "tie_break",
                format!("'{s}' is not one of nearest, smallest-label"),
            )),
        }
    }
}

/// A fitted kNN classifier: the training rows stay resident on the device with their labels.
#[derive(Debug)]
pub struct KnnClassifier {
    index: KnnIndex,
    classes: Vec<u32>,
    k: usize,
    weights: Weights,
    tie_break: TieBreak,
}

/// The checks of [`KnnClassifier::fit`] that do not need the index.
fn check_labels(
    labels: &[u32],
    rows: usize,
    k: usize,
    weights: Weights,
    metric: DistanceMetric,
) -> Result<()> {
    if labels.len() != rows {
        return Err(Error::LabelCount {
            labels: labels.len(),
            rows,
        });
    }
    check_k(k, rows)?;
    super::check_weights(weights, metric)
}

impl KnnClassifier {
    /// Keeps `train` (one row per sample) with `labels` (one per row) for `k`-nearest-neighbour
    /// votes under `metric`, in an index made by [`KnnIndex::new`] (see
    /// [`KnnClassifier::from_index`]).
    ///
    /// Errors: empty or non-finite data, `labels.len() ≠ rows` ([`Error::LabelCount`]),
    /// `k = 0` or `k > rows`, and distance weights with the inner product (whose "distances"
    /// can be negative).
    pub fn fit<'a>(
        train: impl Into<MatrixView<'a>>,
        labels: &[u32],
        k: usize,
        weights: Weights,
        metric: DistanceMetric,
        device: Device,
    ) -> Result<KnnClassifier> {
        let train = train.into();
        // Checked before the training rows go to the device.
        train.validate("the training data")?;
        check_labels(labels, train.rows(), k, weights, metric)?;
        Self::from_index(KnnIndex::new(&train, metric, device)?, labels, k, weights)
    }

    /// A classifier over the rows of `index` (e.g. one made with
    /// [`KnnIndex::with_memory_budget`]), with `labels` (one per row); the errors of
    /// [`KnnClassifier::fit`].
    pub fn from_index(
        mut index: KnnIndex,
        labels: &[u32],
        k: usize,
        weights: Weights,
    ) -> Result<KnnClassifier> {
        check_labels(labels, index.len(), k, weights, index.metric())?;
        let mut classes = labels.to_vec();
        classes.sort_unstable();
        classes.dedup();
        let ids: Vec<u32> = labels
            .iter()
            .map(|l| classes.binary_search(l).expect("a known label") as u32)
            .collect();
        index.inner_mut().set_labels(&ids, classes.len())?;
        Ok(KnnClassifier {
            index,
            classes,
            k,
            weights,
            tie_break: TieBreak::default(),
        })
    }

    /// Decides ties of votes by `tie_break` (default [`TieBreak::Nearest`]).
    pub fn with_tie_break(mut self, tie_break: TieBreak) -> KnnClassifier {
        self.tie_break = tie_break;
        self
    }

    /// The rule that decides ties of votes.
    pub fn tie_break(&self) -> TieBreak {
        self.tie_break
    }

    /// Weighs every training row's vote by its sample weight (one per training row, finite,
    /// ≥ 0, not all zero; else [`Error::SampleWeightCount`], [`Error::InvalidSampleWeight`]
    /// naming the row, or [`Error::ZeroSampleWeights`]). See the module documentation.
    pub fn with_sample_weight(mut self, sample_weight: &[f32]) -> Result<KnnClassifier> {
        crate::sample_weight::check(sample_weight, self.index.len())?;
        let relative = crate::sample_weight::relative(sample_weight);
        self.index.inner_mut().set_row_weights(&relative)?;
        Ok(self)
    }

    /// Uses `selection` for the neighbour search (default [`Selection::Auto`]).
    pub fn with_selection(mut self, selection: Selection) -> KnnClassifier {
        self.index = self.index.with_selection(selection);
        self
    }

    /// Caps the memory of a prediction's query batches (see [`KnnIndex::with_memory_limit`]).
    pub fn with_memory_limit(mut self, max_bytes: Option<usize>) -> KnnClassifier {
        self.index = self.index.with_memory_limit(max_bytes);
        self
    }

    /// The distinct training labels, ascending: the columns of [`KnnClassifier::predict_proba`].
    pub fn classes(&self) -> &[u32] {
        &self.classes
    }

    /// Neighbours per vote.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The vote weighting.
    pub fn weights(&self) -> Weights {
        self.weights
    }

    /// The index of the training rows.
    pub fn index(&self) -> &KnnIndex {
        &self.index
    }

    /// The predicted label of every query row.
    pub fn predict<'q>(&self, queries: impl Into<MatrixView<'q>>) -> Result<Vec<u32>> {
        let votes = self.vote(&queries.into(), false)?;
        Ok(votes
            .classes
            .iter()
            .map(|&c| self.classes[c as usize])
            .collect())
    }

    /// Every query row's share of the vote per class (`queries × classes().len()`, rows sum to 1).
    pub fn predict_proba<'q>(&self, queries: impl Into<MatrixView<'q>>) -> Result<Array2<f32>> {
        let queries = queries.into();
        let votes = self.vote(&queries, true)?;
        Ok(
            Array2::from_shape_vec((queries.rows(), self.classes.len()), votes.proba)
                .expect("rows × classes shares"),
        )
    }

    /// Makes ahead what a first prediction of `queries` rows needs on the GPU (with `proba`, of
    /// probabilities): see [`KnnIndex::prepare`].
    pub fn prepare(&self, queries: usize, proba: bool) -> Result<()> {
        self.index.prepare_for(queries, self.k, Some(proba))
    }

    fn vote(&self, queries: &MatrixView<'_>, proba: bool) -> Result<crate::backend::Votes> {
        self.index.check_shape(queries, self.k)?;
        queries.checked_during("the queries", || {
            self.index.inner().vote(
                queries,
                self.k,
                self.index.selection(),
                self.index.max_bytes(),
                kernels_gpu::knn::VoteRule {
                    weighted: self.weights == Weights::Distance,
                    smallest_label: self.tie_break == TieBreak::SmallestLabel,
                },
                proba,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> (Vec<f32>, Vec<u32>) {
        // x = 0, 1, 2 → class 7; x = 10, 11 → class 3.
        (vec![0.0, 1.0, 2.0, 10.0, 11.0], vec![7, 7, 7, 3, 3])
    }

    #[test]
    fn predicts_and_gives_probabilities() {
        let (x, y) = line();
        let train = MatrixView::new(&x, 5, 1).unwrap();
        let clf = KnnClassifier::fit(
            &train,
            &y,
            3,
            Weights::Uniform,
            DistanceMetric::Euclidean,
            Device::Cpu,
        )
        .unwrap();
        assert_eq!(clf.classes(), &[3, 7]);
        let q = MatrixView::new(&[0.5, 10.5, 6.0], 3, 1).unwrap();
        assert_eq!(clf.predict(&q).unwrap(), vec![7, 3, 7]);
        let p = clf.predict_proba(&q).unwrap();
        assert_eq!(p.row(0).to_vec(), vec![0.0, 1.0]);
        assert_eq!(p.row(1).to_vec(), vec![2.0 / 3.0, 1.0 / 3.0]);
    }

    #[test]
    fn ties_go_to_the_class_with_the_nearest_member() {
        // Query at 5: neighbours 4 (class 1) and 6 (class 2) at distance 1, 4 has the lower
        // index... put class 2 first in index order to see the rank rule, not the label order.
        let x = [6.0f32, 4.0];
        let y = [2u32, 1];
        let train = MatrixView::new(&x, 2, 1).unwrap();
        let clf = KnnClassifier::fit(
            &train,
            &y,
            2,
            Weights::Uniform,
            DistanceMetric::L1,
            Device::Cpu,
        )
        .unwrap();
        // Equal distances: index 0 (class 2) ranks first.
        assert_eq!(
            clf.predict(MatrixView::new(&[5.0], 1, 1).unwrap()).unwrap(),
            vec![2]
        );
        // Nearer to 4: class 1's member ranks first, still a 1–1 tie.
        assert_eq!(
            clf.predict(MatrixView::new(&[4.9], 1, 1).unwrap()).unwrap(),
            vec![1]
        );
    }

    #[test]
    fn smallest_label_ties_follow_scikit_learn() {
        // Query at 5 between 6 (class 2, index 0) and 4 (class 1): a 1–1 tie goes to class 1
        // whichever member ranks first, and the winner is the argmax of the probabilities.
        let (x, y) = ([6.0f32, 4.0, 20.0], [2u32, 1, 2]);
        let train = MatrixView::new(&x, 3, 1).unwrap();
        for weights in [Weights::Uniform, Weights::Distance] {
            let clf = KnnClassifier::fit(&train, &y, 2, weights, DistanceMetric::L1, Device::Cpu)
                .unwrap()
                .with_tie_break(TieBreak::SmallestLabel);
            assert_eq!(clf.tie_break(), TieBreak::SmallestLabel);
            let q = MatrixView::new(&[5.0, 5.5], 2, 1).unwrap();
            let want = match weights {
                Weights::Uniform => vec![1, 1],
                Weights::Distance => vec![1, 2],
            };
            assert_eq!(clf.predict(&q).unwrap(), want, "{weights}");
            let p = clf.predict_proba(&q).unwrap();
            assert_eq!(p.row(0).to_vec(), vec![0.5, 0.5]);
        }
        assert_eq!(
            "smallest_label".parse::<TieBreak>().unwrap(),
            TieBreak::SmallestLabel
        );
        assert_eq!(
            TieBreak::SmallestLabel
                .to_string()
                .parse::<TieBreak>()
                .unwrap(),
            TieBreak::SmallestLabel
        );
        assert!(matches!(
            "first".parse::<TieBreak>(),
            Err(Error::InvalidParameter {
                name: "tie_break",
                ..
            })
        ));
    }

    #[test]
    fn distance_weights_and_exact_matches() {
        let (x, y) = line();
        let train = MatrixView::new(&x, 5, 1).unwrap();
        let clf = KnnClassifier::fit(
            &train,
            &y,
            5,
            Weights::Distance,
            DistanceMetric::L1,
            Device::Cpu,
        )
        .unwrap();
        // At 10: distance 0 to row 3 → only exact matches vote.
        let p = clf
            .predict_proba(MatrixView::new(&[10.0], 1, 1).unwrap())
            .unwrap();
        assert_eq!(p.row(0).to_vec(), vec![1.0, 0.0]);
        // At 8 uniform votes say 7 (3 of 5); inverse distances favour 3 (1/2 + 1/3 against
        // 1/6 + 1/7 + 1/8).
        let q = MatrixView::new(&[8.0], 1, 1).unwrap();
        assert_eq!(clf.predict(&q).unwrap(), vec![3]);
        let uniform = KnnClassifier::fit(
            &train,
            &y,
            5,
            Weights::Uniform,
            DistanceMetric::L1,
            Device::Cpu,
        )
        .unwrap();
        assert_eq!(uniform.predict(&q).unwrap(), vec![7]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let (x, y) = line();
        let train = MatrixView::new(&x, 5, 1).unwrap();
        let fit =
            |labels: &[u32], k, w, m| KnnClassifier::fit(&train, labels, k, w, m, Device::Cpu);
        assert!(matches!(
            fit(&y[..4], 1, Weights::Uniform, DistanceMetric::L1),
            Err(Error::LabelCount { labels: 4, rows: 5 })
        ));
        assert!(matches!(
            fit(&y, 0, Weights::Uniform, DistanceMetric::L1),
            Err(Error::InvalidParameter { name: "k", .. })
        ));
        assert!(matches!(
            fit(&y, 6, Weights::Uniform, DistanceMetric::L1),
            Err(Error::InvalidParameter { name: "k", .. })
        ));
        assert!(matches!(
            fit(&y, 2, Weights::Distance, DistanceMetric::InnerProduct),
            Err(Error::InvalidParameter {
                name: "weights",
                ..
            })
        ));
        let clf = fit(&y, 2, Weights::Uniform, DistanceMetric::L1).unwrap();
        assert!(matches!(
            clf.predict(MatrixView::new(&[1.0, 2.0], 1, 2).unwrap()),
            Err(Error::DimensionMismatch { .. })
        ));
    }
}
