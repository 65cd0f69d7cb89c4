//! The backend-agnostic mini-batch loop: initialise on a subsample, then steps over random
//! batches with scikit-learn's reassignment of starved centroids and its early stopping on the
//! smoothed batch inertia; `partial_fit` makes one step per piece. Every random choice and every
//! float the decisions read (batch inertia, shift) is computed on the host from the backend's
//! bit-identical numbers, in a fixed order.

use super::{MiniBatchKMeansModel, MiniBatchParams, MiniBatchStep};
use crate::backend::vocab::CHUNK;
use crate::backend::{Backend, LloydSpec, MiniBatch};
use crate::error::{Error, Result};
use crate::kmeans::Stop;
use crate::kmeans::prepare::ColumnSummary;
use crate::kmeans::weights::Weighting;
use crate::kmeans::{Init, KMeansModel, init};
use crate::matrix::MatrixView;
use kernels_gpu::fixed::scale_exponent;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

pub(super) fn fit(
    params: &MiniBatchParams,
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
) -> Result<MiniBatchKMeansModel> {
    data.validate("the data")?;
    let (n, d, k) = (data.rows(), data.cols(), params.k);
    params.check(n, d)?;
    row_indices(n)?;
    let weights = match sample_weight {
        Some(w) => Weighting::new(w, n)?,
        None => Weighting::uniform(n),
    };
    weights.check_k(k)?;
    let batch = params.batch_for(n);
    let summary = ColumnSummary::of(data);
    let tol = params.tol * summary.mean_variance;
    let backend = params.device.backend()?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let start = initial_centroids(
        params,
        backend.as_ref(),
        data,
        sample_weight,
        &summary.max_abs,
        &mut rng,
    )?;
    let metric = params.metric;
    let mut steps = backend.minibatch(data, k, metric, &scales(&summary.max_abs, batch))?;
    steps.set_centroids(&start)?;

    let mut online = Online::new(k);
    let n_steps = params.max_iter.saturating_mul(n) / batch;
    let mut stop = EarlyStop::new(batch, n, tol, params.max_no_improvement);
    let (mut done, mut stopped) = (0, Stop::MaxIter);
    for step in 0..n_steps {
        // As scikit-learn: rows drawn in proportion to their weight, then stepped over unweighted.
        let rows: Vec<u32> = (0..batch).map(|_| draw(&weights, &mut rng)).collect();
        let ratio = params.reassignment_ratio;
        let stepped = online.step(steps.as_mut(), &rows, ratio, tol > 0.0, &mut rng)?;
        done = step + 1;
        let inertia = stepped.inertia / batch as f64;
        let early = stop.after(step, inertia, stepped.shift);
        if let Some(progress) = &params.progress {
            progress(&MiniBatchStep {
                step: done,
                n_steps,
                inertia,
                smoothed: stop.average,
                stop: early.or((done == n_steps).then_some(Stop::MaxIter)),
            });
        }
        if let Some(reason) = early {
            stopped = reason;
            break;
        }
    }
    let mut kmeans = if params.compute_labels {
        finish(steps.as_mut(), params, d, sample_weight, backend.describe())?
    } else {
        // As scikit-learn: no labels, and the smoothed batch inertia scaled to all the weight.
        let smoothed = stop.average.unwrap_or(0.0);
        let total: f64 = match sample_weight {
            Some(w) => w.iter().map(|&v| v as f64).sum(),
            None => n as f64,
        };
        unlabelled(
            steps.as_mut(),
            params,
            d,
            smoothed * total,
            backend.describe(),
        )?
    };
    kmeans.n_iter = (done * batch).div_ceil(n);
    kmeans.converged = stopped != Stop::MaxIter;
    kmeans.stop = Some(stopped);
    Ok(MiniBatchKMeansModel {
        kmeans,
        n_steps: done,
        counts: online.counts,
        since_reassign: online.since_reassign,
    })
}

