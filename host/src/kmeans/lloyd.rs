//! The backend-agnostic Lloyd loop: initialise, then assign → update until labels stop changing,
//! the centroid shift drops under tol, or max_iter; keep the best of n_init runs. The same loop
//! drives a fit over one backend's rows ([`fit`]) and over shards (`super::shard`).

use super::init::{self, Start};
use super::shard::{Moments, column_max_abs, scale_exponents};
use super::{EmptyClusters, Init, Iteration, KMeansModel, KMeansParams};
use crate::backend::Lloyd;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::seeding::WeightScale;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

/// What a fit knows before its first step, from all of its rows.
pub(super) struct Setup {
    pub n: usize,
    pub d: usize,
    /// `params.tol` × the mean per-feature variance.
    pub tol: f64,
    /// The seeding weights' scale.
    pub weights: WeightScale,
}

impl Setup {
    /// The setup of a fit over `n` rows of `d` columns whose column maxima are `max_abs` and
    /// whose moments under `scales` are `moments`.
    pub fn new(params: &KMeansParams, max_abs: &[f32], scales: &[i32], moments: &Moments) -> Self {
        let n = moments.rows as usize;
        Setup {
            n,
            d: max_abs.len(),
            tol: params.tol * moments.mean_variance(scales),
            weights: init::weight_scale(max_abs, n, params.metric),
        }
    }
}

/// The best run of a fit (its labels stay where the rows are).
pub(super) struct Fitted {
    pub centroids: Vec<f32>,
    pub sizes: Vec<u32>,
    pub inertia: f64,
    pub n_iter: usize,
    pub converged: bool,
}

impl Fitted {
    pub fn into_model(
        self,
        params: &KMeansParams,
        labels: Vec<u32>,
        device: String,
    ) -> KMeansModel {
        KMeansModel {
            k: params.k,
            d: self.centroids.len() / params.k,
            metric: params.metric,
            centroids: self.centroids,
            labels,
            cluster_sizes: self.sizes,
            inertia: self.inertia,
            n_iter: self.n_iter,
            converged: self.converged,
            device,
        }
    }
}

pub(super) fn fit(params: &KMeansParams, data: &MatrixView<'_>) -> Result<KMeansModel> {
    data.validate("the data")?;
    let (n, d, k) = (data.rows(), data.cols(), params.k);
    params.check(n, d)?;
    let max_abs = column_max_abs(data);
    let scales = scale_exponents(&max_abs, n);
    let setup = Setup::new(params, &max_abs, &scales, &Moments::of(data, &scales));
    let backend = params.device.backend()?;
    let mut lloyd = backend.lloyd(data, k, params.metric.assign(), params.precision, &scales)?;
    let fitted = drive(params, lloyd.as_mut(), &setup)?;
    Ok(fitted.into_model(params, lloyd.labels()?, backend.describe()))
}

/// The `n_init` runs of a fit over `lloyd`, which holds all of its rows (here, or spread over
/// shards): returns the run of lowest inertia (the earliest of equals), whose labels `lloyd`
/// holds at the end.
pub(super) fn drive(params: &KMeansParams, lloyd: &mut dyn Lloyd, setup: &Setup) -> Result<Fitted> {
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut best: Option<(usize, Fitted)> = None;
    for run in 0..params.n_init {
        let start = start(params, lloyd, setup, &mut rng)?;
        let result = run_once(lloyd, start, params, setup.tol, run, &mut rng)?;
        if best
            .as_ref()
            .is_none_or(|(_, b)| result.inertia < b.inertia)
        {
            best = Some((run, result));
        }
    }
    let (run, best) = best.expect("n_init ≥ 1");
    if run + 1 < params.n_init {
        // The labels are the last run's: assign to the best run's centroids again.
        lloyd.set_centroids(&best.centroids)?;
        lloyd.assign()?;
    }
    Ok(best)
}

/// Where the next run starts (the next numbers of `rng`).
fn start(
    params: &KMeansParams,
    lloyd: &mut dyn Lloyd,
    setup: &Setup,
    rng: &mut ChaCha8Rng,
) -> Result<Start> {
    let (n, k, ws) = (setup.n, params.k, setup.weights);
    Ok(match &params.init {
        Init::KMeansPlusPlus => {
            let rows = init::kmeans_plus_plus(lloyd, n, k, ws, rng)?;
            Start::Centroids(lloyd.gather(&rows)?)
        }
        Init::KMeansParallel => {
            let rows = init::kmeans_parallel(lloyd, setup, k, params.metric, rng)?;
            Start::Centroids(lloyd.gather(&rows)?)
        }
        Init::RandomPoints => Start::Centroids(lloyd.gather(&init::random_rows(n, k, rng))?),
        Init::RandomLabels => Start::Labels(init::random_labels(n, k, rng)),
        Init::Centroids(c) => Start::Centroids(c.clone()),
    })
}

