//! Mini-batch k-means (Sculley, WWW 2010), as scikit-learn's `MiniBatchKMeans`: a params builder
//! that validates before fitting, steps over random batches of the rows on the chosen backend,
//! `partial_fit` for data that arrives in pieces, and a fitted model that is a [`KMeansModel`]
//! (so `predict`, `transform` and the CLI's saved model work as for [`super::KMeans`]).
//!
//! Each step draws `batch_size` row indices with replacement from the host's seeded ChaCha8
//! stream, assigns those rows to their nearest centroid, and moves every centroid that received
//! rows to the mean of all the rows it has received so far (per-centroid counts set the learning
//! rate). Batch sums are exact fixed-point integers and the update is one formula per coordinate
//! ([`kernels_gpu::minibatch::learning_rate_update`]), so a seed gives the same centroids, labels
//! and inertia on the CPU and the GPU, bit for bit.
//!
//! ```
//! use kmeans_knn::{Device, MatrixView, MiniBatchKMeans};
//! let points = [0.0, 0.0, 0.1, 0.0, 10.0, 10.0, 10.1, 10.0];
//! let data = MatrixView::new(&points, 4, 2)?;
//! let model = MiniBatchKMeans::params(2).batch_size(2).seed(7).device(Device::Cpu).fit(&data)?;
//! assert_eq!(model.labels[0], model.labels[1]);
//! assert_ne!(model.labels[0], model.labels[2]);
//! // Data in pieces: each call is one step on its piece (the first also initialises).
//! let params = MiniBatchKMeans::params(2).seed(7).device(Device::Cpu);
//! let mut online = params.partial_fit(None, &data)?;
//! online = params.partial_fit(Some(&online), &data)?;
//! assert_eq!(online.n_steps, 2);
//! # Ok::<(), kmeans_knn::Error>(())
//! ```

mod run;

use super::{Init, KMeansModel, Metric, Stop};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use std::ops::Deref;
use std::sync::Arc;

/// Entry point: `MiniBatchKMeans::params(k)` starts a [`MiniBatchParams`] builder.
pub struct MiniBatchKMeans;

impl MiniBatchKMeans {
    /// Parameters for `k` clusters with the defaults of scikit-learn's `MiniBatchKMeans`
    /// (k-means++ on a subsample, batches of 1024, 100 epochs, tol 0, stop after 10 steps without
    /// improvement of the smoothed inertia, reassignment ratio 0.01) and seed 0.
    pub fn params(k: usize) -> MiniBatchParams {
        MiniBatchParams {
            k,
            init: Init::KMeansPlusPlus,
            batch_size: 1024,
            max_iter: 100,
            tol: 0.0,
            max_no_improvement: Some(10),
            init_size: None,
            n_init: None,
            reassignment_ratio: 0.01,
            seed: 0,
            metric: Metric::L2,
            device: Device::Auto,
            compute_labels: true,
            progress: None,
        }
    }
}

/// Progress of a fit, handed to [`MiniBatchParams::on_step`] after each step.
#[derive(Clone, Copy, Debug)]
pub struct MiniBatchStep {
    /// The step (from 1).
    pub step: usize,
    /// The most steps the fit makes (`max_iter` epochs of batches).
    pub n_steps: usize,
    /// Mean distance of the step's batch rows to their centroids before the update.
    pub inertia: f64,
    /// The exponentially weighted average of `inertia` that early stopping watches (scikit-learn's
    /// "ewa inertia"); `None` on the first step, which it ignores.
    pub smoothed: Option<f64>,
    /// Why the fit stops after this step, on its last step; `None` while it goes on.
    pub stop: Option<Stop>,
}

type Progress = Arc<dyn Fn(&MiniBatchStep) + Send + Sync>;

/// Mini-batch k-means parameters; every setter is cheap, [`MiniBatchParams::fit`] and
/// [`MiniBatchParams::partial_fit`] validate them all first.
#[derive(Clone)]
pub struct MiniBatchParams {
    k: usize,
    init: Init,
    batch_size: usize,
    max_iter: usize,
    tol: f64,
    max_no_improvement: Option<usize>,
    init_size: Option<usize>,
    n_init: Option<usize>,
    reassignment_ratio: f64,
    seed: u64,
    metric: Metric,
    device: Device,
    compute_labels: bool,
    progress: Option<Progress>,
}

