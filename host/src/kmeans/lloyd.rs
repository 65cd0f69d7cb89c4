//! The backend-agnostic Lloyd loop: initialise, then assign → update until labels stop changing,
//! the centroid shift drops under tol, or max_iter; keep the best of n_init runs.

use super::init::{self, Start};
use super::prepare::Prepared;
use super::weights::Weighting;
use super::{EmptyClusters, Init, Iteration, KMeansModel, KMeansParams};
use crate::backend::{AssignStats, Lloyd};
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

struct Run {
    centroids: Vec<f32>,
    labels: Vec<u32>,
    sizes: Vec<u32>,
    inertia: f64,
    n_iter: usize,
    converged: bool,
}

pub(super) fn fit(
    params: &KMeansParams,
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
) -> Result<KMeansModel> {
    let (d, k) = (data.cols(), params.k);
    let prepared = Prepared::new(params, data, sample_weight)?;
    let backend = params.device.backend()?;
    let mut lloyd = backend.lloyd(&prepared.data, &prepared.spec(params))?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut best: Option<Run> = None;
    for run in 0..params.n_init {
        let start = start(params, lloyd.as_mut(), &prepared, &mut rng)?;
        let result = run_once(lloyd.as_mut(), start, params, &prepared, run, &mut rng)?;
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
    prepared: &Prepared<'_>,
    rng: &mut ChaCha8Rng,
) -> Result<Start> {
    let (data, weights, ws) = (&prepared.data, &prepared.weights, prepared.seeding);
    let (n, k) = (data.rows(), params.k);
    Ok(match &params.init {
        Init::KMeansPlusPlus => {
            let draw = |rng: &mut ChaCha8Rng| weights.draw(rng);
            let rows = init::kmeans_plus_plus(lloyd, &draw, k, ws, rng)?;
            Start::Centroids(init::gather(data, &rows))
        }
        Init::KMeansParallel => {
            let rows = init::kmeans_parallel(lloyd, data, k, params.metric, ws, weights, rng)?;
            Start::Centroids(init::gather(data, &rows))
        }
        Init::RandomPoints => Start::Centroids(init::random_points(data, k, weights, rng)),
        Init::RandomLabels => Start::Labels(init::random_labels(n, k, rng)),
        Init::Centroids(_) => Start::Centroids(
            prepared
                .init_centroids
                .clone()
                .expect("prepared with the initial centroids"),
        ),
    })
}

/// The centroids that the first run of a fit starts from (validated as `fit` does).
pub(super) fn initial_centroids(params: &KMeansParams, data: &MatrixView<'_>) -> Result<Vec<f32>> {
    let prepared = Prepared::new(params, data, None)?;
    let backend = params.device.backend()?;
    let mut lloyd = backend.lloyd(&prepared.data, &prepared.spec(params))?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    match start(params, lloyd.as_mut(), &prepared, &mut rng)? {
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
    prepared: &Prepared<'_>,
    run: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Run> {
    let (tol, weights) = (prepared.tol, &prepared.weights);
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
                relocate_random(lloyd, weights, rng)?;
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
            // The current centroids are the means of exactly these labels (points without weight
            // count for nothing in them): a fixed point.
            converged = true;
            consistent = true;
            break;
        }
        let mut shift = step.shift;
        if step.empty > 0 && params.empty_clusters == EmptyClusters::FarthestPoint {
            relocate_farthest(lloyd, weights)?;
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

/// Moves each cluster without weight to the point with weight farthest from its centroid (ties:
/// lowest index); a point of weight w > 1 takes up to ⌈w⌉ of them in turn, as w copies of it
/// would.
fn relocate_farthest(lloyd: &mut dyn Lloyd, weights: &Weighting) -> Result<()> {
    let sizes = lloyd.cluster_weights()?;
    let dist = lloyd.min_distances()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let mut order: Vec<usize> = (0..dist.len())
        .filter(|&i| weights.is_positive(i))
        .collect();
    let by_distance_desc = |&a: &usize, &b: &usize| dist[b].total_cmp(&dist[a]).then(a.cmp(&b));
    let take = empty.len().min(order.len());
    if take < order.len() {
        order.select_nth_unstable_by(take, by_distance_desc);
    }
    order.truncate(take);
    order.sort_by(by_distance_desc);
    let targets = order
        .iter()
        .flat_map(|&i| std::iter::repeat_n(i, weights.copies(i)));
    for (&cluster, point) in empty.iter().zip(targets) {
        lloyd.relocate(cluster, point)?;
    }
    Ok(())
}

/// Before any assignment there are no distances: clusters without weight take distinct random
/// points with weight (uniformly).
fn relocate_random(lloyd: &mut dyn Lloyd, weights: &Weighting, rng: &mut ChaCha8Rng) -> Result<()> {
    let sizes = lloyd.cluster_weights()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let positive = weights.positive();
    let points = sample(rng, positive, empty.len().min(positive));
    for (&cluster, p) in empty.iter().zip(points) {
        lloyd.relocate(cluster, weights.positive_row(p))?;
    }
    Ok(())
}