/// The centroids that the first run of a fit starts from (validated as `fit` does).
pub(super) fn initial_centroids(params: &KMeansParams, data: &MatrixView<'_>) -> Result<Vec<f32>> {
    data.validate("the data")?;
    let (n, d, k) = (data.rows(), data.cols(), params.k);
    params.check(n, d)?;
    let setup = Setup {
        n,
        d,
        tol: 0.0,
        weights: init::weight_scale(&column_max_abs(data), n, params.metric),
    };
    let backend = params.device.backend()?;
    let scales = vec![0; d];
    let mut lloyd = backend.lloyd(data, k, params.metric.assign(), params.precision, &scales)?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    match start(params, lloyd.as_mut(), &setup, &mut rng)? {
        Start::Centroids(c) => Ok(c),
        Start::Labels(_) => Err(Error::invalid(
            "init",
            "random-labels starts from labels, not centroids",
        )),
    }
}

fn run_once(
    lloyd: &mut dyn Lloyd,
    start: Start,
    params: &KMeansParams,
    tol: f64,
    run: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Fitted> {
    // With labels to start from, the first assignment can already confirm them; with centroids,
    // the label buffer holds nothing meaningful before the first assignment.
    let labels_known = match start {
        Start::Centroids(c) => {
            lloyd.set_centroids(&c)?;
            false
        }
        Start::Labels(labels) => {
            lloyd.set_labels(&labels)?;
            let empty = lloyd.update()?;
            if empty > 0 {
                relocate_random(lloyd, labels.len(), rng)?;
            }
            lloyd.commit();
            true
        }
    };

    let mut n_iter = 0;
    let mut converged = false;
    let mut consistent = false;
    loop {
        if n_iter == params.max_iter {
            lloyd.assign()?;
            consistent = true;
            break;
        }
        let step = lloyd.step()?;
        let stats = step.assign;
        if stats.changed == 0 && (n_iter > 0 || labels_known) {
            // The current centroids are the means of exactly these labels: a fixed point.
            converged = true;
            consistent = true;
            break;
        }
        let mut shift = step.shift;
        if step.empty > 0 && params.empty_clusters == EmptyClusters::FarthestPoint {
            relocate_farthest(lloyd)?;
            shift = lloyd.shift()?;
        }
        lloyd.commit();
        n_iter += 1;
        if let Some(progress) = &params.progress {
            progress(&Iteration {
                run,
                iteration: n_iter,
                changed: stats.changed,
                inertia: stats.inertia,
                shift,
            });
        }
        if within_tol(lloyd, shift, tol)? {
            converged = true;
            break;
        }
    }
    if !consistent {
        // Labels and inertia must belong to the centroids that are returned.
        lloyd.assign()?;
    }
    let tally = lloyd.tally()?;
    Ok(Fitted {
        centroids: lloyd.centroids()?,
        sizes: tally.sizes,
        inertia: tally.inertia.value(),
        n_iter,
        converged,
    })
}

/// Whether a squared shift `shift` reported by `lloyd` is at most `tol`. A backend may sum the
/// shift's terms in an order of its own (the GPU does); where that order could decide otherwise
/// than the host's (within 10⁻⁶ of tol, far beyond the rounding of any order), the host's
/// [`Lloyd::exact_shift`] decides, so that every backend and every split of the rows stops at
/// the same iteration.
fn within_tol(lloyd: &mut dyn Lloyd, shift: f64, tol: f64) -> Result<bool> {
    if (shift - tol).abs() <= 1e-6 * tol {
        Ok(lloyd.exact_shift()? <= tol)
    } else {
        Ok(shift <= tol)
    }
}

/// Moves each empty cluster to the point farthest from its centroid (ties: lowest index).
fn relocate_farthest(lloyd: &mut dyn Lloyd) -> Result<()> {
    let sizes = lloyd.sizes()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let farthest = lloyd.farthest(empty.len())?;
    for (&cluster, point) in empty.iter().zip(&farthest) {
        lloyd.relocate(cluster, point.row as usize)?;
    }
    Ok(())
}

/// Before any assignment there are no distances: empty clusters take distinct random points.
fn relocate_random(lloyd: &mut dyn Lloyd, n: usize, rng: &mut ChaCha8Rng) -> Result<()> {
    let sizes = lloyd.sizes()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let points = sample(rng, n, empty.len().min(n));
    for (&cluster, point) in empty.iter().zip(points) {
        lloyd.relocate(cluster, point)?;
    }
    Ok(())
}