pub(super) fn partial_fit(
    params: &MiniBatchParams,
    model: Option<&MiniBatchKMeansModel>,
    piece: &MatrixView<'_>,
) -> Result<MiniBatchKMeansModel> {
    piece.validate("the data")?;
    let (m, d, k) = (piece.rows(), piece.cols(), params.k);
    let rows: Vec<u32> = (0..row_indices(m)?).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let backend = params.device.backend()?;
    let summary = ColumnSummary::of(piece);
    let (start, mut online, n_steps) = match model {
        None => {
            params.check(m, d)?;
            let start = initial_centroids(
                params,
                backend.as_ref(),
                piece,
                None,
                &summary.max_abs,
                &mut rng,
            )?;
            (start, Online::new(k), 0)
        }
        Some(prev) => {
            check_continues(params, prev, piece)?;
            // Step s draws from stream s: the same pieces give the same model.
            rng.set_stream(prev.n_steps as u64);
            let online = Online {
                counts: prev.counts.clone(),
                since_reassign: prev.since_reassign,
            };
            (prev.centroids.clone(), online, prev.n_steps)
        }
    };
    let metric = params.metric;
    let mut steps = backend.minibatch(piece, k, metric, &scales(&summary.max_abs, m))?;
    steps.set_centroids(&start)?;
    steps.set_counts(&online.counts)?;
    let ratio = params.reassignment_ratio;
    online.step(steps.as_mut(), &rows, ratio, false, &mut rng)?;
    Ok(MiniBatchKMeansModel {
        kmeans: if params.compute_labels {
            finish(steps.as_mut(), params, d, None, backend.describe())?
        } else {
            unlabelled(steps.as_mut(), params, d, 0.0, backend.describe())?
        },
        n_steps: n_steps.saturating_add(1),
        counts: online.counts,
        since_reassign: online.since_reassign,
    })
}

/// `n` as the bound of u32 row indices (the batches' type).
fn row_indices(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::invalid(
            "the data",
            format!("mini-batch k-means takes at most 2^32 − 1 rows, got {n}"),
        )
    })
}

/// Checks that `prev` is a model these parameters can continue on `piece`.
fn check_continues(
    params: &MiniBatchParams,
    prev: &MiniBatchKMeansModel,
    piece: &MatrixView<'_>,
) -> Result<()> {
    params.check_settings(piece.cols())?;
    piece.expect_cols("the data", prev.d)?;
    if prev.k != params.k || prev.metric != params.metric {
        return Err(Error::invalid(
            "model",
            format!(
                "the model has k = {} and metric {}, the parameters k = {} and metric {}",
                prev.k, prev.metric, params.k, params.metric
            ),
        ));
    }
    if prev.centroids.len() != prev.k * prev.d || prev.counts.len() != prev.k {
        return Err(Error::invalid(
            "model",
            "the model's centroids or counts do not hold k × d and k values",
        ));
    }
    if prev.counts.iter().any(|&c| c > MAX_COUNT) {
        return Err(Error::invalid(
            "model",
            "a count of the model exceeds 2^53 rows (exact in f64)",
        ));
    }
    MatrixView::new(&prev.centroids, prev.k, prev.d)?.validate("the model's centroids")
}

/// The largest count a model may bring to `partial_fit`: exact in the f64 learning-rate update,
/// and far from overflowing as batches add to it.
const MAX_COUNT: u64 = 1 << 53;

/// Fixed-point exponents with room for `batch` addends.
fn scales(max_abs: &[f32], batch: usize) -> Vec<i32> {
    max_abs.iter().map(|&m| scale_exponent(m, batch)).collect()
}

/// A row drawn with probability proportional to its weight's units; without weights (or with
/// equal integer ones), the same draw as `rng.random_range(0..n)` in u32.
fn draw(weights: &Weighting, rng: &mut ChaCha8Rng) -> u32 {
    let total = weights.total();
    let unit = match u32::try_from(total) {
        Ok(total) => u64::from(rng.random_range(0..total)),
        Err(_) => rng.random_range(0..total),
    };
    // Rows are below 2^32 (checked by `row_indices`).
    weights.row_of(unit) as u32
}

/// The model of the current centroids: labels and (weighted) inertia of every resident row.
fn finish(
    steps: &mut dyn MiniBatch,
    params: &MiniBatchParams,
    d: usize,
    sample_weight: Option<&[f32]>,
    device: String,
) -> Result<KMeansModel> {
    let (labels, distances) = steps.assign_all()?;
    let mut cluster_sizes = vec![0u32; params.k];
    for &label in &labels {
        cluster_sizes[label as usize] += 1;
    }
    let mut model = unlabelled(
        steps,
        params,
        d,
        weighted_sum(&distances, sample_weight),
        device,
    )?;
    model.labels = labels;
    model.cluster_sizes = cluster_sizes;
    Ok(model)
}

/// The model of the current centroids with `inertia`, without labels.
fn unlabelled(
    steps: &mut dyn MiniBatch,
    params: &MiniBatchParams,
    d: usize,
    inertia: f64,
    device: String,
) -> Result<KMeansModel> {
    Ok(KMeansModel {
        k: params.k,
        d,
        metric: params.metric,
        centroids: steps.centroids()?,
        labels: Vec::new(),
        cluster_sizes: Vec::new(),
        inertia,
        n_iter: 0,
        converged: false,
        stop: None,
        device,
    })
}