impl MiniBatchParams {
    /// Initialisation (default k-means++), computed on `init_size` rows drawn at random:
    /// [`Init::KMeansPlusPlus`], [`Init::KMeansParallel`], [`Init::RandomPoints`] or
    /// [`Init::Centroids`] ([`Init::RandomLabels`] is an error).
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }
    /// Rows per batch (default 1024; at most the number of rows is used).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
    /// Most epochs (default 100): the fit makes at most `max_iter · n / batch_size` steps.
    pub fn max_iter(mut self, max_iter: usize) -> Self {
        self.max_iter = max_iter;
        self
    }
    /// Stop when a step's squared centroid shift is at most `tol` × the mean per-feature
    /// variance of the data (default 0: off; as scikit-learn).
    pub fn tol(mut self, tol: f64) -> Self {
        self.tol = tol;
        self
    }
    /// Stop after this many consecutive steps that do not lower the smoothed batch inertia
    /// (default `Some(10)`; `None` turns it off).
    pub fn max_no_improvement(mut self, steps: Option<usize>) -> Self {
        self.max_no_improvement = steps;
        self
    }
    /// Rows drawn (with replacement) for the initialisation (default `None`: 3 × the batch size,
    /// at least 3k; a size below k also becomes 3k; at most the number of rows).
    pub fn init_size(mut self, rows: Option<usize>) -> Self {
        self.init_size = rows;
        self
    }
    /// Initialisations tried, each on its own random rows; the one with the lowest inertia on a
    /// further `init_size` random rows wins (default `None`: 3 for [`Init::RandomPoints`], else
    /// 1, as scikit-learn's "auto"; given centroids always make one).
    pub fn n_init(mut self, n_init: Option<usize>) -> Self {
        self.n_init = n_init;
        self
    }
    /// Every `10·k` rows, centroids whose count is below this fraction of the largest count move
    /// to random rows of the current batch (default 0.01; 0 turns it off; at most 1).
    pub fn reassignment_ratio(mut self, ratio: f64) -> Self {
        self.reassignment_ratio = ratio;
        self
    }
    /// Seed of every random choice (default 0): same data and seed give the same model.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Assignment metric (default squared L2); centroids are means under both.
    pub fn metric(mut self, metric: Metric) -> Self {
        self.metric = metric;
        self
    }
    /// Where to compute (default [`Device::Auto`]).
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
    /// Whether [`MiniBatchParams::fit`] assigns every row to the final centroids (default true).
    /// Without, the model has no labels and its inertia is the smoothed batch inertia of the
    /// last step times the rows' total weight (as scikit-learn's `compute_labels=False`); after
    /// [`MiniBatchParams::partial_fit`], 0.
    pub fn compute_labels(mut self, compute: bool) -> Self {
        self.compute_labels = compute;
        self
    }
    /// Calls `f` after every step of [`MiniBatchParams::fit`].
    pub fn on_step(mut self, f: impl Fn(&MiniBatchStep) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// The number of clusters.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Checks the parameters against data of `n` points in `d` dimensions (the first piece, for
    /// [`MiniBatchParams::partial_fit`]).
    pub fn check(&self, n: usize, d: usize) -> Result<()> {
        self.check_settings(d)?;
        if self.k > n {
            return Err(Error::invalid(
                "k",
                format!("k = {} is larger than the number of points ({n})", self.k),
            ));
        }
        Ok(())
    }

    /// Checks everything but the number of rows, for data of `d` dimensions.
    fn check_settings(&self, d: usize) -> Result<()> {
        if self.k == 0 {
            return Err(Error::invalid("k", "k must be at least 1"));
        }
        if self.metric == Metric::Cosine {
            return Err(Error::invalid(
                "metric",
                "mini-batch k-means runs with l2 or l1; for spherical (cosine) k-means use KMeans",
            ));
        }
        if self.batch_size == 0 {
            return Err(Error::invalid(
                "batch_size",
                "batch_size must be at least 1",
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
        if self.init_size == Some(0) {
            return Err(Error::invalid("init_size", "init_size must be at least 1"));
        }
        if self.n_init == Some(0) {
            return Err(Error::invalid("n_init", "n_init must be at least 1"));
        }
        if !(0.0..=1.0).contains(&self.reassignment_ratio) {
            return Err(Error::invalid(
                "reassignment_ratio",
                format!(
                    "reassignment_ratio must be in [0, 1], got {}",
                    self.reassignment_ratio
                ),
            ));
        }
        match &self.init {
            Init::RandomLabels => Err(Error::invalid(
                "init",
                "random-labels is not an initialisation of mini-batch k-means (use kmeans++, \
                 kmeans||, random or given centroids)",
            )),
            Init::Centroids(c) if c.len() != self.k * d => Err(Error::invalid(
                "init",
                format!(
                    "{} initial centroid values given, k × d = {} expected",
                    c.len(),
                    self.k * d
                ),
            )),
            Init::Centroids(c) => MatrixView::new(c, self.k, d)?.validate("the initial centroids"),
            _ => Ok(()),
        }
    }

    /// Rows per step for data of `n` rows.
    fn batch_for(&self, n: usize) -> usize {
        self.batch_size.min(n)
    }

    /// Rows of the initialisation subsample for data of `n` rows (as scikit-learn).
    fn init_size_for(&self, n: usize) -> usize {
        let size = match self.init_size {
            Some(s) if s >= self.k => s,
            Some(_) => 3 * self.k,
            None => (3 * self.batch_for(n)).max(3 * self.k),
        };
        size.min(n)
    }

    /// Initialisations a fit tries (`n_init`, or what "auto" makes of it).
    pub fn runs(&self) -> usize {
        match (&self.init, self.n_init) {
            (Init::Centroids(_), _) => 1,
            (_, Some(runs)) => runs,
            (Init::RandomPoints, None) => 3,
            (_, None) => 1,
        }
    }

    /// Clusters `data` (validated first: non-empty, finite, `k ≤ n`): initialisation on a
    /// subsample, then steps over random batches until `max_iter` epochs, the tolerance or
    /// `max_no_improvement`; labels and inertia are those of every row under the final centroids.
    pub fn fit<'a>(&self, data: impl Into<MatrixView<'a>>) -> Result<MiniBatchKMeansModel> {
        run::fit(self, &data.into(), None)
    }

    /// [`MiniBatchParams::fit`] with one weight per row (finite, ≥ 0, not all zero), with
    /// scikit-learn's meaning: batches draw rows with probability proportional to their weight
    /// (then step over them unweighted), the initialisation seeds on its rows by their weights,
    /// and the inertia is the weighted sum. Weights all 1 give the unweighted model bit for bit,
    /// and scaling all weights by a power of two changes nothing.
    pub fn fit_weighted<'a>(
        &self,
        data: impl Into<MatrixView<'a>>,
        sample_weight: &[f32],
    ) -> Result<MiniBatchKMeansModel> {
        run::fit(self, &data.into(), Some(sample_weight))
    }

    /// One step on `piece` (every row of it is the batch), continuing `model`; without a model
    /// the centroids are first initialised from the piece (`k ≤` its rows). The model's labels
    /// and inertia are those of the piece under the new centroids; `n_iter` stays 0 and
    /// `converged` false (a stream has no end). The random choices of a step come from the seed
    /// and the step's number, so the same pieces give the same model.
    pub fn partial_fit<'a>(
        &self,
        model: Option<&MiniBatchKMeansModel>,
        piece: impl Into<MatrixView<'a>>,
    ) -> Result<MiniBatchKMeansModel> {
        run::partial_fit(self, model, &piece.into())
    }
}

/// The result of [`MiniBatchParams::fit`] and [`MiniBatchParams::partial_fit`]: a k-means model
/// (dereferences to [`KMeansModel`]: centroids, labels, inertia, `predict`, `transform`) with
/// what the next [`MiniBatchParams::partial_fit`] needs.
#[derive(Clone, Debug)]
pub struct MiniBatchKMeansModel {
    /// Centroids, the labels and inertia of the data last fitted, `n_iter` (epochs, rounded up),
    /// `converged` (stopped on tol or `max_no_improvement`) and `stop` (why).
    pub kmeans: KMeansModel,
    /// Steps made.
    pub n_steps: usize,
    /// Rows every centroid has received (its learning rate is `batch count / count`).
    pub counts: Vec<u64>,
    /// Rows stepped over since the last reassignment check.
    pub since_reassign: usize,
}

impl Deref for MiniBatchKMeansModel {
    type Target = KMeansModel;
    fn deref(&self) -> &KMeansModel {
        &self.kmeans
    }
}
