//! Exact k-nearest-neighbour search ([`KnnIndex`]), classification ([`KnnClassifier`]),
//! regression ([`KnnRegressor`]) and feature scaling ([`Scaler`]).
//!
//! # Order of the neighbours
//! Every query's neighbours come sorted by distance, nearest first ([`DistanceMetric`] turns the
//! inner product and cosine similarity into distances so that this holds for every metric);
//! neighbours at exactly the same distance come by training index, ascending. Distances are the
//! same floats on the CPU and the GPU, so the CPU and the GPU return identical indices.
//!
//! # How the GPU selects the k nearest
//! Distances are computed tile by tile (a few thousand training points × a batch of queries,
//! GEMM-style), and a per-query top-k is merged with every tile, so the queries × training matrix
//! is never stored. Three merges exist ([`Selection`]): k rounds of a parallel minimum; a
//! bitonic sort of the candidates alone, padded to a power of two, then one bitonic merge into
//! the running k; or a radix selection of the k smallest of the running k and the candidates,
//! then a sort of those k alone. [`Selection::Auto`] times the three on a sample of the queries
//! the first time a shape (n, d, k, metric) is searched and remembers the fastest. Streaming covers `k ≤ 2048` ([`MAX_GPU_STREAM_K`]); above that the GPU computes whole
//! distance rows for a batch of queries and sorts them with a global-memory bitonic network
//! (reported as [`Selection::Bitonic`]), so any `k ≤ n` works. Queries are batched to fit the
//! memory budget: what the driver reports free, or [`KnnIndex::with_memory_limit`].
//!
//! On the CPU, [`Selection::KMin`] keeps a bounded heap of the k nearest while the distances
//! stream by and [`Selection::Bitonic`] (as [`Selection::Radix`]) selects and sorts all n keys; `Auto` takes the heap for
//! `k ≤ 64`. All give the same answer.

mod classify;
mod radius;
mod regress;
mod scale;

pub use crate::backend::vocab::{
    AutoReport, AutoSource, KnnLayout, PathTiming, PrefilterReport, REPLICATE_MAX_BYTES, Selection,
};
pub use classify::{KnnClassifier, TieBreak, Weights};
pub use radius::RadiusNeighbors;
pub use regress::KnnRegressor;
pub use scale::{FittedScaler, Scaler};

use crate::backend::KnnSearch;
use crate::device::Device;
use crate::distances::DistanceMetric;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use ndarray::Array2;
use std::fmt;

/// Distance weights need a non-negative distance.
fn check_weights(weights: Weights, metric: DistanceMetric) -> Result<()> {
    if weights == Weights::Distance && !metric.is_non_negative() {
        return Err(Error::invalid(
            "weights",
            format!("distance weights need a non-negative distance, and {metric} is not"),
        ));
    }
    Ok(())
}

/// Largest k that the GPU selects while streaming distance tiles; larger k sort whole rows.
pub const MAX_GPU_STREAM_K: usize = kernels_gpu::knn::MAX_STREAM_K;

/// The k nearest training rows of every query row, their indices of type `I`
/// ([`KnnIndex::search`]: `u32`; [`KnnIndex::search_i64`]: `i64`).
#[derive(Clone, Debug, PartialEq)]
pub struct KnnResult<I = u32> {
    /// `queries × k` training row indices, nearest first (equal distances by index).
    pub indices: Array2<I>,
    /// `queries × k` distances, ascending.
    pub distances: Array2<f32>,
    /// The selection that actually ran (never `Auto`).
    pub selection: Selection,
    /// What the TF32 prefilter did, when it ran (see [`KnnIndex::with_prefilter`]).
    pub prefilter: Option<PrefilterReport>,
}

/// An exact kNN index over a set of training vectors, resident on its device.
pub struct KnnIndex {
    inner: Box<dyn KnnSearch>,
    n: usize,
    d: usize,
    metric: DistanceMetric,
    device: Device,
    selection: Selection,
    max_bytes: Option<usize>,
    prefilter: bool,
    streamed: bool,
}