/// Σ values (times their weights, in f64) in f64: `CHUNK`-value parts each summed in order,
/// then the parts in order — the same float for the same values whatever the number of threads.
fn weighted_sum(values: &[f32], weights: Option<&[f32]>) -> f64 {
    let parts: Vec<f64> = match weights {
        None => values
            .par_chunks(CHUNK)
            .map(|part| part.iter().map(|&v| v as f64).sum())
            .collect(),
        Some(w) => values
            .par_chunks(CHUNK)
            .zip(w.par_chunks(CHUNK))
            .map(|(part, w)| part.iter().zip(w).map(|(&v, &w)| v as f64 * w as f64).sum())
            .collect(),
    };
    parts.iter().sum()
}

/// What the steps carry: every centroid's count and the rows since the last reassignment check.
struct Online {
    counts: Vec<u64>,
    since_reassign: usize,
}

/// What one step reports to the loop.
struct Stepped {
    /// Σ distances of the batch rows (before the update), in batch order.
    inertia: f64,
    /// Σ over centroids (in order) of their squared shift; 0 unless asked for.
    shift: f64,
}

impl Online {
    fn new(k: usize) -> Self {
        Online {
            counts: vec![0; k],
            since_reassign: 0,
        }
    }

    /// One step on `rows`: assign and update, reassign starved centroids when due, then commit.
    fn step(
        &mut self,
        steps: &mut dyn MiniBatch,
        rows: &[u32],
        ratio: f64,
        shift: bool,
        rng: &mut ChaCha8Rng,
    ) -> Result<Stepped> {
        let due = self.reassignment_due(rows.len());
        let report = steps.step(rows)?;
        for (count, &b) in self.counts.iter_mut().zip(&report.counts) {
            *count += u64::from(b);
        }
        if due && ratio > 0.0 {
            self.reassign(steps, rows, ratio, rng)?;
        }
        let shift = if shift {
            steps.shifts()?.iter().sum()
        } else {
            0.0
        };
        steps.commit();
        Ok(Stepped {
            inertia: report.distances.iter().map(|&v| v as f64).sum(),
            shift,
        })
    }

    /// Whether this step reassigns (as scikit-learn: while a centroid has no rows, and every
    /// `10·k` rows).
    fn reassignment_due(&mut self, rows: usize) -> bool {
        self.since_reassign = self.since_reassign.saturating_add(rows);
        if self.counts.contains(&0) || self.since_reassign >= 10 * self.counts.len() {
            self.since_reassign = 0;
            return true;
        }
        false
    }

    /// Moves the centroids whose count is below `ratio` × the largest (at most half the batch,
    /// the lowest counts first) to distinct random rows of the batch, and gives them the lowest
    /// count of the others, so that they are not moved again at once.
    fn reassign(
        &mut self,
        steps: &mut dyn MiniBatch,
        rows: &[u32],
        ratio: f64,
        rng: &mut ChaCha8Rng,
    ) -> Result<()> {
        let counts = &mut self.counts;
        let largest = counts.iter().copied().max().unwrap_or(0) as f64;
        let mut starved: Vec<bool> = counts
            .iter()
            .map(|&c| (c as f64) < ratio * largest)
            .collect();
        let most = rows.len() / 2;
        if starved.iter().filter(|&&s| s).count() > most {
            let mut order: Vec<usize> = (0..counts.len()).collect();
            order.sort_by_key(|&c| (counts[c], c));
            order[most..].iter().for_each(|&c| starved[c] = false);
        }
        let moved: Vec<usize> = (0..counts.len()).filter(|&c| starved[c]).collect();
        if moved.is_empty() {
            return Ok(());
        }
        for (&c, at) in moved.iter().zip(sample(rng, rows.len(), moved.len())) {
            steps.relocate(c, rows[at] as usize)?;
        }
        // The largest count is never starved (ratio ≤ 1), so the others are not empty.
        let floor = (0..counts.len())
            .filter(|&c| !starved[c])
            .map(|c| counts[c])
            .min()
            .unwrap_or(0);
        moved.iter().for_each(|&c| counts[c] = floor);
        steps.set_counts(counts)
    }
}

/// scikit-learn's early stopping: an exponentially weighted average of the per-row batch
/// inertia (weight `2·batch / (n + 1)`), ignoring the first batch (it measures the
/// initialisation); stop on a squared shift at most `tol`, or after `patience` steps in a row
/// that do not lower the smallest average seen.
struct EarlyStop {
    alpha: f64,
    tol: f64,
    patience: Option<usize>,
    /// The smoothed per-row batch inertia (none before the second step).
    average: Option<f64>,
    lowest: Option<f64>,
    without_improvement: usize,
}

impl EarlyStop {
    fn new(batch: usize, n: usize, tol: f64, patience: Option<usize>) -> Self {
        EarlyStop {
            alpha: (2.0 * batch as f64 / (n as f64 + 1.0)).min(1.0),
            tol,
            patience,
            average: None,
            lowest: None,
            without_improvement: 0,
        }
    }

