//! The backend-agnostic Lloyd loop: initialise, then assign → update until labels stop changing,
//! the centroid shift drops under tol, or max_iter; keep the best of n_init runs.

use super::init::{self, Start};
use super::{EmptyClusters, Init, Iteration, KMeansModel, KMeansParams};
use crate::backend::{AssignStats, Lloyd};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::fixed::scale_exponent;
use kernels_gpu::seeding::WeightScale;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

struct Run {
    centroids: Vec<f32>,
    labels: Vec<u32>,
    sizes: Vec<u32>,
    inertia: f64,
    n_iter: usize,
    converged: bool,
}

pub(super) fn fit(params: &KMeansParams, data: &MatrixView<'_>) -> Result<KMeansModel> {
    data.validate("the data")?;
    let (n, d, k) = (data.rows(), data.cols(), params.k);
    params.check(n, d)?;
    let summary = ColumnSummary::of(data);
    let scales: Vec<i32> = summary
        .max_abs
        .iter()
        .map(|&m| scale_exponent(m, n))
        .collect();
    let tol = params.tol * summary.mean_variance;
    let weights = init::weight_scale(&summary.max_abs, n, params.metric);

    let backend = params.device.backend()?;
    let mut lloyd = backend.lloyd(data, k, params.metric.assign(), params.precision, &scales)?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut best: Option<Run> = None;
    for run in 0..params.n_init {
        let start = start(params, lloyd.as_mut(), data, weights, &mut rng)?;
        let result = run_once(lloyd.as_mut(), start, params, tol, run, &mut rng)?;
        if best.as_ref().is_none_or(|b| result.inertia < b.inertia) {
            best = Some(result);
        }
    }
    let best = best.expect("n_init ≥ 1");
    Ok(KMeansModel {
        k,
        d,
        metric: params.metric,
        centroids: best.centroids,
        labels: best.labels,
        cluster_sizes: best.sizes,
        inertia: best.inertia,
        n_iter: best.n_iter,
        converged: best.converged,
        device: backend.describe(),
    })
}

/// Where the next run starts (the next numbers of `rng`).
fn start(
    params: &KMeansParams,
    lloyd: &mut dyn Lloyd,
    data: &MatrixView<'_>,
    weights: WeightScale,
    rng: &mut ChaCha8Rng,
) -> Result<Start> {
    let (n, k) = (data.rows(), params.k);
    Ok(match &params.init {
        Init::KMeansPlusPlus => {
            let rows = init::kmeans_plus_plus(lloyd, n, k, weights, rng)?;
            Start::Centroids(init::gather(data, &rows))
        }
        Init::KMeansParallel => {
            let rows = init::kmeans_parallel(lloyd, data, k, params.metric, weights, rng)?;
            Start::Centroids(init::gather(data, &rows))
        }
        Init::RandomPoints => Start::Centroids(init::random_points(data, k, rng)),
        Init::RandomLabels => Start::Labels(init::random_labels(n, k, rng)),
        Init::Centroids(c) => Start::Centroids(c.clone()),
    })
}

/// The centroids that the first run of a fit starts from (validated as `fit` does).
pub(super) fn initial_centroids(params: &KMeansParams, data: &MatrixView<'_>) -> Result<Vec<f32>> {
    data.validate("the data")?;
    let (n, d, k) = (data.rows(), data.cols(), params.k);
    params.check(n, d)?;
    let summary = ColumnSummary::of(data);
    let weights = init::weight_scale(&summary.max_abs, n, params.metric);
    let backend = params.device.backend()?;
    let scales = vec![0; d];
    let mut lloyd = backend.lloyd(data, k, params.metric.assign(), params.precision, &scales)?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    match start(params, lloyd.as_mut(), data, weights, &mut rng)? {
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
) -> Result<Run> {
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

    let mut stats: AssignStats;
    let mut n_iter = 0;
    let mut converged = false;
    let mut consistent = false;
    loop {
        if n_iter == params.max_iter {
            stats = lloyd.assign()?;
            consistent = true;
            break;
        }
        let step = lloyd.step()?;
        stats = step.assign;
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
        if shift <= tol {
            converged = true;
            break;
        }
    }
    if !consistent {
        // Labels and inertia must belong to the centroids that are returned.
        stats = lloyd.assign()?;
    }
    let labels = lloyd.labels()?;
    let mut sizes = vec![0u32; params.k];
    for &l in &labels {
        sizes[l as usize] += 1;
    }
    Ok(Run {
        centroids: lloyd.centroids()?,
        labels,
        sizes,
        inertia: stats.inertia,
        n_iter,
        converged,
    })
}

/// Moves each empty cluster to the point farthest from its centroid (ties: lowest index).
fn relocate_farthest(lloyd: &mut dyn Lloyd) -> Result<()> {
    let sizes = lloyd.sizes()?;
    let dist = lloyd.min_distances()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let mut order: Vec<usize> = (0..dist.len()).collect();
    let by_distance_desc = |&a: &usize, &b: &usize| dist[b].total_cmp(&dist[a]).then(a.cmp(&b));
    let take = empty.len().min(order.len());
    if take < order.len() {
        order.select_nth_unstable_by(take, by_distance_desc);
    }
    order.truncate(take);
    order.sort_by(by_distance_desc);
    for (&cluster, &point) in empty.iter().zip(&order) {
        lloyd.relocate(cluster, point)?;
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

/// Per-column largest magnitude (for the fixed-point scales) and mean variance (for tol).
pub(super) struct ColumnSummary {
    pub(super) max_abs: Vec<f32>,
    pub(super) mean_variance: f64,
}

impl ColumnSummary {
    pub(super) fn of(data: &MatrixView<'_>) -> Self {
        let (n, d) = (data.rows(), data.cols());
        let zero = || (vec![0f32; d], vec![0f64; d], vec![0f64; d]);
        let (max_abs, sum, sum_sq) = data
            .as_slice()
            .par_chunks(crate::backend::cpu::CHUNK * d)
            .map(|rows| {
                let (mut m, mut s, mut q) = zero();
                for row in rows.chunks_exact(d) {
                    for j in 0..d {
                        let v = row[j];
                        m[j] = m[j].max(v.abs());
                        s[j] += v as f64;
                        q[j] += v as f64 * v as f64;
                    }
                }
                (m, s, q)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .fold(zero(), |(mut m, mut s, mut q), (m2, s2, q2)| {
                for j in 0..d {
                    m[j] = m[j].max(m2[j]);
                    s[j] += s2[j];
                    q[j] += q2[j];
                }
                (m, s, q)
            });
        let variance: f64 = (0..d)
            .map(|j| {
                let mean = sum[j] / n as f64;
                (sum_sq[j] / n as f64 - mean * mean).max(0.0)
            })
            .sum();
        ColumnSummary {
            max_abs,
            mean_variance: variance / d as f64,
        }
    }
}