impl fmt::Debug for KnnIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KnnIndex")
            .field("n", &self.n)
            .field("d", &self.d)
            .field("metric", &self.metric)
            .field("device", &self.device)
            .field("selection", &self.selection)
            .field("max_bytes", &self.max_bytes)
            .field("prefilter", &self.prefilter)
            .field("streamed", &self.streamed)
            .finish()
    }
}

impl KnnIndex {
    /// Copies `train` (non-empty, finite) to `device` (the GPU keeps it resident) within the
    /// default memory budget of [`KnnIndex::with_memory_budget`]. With [`Device::Gpus`] the
    /// set's [`KnnLayout`] says how: every GPU holds all the rows and answers a share of each
    /// search's queries, or a contiguous part of the rows, every search running on all parts at
    /// once and each query's candidates merged by (distance, index). Either way the answer is
    /// one GPU's.
    pub fn new<'a>(
        train: impl Into<MatrixView<'a>>,
        metric: DistanceMetric,
        device: Device,
    ) -> Result<KnnIndex> {
        Self::with_memory_budget(train, metric, device, None)
    }

    /// [`KnnIndex::new`] within `budget` bytes of GPU memory for the training rows and a
    /// search's query batches (`None`: 70 % of what the GPU has free; on a GPU set, per GPU). A training set that does
    /// not fit (`n · 4 · (d + 4)` bytes) stays in host memory, and every search streams it
    /// through the GPU in parts of a quarter of the budget (the next part uploads while this one
    /// is searched), merging each part's k nearest by (distance, index): the same answer, bit
    /// for bit, at the cost of the copies. The CPU has no budget.
    pub fn with_memory_budget<'a>(
        train: impl Into<MatrixView<'a>>,
        metric: DistanceMetric,
        device: Device,
        budget: Option<usize>,
    ) -> Result<KnnIndex> {
        let train = train.into();
        train.validate("the training data")?;
        if train.rows() >= u32::MAX as usize {
            return Err(Error::invalid(
                "training data",
                format!("{} rows; the index holds fewer than 2^32 − 1", train.rows()),
            ));
        }
        let (n, d) = (train.rows(), train.cols());
        let (inner, streamed) = device.knn_index(train, metric.kernel(), budget)?;
        Ok(KnnIndex {
            inner,
            n,
            d,
            metric,
            device,
            selection: Selection::Auto,
            max_bytes: None,
            prefilter: true,
            streamed,
        })
    }

    /// Whether the training rows stay in host memory and stream through the device at every
    /// search (they exceed the memory budget).
    pub fn is_streamed(&self) -> bool {
        self.streamed
    }

    /// How the index spreads over a GPU set: [`KnnLayout::Shard`] or [`KnnLayout::Replicate`]
    /// (what the set's `KnnLayout::Auto` chose); `None` on one device.
    pub fn layout(&self) -> Option<KnnLayout> {
        self.inner.layout()
    }

    /// Allows (default) or forbids the TF32 tensor-core prefilter. Where it applies (GPU of
    /// compute capability ≥ 8.0, squared Euclidean or Euclidean, `k ≤ 2048` and `n` well above
    /// `k`), tensor cores compute approximate distances with a rigorous error bound, only the
    /// training rows that may be among the k nearest get an exact distance, and the answer is
    /// identical to the exact path's (indices and distance bits). Off: every distance is exact
    /// FP32 (the path of every other metric and GPU).
    pub fn with_prefilter(mut self, allowed: bool) -> KnnIndex {
        self.prefilter = allowed;
        self.inner.set_prefilter(allowed);
        self
    }

    /// Uses `selection` for the top-k (default [`Selection::Auto`]).
    pub fn with_selection(mut self, selection: Selection) -> KnnIndex {
        self.selection = selection;
        self
    }

    /// Caps the memory a search uses for its query batches (bytes; `None`: what the device has
    /// free). The training data is not counted.
    pub fn with_memory_limit(mut self, max_bytes: Option<usize>) -> KnnIndex {
        self.max_bytes = max_bytes;
        self
    }

    /// Number of training rows.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the index is empty (never: an index has at least one row).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.d
    }

    /// The metric.
    pub fn metric(&self) -> DistanceMetric {
        self.metric
    }

    /// The device asked for.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The selection asked for.
    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// Makes ahead what a first search of `queries` rows for `k` neighbours needs on the GPU, so
    /// that it costs what later ones do: with [`Selection::Auto`], its choice for `k` (timed on
    /// the first training rows as the queries, unless a search or the user cache has made it),
    /// then the search's device buffers for that path and the page-locked staging buffers.
    /// Later searches of as many rows or fewer reuse the buffers. Does nothing on the CPU, or for
    /// an index over several GPUs or streamed parts.
    pub fn prepare(&self, queries: usize, k: usize) -> Result<()> {
        self.prepare_for(queries, k, None)
    }

    /// [`KnnIndex::prepare`] for a search, or with `vote: Some(proba)` a vote.
    pub(crate) fn prepare_for(&self, queries: usize, k: usize, vote: Option<bool>) -> Result<()> {
        check_k(k, self.n)?;
        (self.inner).prepare(queries, k, self.selection, self.max_bytes, vote)
    }

    /// What [`Selection::Auto`] chose on this index for `k`, and the timings it chose from, once
    /// a search (in this process, or one whose choice the user cache kept) has made the choice;
    /// `None` on the CPU, for a fixed selection's index before any `Auto` search, or for an
    /// index over several GPUs or streamed parts.
    pub fn auto_report(&self, k: usize) -> Option<AutoReport> {
        self.inner.auto_report(k)
    }

    /// Checks `k` and a query matrix's shape against the index; its values are checked while
    /// the search runs ([`MatrixView::checked_during`]).
    pub(crate) fn check_shape(&self, queries: &MatrixView<'_>, k: usize) -> Result<()> {
        check_k(k, self.n)?;
        queries.validate_shape()?;
        queries.expect_cols("the queries", self.d)
    }

    /// The `k` nearest training rows of every row of `queries`, nearest first.
    pub fn search<'q>(&self, queries: impl Into<MatrixView<'q>>, k: usize) -> Result<KnnResult> {
        let queries = queries.into();
        self.check_shape(&queries, k)?;
        let found = queries.checked_during("the queries", || {
            (self.inner).search(&queries, k, self.selection, self.max_bytes)
        })?;
        Ok(result(found, queries.rows(), k))
    }

    /// [`KnnIndex::search`] with `i64` indices (NumPy's `intp`, scikit-learn's index type),
    /// written as such: on the GPU straight from the downloaded answer, elsewhere widened on the
    /// rayon threads in a few large tasks, so that the caller's final array costs no second pass
    /// (one widening through NumPy took 3 ms of a 7 ms search at k = 2048, 1,200 queries).
    pub fn search_i64<'q>(
        &self,
        queries: impl Into<MatrixView<'q>>,
        k: usize,
    ) -> Result<KnnResult<i64>> {
        let queries = queries.into();
        self.check_shape(&queries, k)?;
        let found = queries.checked_during("the queries", || {
            (self.inner).search_i64(&queries, k, self.selection, self.max_bytes)
        })?;
        Ok(result(found, queries.rows(), k))
    }

    pub(crate) fn inner_mut(&mut self) -> &mut dyn KnnSearch {
        self.inner.as_mut()
    }

    pub(crate) fn inner(&self) -> &dyn KnnSearch {
        self.inner.as_ref()
    }

    pub(crate) fn max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }
}