    /// Why to stop after step `step` (from 0) with per-row batch inertia `inertia`, if so.
    fn after(&mut self, step: usize, inertia: f64, shift: f64) -> Option<Stop> {
        if step == 0 {
            return None;
        }
        let average = match self.average {
            None => inertia,
            Some(a) => a * (1.0 - self.alpha) + inertia * self.alpha,
        };
        self.average = Some(average);
        if self.tol > 0.0 && shift <= self.tol {
            return Some(Stop::Tolerance);
        }
        if self.lowest.is_none_or(|lowest| average < lowest) {
            self.without_improvement = 0;
            self.lowest = Some(average);
        } else {
            self.without_improvement += 1;
        }
        self.patience
            .is_some_and(|p| self.without_improvement >= p)
            .then_some(Stop::NoImprovement)
    }
}

/// The starting centroids: given ones, or the best of `runs` initialisations, each computed on
/// `init_size` rows drawn with replacement and scored by its inertia on a further such draw.
fn initial_centroids(
    params: &MiniBatchParams,
    backend: &dyn Backend,
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
    max_abs: &[f32],
    rng: &mut ChaCha8Rng,
) -> Result<Vec<f32>> {
    if let Init::Centroids(c) = &params.init {
        return Ok(c.clone());
    }
    let (size, d) = (params.init_size_for(data.rows()), data.cols());
    let runs = params.runs();
    if runs == 1 {
        let (rows, weights) = subsample(data, sample_weight, size, rng);
        let sample = MatrixView::new(&rows, size, d)?;
        return seed(params, backend, &sample, weights.as_deref(), max_abs, rng);
    }
    let (held_out, held_out_weights) = subsample(data, sample_weight, size, rng);
    let held_out = MatrixView::new(&held_out, size, d)?;
    let mut scorer = backend.lloyd(&held_out, &LloydSpec::predict(params.k, d, params.metric))?;
    let mut best: Option<(f64, Vec<f32>)> = None;
    for _ in 0..runs {
        let (rows, weights) = subsample(data, sample_weight, size, rng);
        let sample = MatrixView::new(&rows, size, d)?;
        let centroids = seed(params, backend, &sample, weights.as_deref(), max_abs, rng)?;
        scorer.set_centroids(&centroids)?;
        scorer.assign()?;
        let inertia = weighted_sum(&scorer.min_distances()?, held_out_weights.as_deref());
        if best.as_ref().is_none_or(|(lowest, _)| inertia < *lowest) {
            best = Some((inertia, centroids));
        }
    }
    best.map(|(_, c)| c)
        .ok_or_else(|| Error::invalid("n_init", "n_init must be at least 1"))
}

/// `size` rows drawn uniformly with replacement (as scikit-learn), row-major, and their weights.
fn subsample(
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
    size: usize,
    rng: &mut ChaCha8Rng,
) -> (Vec<f32>, Option<Vec<f32>>) {
    let rows: Vec<usize> = (0..size)
        .map(|_| rng.random_range(0..data.rows()))
        .collect();
    let weights = sample_weight.map(|w| rows.iter().map(|&r| w[r]).collect());
    (init::gather(data, &rows), weights)
}

/// Centroids seeded on the rows of `sample`, weighted by `sample_weight` when given (k-means++
/// and k-means‖ on the backend).
fn seed(
    params: &MiniBatchParams,
    backend: &dyn Backend,
    sample: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
    max_abs: &[f32],
    rng: &mut ChaCha8Rng,
) -> Result<Vec<f32>> {
    let (size, k, metric) = (sample.rows(), params.k, params.metric);
    let weights = match sample_weight {
        Some(w) => Weighting::new(w, size).map_err(|_| {
            Error::invalid(
                "sample_weight",
                "the rows drawn for the initialisation all have weight 0 (raise init_size)",
            )
        })?,
        None => Weighting::uniform(size),
    };
    weights.check_k(k)?;
    if params.init == Init::RandomPoints {
        return Ok(init::random_points(sample, k, &weights, rng));
    }
    let ws = init::weight_scale(max_abs, weights.total(), metric);
    let spec = LloydSpec::predict(k, sample.cols(), metric);
    let mut lloyd = backend.lloyd(sample, &spec)?;
    let rows = match params.init {
        Init::KMeansPlusPlus => init::kmeans_plus_plus(lloyd.as_mut(), &weights, k, ws, rng)?,
        Init::KMeansParallel => {
            init::kmeans_parallel(lloyd.as_mut(), k, metric, sample.cols(), ws, &weights, rng)?
        }
        _ => {
            return Err(Error::invalid(
                "init",
                "only kmeans++, kmeans|| and random are seeded",
            ));
        }
    };
    Ok(init::gather(sample, &rows))
}
