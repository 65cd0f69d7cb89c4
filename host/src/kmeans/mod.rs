//! k-means clustering: a params builder that validates before fitting, Lloyd iterations on the
//! chosen backend (optionally with sample weights), and a fitted model with `predict` and
//! `transform`.
//!
//! ```
//! use kmeans_knn::{KMeans, MatrixView, Device};
//! let points = [0.0, 0.0, 0.1, 0.0, 10.0, 10.0, 10.1, 10.0];
//! let data = MatrixView::new(&points, 4, 2)?;
//! let model = KMeans::params(2).seed(7).device(Device::Cpu).fit(&data)?;
//! assert_eq!(model.labels[0], model.labels[1]);
//! assert_ne!(model.labels[0], model.labels[2]);
//! # Ok::<(), kmeans_knn::Error>(())
//! ```

mod init;
mod lloyd;
mod minibatch;
mod model;
mod prepare;
pub mod shard;
mod weights;

pub use crate::backend::vocab::{Metric, Precision};
pub use minibatch::{MiniBatchKMeans, MiniBatchKMeansModel, MiniBatchParams, MiniBatchStep};
pub use model::KMeansModel;

use crate::device::{Device, cpu_rate, pair_work, scaling_threads};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

/// Entry point: `KMeans::params(k)` starts a [`KMeansParams`] builder.
pub struct KMeans;

/// The most Lloyd iterations per run unless told otherwise (scikit-learn's default).
pub const DEFAULT_MAX_ITER: usize = 300;

impl KMeans {
    /// Parameters for `k` clusters with the defaults of scikit-learn's `KMeans`
    /// (k-means++, 300 iterations, tol 1e-4, one run) and seed 0.
    pub fn params(k: usize) -> KMeansParams {
        KMeansParams {
            k,
            init: Init::KMeansPlusPlus,
            max_iter: DEFAULT_MAX_ITER,
            tol: 1e-4,
            absolute_tol: false,
            n_init: 1,
            seed: 0,
            metric: Metric::L2,
            device: Device::Auto,
            empty_clusters: EmptyClusters::FarthestPoint,
            precision: Precision::Auto,
            memory_budget: None,
            progress: None,
        }
    }
}

/// How the first centroids are chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// Greedy k-means++ (as scikit-learn: 2 + ⌊ln k⌋ candidates per centroid, the one that
    /// lowers the potential most wins).
    KMeansPlusPlus,
    /// k-means‖ (Bahmani et al. 2012, cuML's default): 5 rounds that each sample about 2k
    /// points independently, then weighted greedy k-means++ over those candidates.
    KMeansParallel,
    /// `k` distinct points drawn uniformly at random.
    RandomPoints,
    /// Every point gets a random label; the first centroids are the label means.
    RandomLabels,
    /// These centroids, `k × d` row-major.
    Centroids(Vec<f32>),
}

impl FromStr for Init {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "kmeans++" | "k-means++" => Ok(Init::KMeansPlusPlus),
            "kmeans||" | "k-means||" => Ok(Init::KMeansParallel),
            "random" => Ok(Init::RandomPoints),
            "random-labels" => Ok(Init::RandomLabels),
            _ => Err(Error::invalid(
                "init",
                format!("'{s}' is not one of kmeans++, kmeans||, random, random-labels"),
            )),
        }
    }
}

/// What happens to a cluster that loses all its points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EmptyClusters {
    /// It moves onto the point with weight farthest from its own centroid (ties: lowest index);
    /// several empty clusters take the farthest points in turn, a point of weight w > 1 up to
    /// ⌈w⌉ of them as w copies of it would. The point stays in its own cluster's mean until the
    /// next assignment, so integer weights give the model of repeated rows.
    #[default]
    FarthestPoint,
    /// scikit-learn's rule: the empty clusters take the points with weight farthest from their
    /// centroids, one each (farthest first, ties: lowest index; none when every distance is 0),
    /// and each point leaves its cluster with its weight before the means are taken: the empty
    /// cluster's centroid is the point, its old cluster's the mean of what remains. A cluster
    /// still without weight then sits on the heaviest cluster's mean (the first of equals), as
    /// scikit-learn 1.9 places it (its code copies that cluster before averaging it when the
    /// heaviest comes later: its raw weighted sum of the centred data, which is not copied here).
    TakeFarthestPoint,
    /// It keeps its previous centroid.
    KeepPrevious,
}