/// A backend's `m × k` answer as a [`KnnResult`].
fn result<I>(found: crate::backend::Neighbours<I>, m: usize, k: usize) -> KnnResult<I> {
    KnnResult {
        indices: Array2::from_shape_vec((m, k), found.indices).expect("m × k indices"),
        distances: Array2::from_shape_vec((m, k), found.distances).expect("m × k distances"),
        selection: found.selection,
        prefilter: found.prefilter,
    }
}

/// `1 ≤ k ≤ n`, as a typed error.
pub(crate) fn check_k(k: usize, n: usize) -> Result<()> {
    if k == 0 {
        return Err(Error::invalid("k", "k must be at least 1"));
    }
    if k > n {
        return Err(Error::invalid(
            "k",
            format!("k = {k} is larger than the number of training rows ({n})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_names_round_trip() {
        for s in [
            Selection::Auto,
            Selection::KMin,
            Selection::Bitonic,
            Selection::Radix,
        ] {
            assert_eq!(s.to_string().parse::<Selection>().unwrap(), s);
            assert_eq!(format!("{s:?}").to_lowercase(), s.to_string());
        }
        assert!("heap".parse::<Selection>().is_err());
    }

    #[test]
    fn i64_indices_are_the_u32_ones_widened() {
        // Duplicates and ties: the order by (distance, index) must survive the index type.
        let train: Vec<f32> = (0..40u32).map(|i| (i % 7) as f32).collect();
        let queries = [0.5f32, 3.0, 6.5];
        let train = MatrixView::new(&train, 40, 1).unwrap();
        let index = KnnIndex::new(train, DistanceMetric::Euclidean, Device::Cpu).unwrap();
        for k in [1, 9, 40] {
            let narrow = index
                .search(MatrixView::new(&queries, 3, 1).unwrap(), k)
                .unwrap();
            let wide = index
                .search_i64(MatrixView::new(&queries, 3, 1).unwrap(), k)
                .unwrap();
            assert_eq!(wide.indices, narrow.indices.mapv(i64::from));
            assert_eq!(wide.distances, narrow.distances);
            assert_eq!(wide.selection, narrow.selection);
        }
    }

    #[test]
    fn cpu_search_sorts_by_distance_then_index() {
        // Points on a line with duplicates: 0, 1, 1, 2, 3, 1.
        let train = [0.0f32, 1.0, 1.0, 2.0, 3.0, 1.0];
        for sel in [
            Selection::KMin,
            Selection::Bitonic,
            Selection::Radix,
            Selection::Auto,
        ] {
            let index = KnnIndex::new(
                MatrixView::new(&train, 6, 1).unwrap(),
                DistanceMetric::L1,
                Device::Cpu,
            )
            .unwrap()
            .with_selection(sel);
            let r = index
                .search(MatrixView::new(&[1.0], 1, 1).unwrap(), 6)
                .unwrap();
            assert_eq!(r.indices.row(0).to_vec(), vec![1, 2, 5, 0, 3, 4]);
            assert_eq!(
                r.distances.row(0).to_vec(),
                vec![0.0, 0.0, 0.0, 1.0, 1.0, 2.0]
            );
            assert_ne!(r.selection, Selection::Auto);
        }
    }

    #[test]
    fn bad_k_and_queries_are_typed_errors() {
        let train = [0.0f32, 1.0, 2.0, 3.0];
        let index = KnnIndex::new(
            MatrixView::new(&train, 2, 2).unwrap(),
            DistanceMetric::Euclidean,
            Device::Cpu,
        )
        .unwrap();
        let q = MatrixView::new(&[0.0, 0.0], 1, 2).unwrap();
        assert!(matches!(
            index.search(&q, 0),
            Err(Error::InvalidParameter { name: "k", .. })
        ));
        assert!(matches!(
            index.search(&q, 3),
            Err(Error::InvalidParameter { name: "k", .. })
        ));
        let q3 = MatrixView::new(&[0.0, 0.0, 0.0], 1, 3).unwrap();
        assert!(matches!(
            index.search(&q3, 1),
            Err(Error::DimensionMismatch { .. })
        ));
        let inf = MatrixView::new(&[0.0, f32::INFINITY], 1, 2).unwrap();
        assert!(matches!(
            index.search(&inf, 1),
            Err(Error::NonFinite { .. })
        ));
        let nan = [f32::NAN, 0.0];
        assert!(matches!(
            KnnIndex::new(
                MatrixView::new(&nan, 1, 2).unwrap(),
                DistanceMetric::L1,
                Device::Cpu
            ),
            Err(Error::NonFinite { .. })
        ));
    }
}