impl FromStr for EmptyClusters {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "farthest" => Ok(EmptyClusters::FarthestPoint),
            "take-farthest" => Ok(EmptyClusters::TakeFarthestPoint),
            "keep" => Ok(EmptyClusters::KeepPrevious),
            _ => Err(Error::invalid(
                "empty_clusters",
                format!("'{s}' is not one of farthest, take-farthest, keep"),
            )),
        }
    }
}

/// Progress of a fit, handed to [`KMeansParams::on_iteration`] after each iteration.
#[derive(Clone, Copy, Debug)]
pub struct Iteration {
    /// Which of the `n_init` runs (from 0).
    pub run: usize,
    /// Iteration within the run (from 1).
    pub iteration: usize,
    /// Labels of points with weight that changed in this iteration's assignment.
    pub changed: u64,
    /// Inertia of this iteration's assignment.
    pub inertia: f64,
    /// Squared centroid shift of this iteration's update.
    pub shift: f64,
    /// Why the run stops here, on its last iteration; `None` while it goes on.
    pub stop: Option<Stop>,
}

/// Why a run stopped.
///
/// A Lloyd run that stops on [`Stop::Unchanged`] reports the assignment that found the labels
/// unchanged as one more [`Iteration`] (with no update after it): scikit-learn counts it in its
/// `n_iter_`, so that count is [`KMeansModel::n_iter`] + 1 for such a run and `n_iter` otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// No label changed: the centroids are a fixed point.
    Unchanged,
    /// The squared centroid shift was at most the tolerance.
    Tolerance,
    /// Mini-batch only: `max_no_improvement` steps in a row did not lower the smoothed inertia.
    NoImprovement,
    /// The most iterations (epochs of steps for mini-batch) were made.
    MaxIter,
}

type Progress = Arc<dyn Fn(&Iteration) + Send + Sync>;

/// k-means parameters; every setter is cheap, [`KMeansParams::fit`] validates them all first.
#[derive(Clone)]
pub struct KMeansParams {
    k: usize,
    init: Init,
    max_iter: usize,
    tol: f64,
    /// Whether `tol` is compared with the shift as it is (else it is scaled by the variance).
    absolute_tol: bool,
    n_init: usize,
    seed: u64,
    metric: Metric,
    device: Device,
    empty_clusters: EmptyClusters,
    precision: Precision,
    memory_budget: Option<usize>,
    progress: Option<Progress>,
}

impl KMeansParams {
    /// Initialisation (default k-means++).
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }
    /// Most Lloyd iterations per run (default 300).
    pub fn max_iter(mut self, max_iter: usize) -> Self {
        self.max_iter = max_iter;
        self
    }
    /// Stop when the squared centroid shift is at most `tol` × the mean per-feature variance of
    /// the data (weighted by the sample weights), as scikit-learn (default 1e-4). A run also stops
    /// when no label of a point with weight changes.
    pub fn tol(mut self, tol: f64) -> Self {
        self.tol = tol;
        self.absolute_tol = false;
        self
    }
    /// Stop when the squared centroid shift is at most `tol` itself, not scaled by the data's
    /// variance (for a caller that scales it in its own way, as the Python package does with
    /// scikit-learn's unweighted variance). A run also stops when no label changes.
    pub fn absolute_tol(mut self, tol: f64) -> Self {
        self.tol = tol;
        self.absolute_tol = true;
        self
    }

    /// The tolerance on the squared shift for data of mean per-feature variance `variance`.
    pub(crate) fn tol_for(&self, variance: impl FnOnce() -> f64) -> f64 {
        match self.absolute_tol {
            true => self.tol,
            false => self.tol * variance(),
        }
    }
    /// Runs from different initialisations; the lowest inertia wins (default 1).
    pub fn n_init(mut self, n_init: usize) -> Self {
        self.n_init = n_init;
        self
    }
    /// Seed of every random choice (default 0): same data and seed give the same model.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Assignment metric (default squared L2).
    pub fn metric(mut self, metric: Metric) -> Self {
        self.metric = metric;
        self
    }
    /// Where to compute (default [`Device::Auto`]). [`Device::Gpus`] with more than one GPU
    /// cuts the rows into a contiguous shard per GPU and runs every step on all of them at once,
    /// adding their exact partial sums: the result equals one GPU's bit for bit, sample weights
    /// and cosine included.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
    /// Empty-cluster policy (default [`EmptyClusters::FarthestPoint`]).
    pub fn empty_clusters(mut self, policy: EmptyClusters) -> Self {
        self.empty_clusters = policy;
        self
    }
    /// Assignment arithmetic (default [`Precision::Exact`]); see [`Precision::Tf32`] for the
    /// tensor-core mode.
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }
    /// GPU memory the fit may use, in bytes (default: 70 % of what the GPU has free; on a GPU
    /// set, per GPU). Rows beyond it stay in host memory and take turns on the GPU in batches,
    /// each uploaded for every pass over the data (a Lloyd step, a seeding step): the same model
    /// bit for bit, at the cost of the copies. Choose [`Init::KMeansParallel`] for such data:
    /// greedy k-means++ passes over the rows once per centroid. The CPU has no budget.
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }
    /// Calls `f` after every iteration (e.g. to drive a progress bar).
    pub fn on_iteration(mut self, f: impl Fn(&Iteration) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// The number of clusters.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The GPU memory budget given with [`KMeansParams::memory_budget`].
    pub(crate) fn budget(&self) -> Option<usize> {
        self.memory_budget
    }

    /// Checks the parameters against data of `n` points in `d` dimensions.
    pub fn check(&self, n: usize, d: usize) -> Result<()> {
        if self.k == 0 {
            return Err(Error::invalid("k", "k must be at least 1"));
        }
        if self.k > n {
            return Err(Error::invalid(
                "k",
                format!("k = {} is larger than the number of points ({n})", self.k),
            ));
        }
        if self.max_iter == 0 {
            return Err(Error::invalid("max_iter", "max_iter must be at least 1"));
        }
        if !(self.tol.is_finite() && self.tol >= 0.0) {
            return Err(Error::invalid(
                "tol",
                format!("tol must be finite and ≥ 0, got {}", self.tol),
            ));
        }
        if self.precision == Precision::Tf32 && self.metric != Metric::L2 {
            return Err(Error::invalid(
                "precision",
                format!(
                    "precision tf32 needs metric l2 (squared Euclidean), not {}",
                    self.metric
                ),
            ));
        }
        if self.n_init == 0 {
            return Err(Error::invalid("n_init", "n_init must be at least 1"));
        }
        if let Init::Centroids(c) = &self.init {
            if c.len() != self.k * d {
                return Err(Error::invalid(
                    "init",
                    format!(
                        "{} initial centroid values given, k × d = {} expected",
                        c.len(),
                        self.k * d
                    ),
                ));
            }
            MatrixView::new(c, self.k, d)?.validate("the initial centroids")?;
        }
        Ok(())
    }

    /// The `k × d` centroids the (first) run of [`KMeansParams::fit`] starts from, computed on
    /// the chosen device; an error for [`Init::RandomLabels`], which starts from labels.
    pub fn initial_centroids<'a>(&self, data: impl Into<MatrixView<'a>>) -> Result<Vec<f32>> {
        lloyd::initial_centroids(self, &data.into())
    }

    /// Clusters `data` (validated first: non-empty, finite, `k ≤ n`).
    pub fn fit<'a>(&self, data: impl Into<MatrixView<'a>>) -> Result<KMeansModel> {
        self.fit_rows(&data.into(), None)
    }

    /// Clusters `data` with a sample weight per row: centroids are weighted means, inertia is
    /// the weighted sum of distances, seeding draws points in proportion to their weight times
    /// their seeding distance, and `tol` is relative to the weighted variance.
    ///
    /// Weights must be finite and ≥ 0 (a weight of 0 leaves its row out of everything but the
    /// labels), one per row, not all zero, and at least `k` of them positive; anything else is an
    /// [`Error::SampleWeightCount`], [`Error::InvalidSampleWeight`] (naming the row),
    /// [`Error::ZeroSampleWeights`] or an invalid `k`. Integer weights give the labels,
    /// centroids and inertia, bit for bit, of the data with every row repeated that many times
    /// (in the same order); other weights are held to 2^−40 of their total or better (see
    /// `kernels_gpu::fixed`).
    pub fn fit_weighted<'a>(
        &self,
        data: impl Into<MatrixView<'a>>,
        sample_weight: &[f32],
    ) -> Result<KMeansModel> {
        self.fit_rows(&data.into(), Some(sample_weight))
    }

    /// A fit on this parameter set's device: over one backend's rows, or sharded over a GPU set
    /// and over batches of rows beyond a GPU's memory budget.
    fn fit_rows(
        &self,
        data: &MatrixView<'_>,
        sample_weight: Option<&[f32]>,
    ) -> Result<KMeansModel> {
        let device = match self.precision {
            Precision::Auto | Precision::Exact => {
                self.device
                    .for_job(self.pairs(data), data.cols(), Some(&self.shape(data)))
            }
            // Asked for the tensor cores: the device asked for.
            Precision::Tf32 => self.device,
        };
        if device != self.device {
            return self.clone().device(device).fit_rows(data, sample_weight);
        }
        let devices = match self.device.several_gpus()? {
            Some(ordinals) => ordinals.into_iter().map(Device::Cuda).collect(),
            None => vec![self.device],
        };
        let placed = shard::gpus::place(self, data, &devices)?;
        match placed.as_slice() {
            [one] if !one.streamed() && self.device == Device::Cpu => {
                let start = Instant::now();
                let model = lloyd::fit(self, data, sample_weight)?;
                let threads = rayon::current_num_threads();
                cpu_rate::record(
                    &self.shape(data),
                    pair_work(self.pairs_over(data, model.n_iter), data.cols()),
                    threads,
                    scaling_threads(threads),
                    start.elapsed().as_secs_f64(),
                );
                Ok(model)
            }
            [one] if !one.streamed() => lloyd::fit(self, data, sample_weight),
            _ => shard::gpus::fit(self, data, sample_weight, &placed),
        }
    }

    /// The fit's distances for [`Device::for_pairs`]: `n_init` runs of the seeding (about three
    /// passes) and 100 iterations over the n × k pairs (fewer with `max_iter`); the iterations
    /// are not known before the fit, and the seeds' images take 100 to 250.
    fn pairs(&self, data: &MatrixView<'_>) -> f64 {
        self.pairs_over(data, self.max_iter.min(100))
    }

    /// What a fit's CPU time is recorded under ([`cpu_rate`]): its rows' shape and what decides
    /// its work.
    fn shape(&self, data: &MatrixView<'_>) -> String {
        let init = match self.init {
            Init::KMeansPlusPlus => "pp",
            Init::KMeansParallel => "parallel",
            Init::RandomPoints => "points",
            Init::RandomLabels => "labels",
            Init::Centroids(_) => "given",
        };
        format!(
            "kmeans-{}x{}-k{}-{:?}-{init}-n{}-i{}-tol{:e}",
            data.rows(),
            data.cols(),
            self.k,
            self.metric,
            self.n_init,
            self.max_iter,
            self.tol,
        )
    }

    /// The distances of `n_init` runs of the seeding and `iterations` iterations each.
    fn pairs_over(&self, data: &MatrixView<'_>, iterations: usize) -> f64 {
        let passes = (iterations + 3) * self.n_init.max(1);
        data.rows() as f64 * self.k as f64 * passes as f64
    }

    /// Clusters rows held by [`shard::Shard`]s, reached through `transport`: the same model
    /// as [`KMeansParams::fit`] on the concatenated rows, bit for bit, however they are split
    /// (see [`shard`]). The labels stay on the shards ([`shard::Request::Labels`]): the model's
    /// `labels` is empty. Each shard computes on its own device; this parameter set's device
    /// is not used.
    pub fn fit_sharded(&self, transport: &mut dyn shard::Transport) -> Result<KMeansModel> {
        shard::fit(self, transport, None)
    }
}
