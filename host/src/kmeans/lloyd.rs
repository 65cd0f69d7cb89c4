//! The backend-agnostic Lloyd loop: initialise, then assign → update until labels stop changing,
//! the centroid shift drops under tol, or max_iter; keep the best of n_init runs. The same loop
//! drives a fit over one backend's rows ([`fit`]) and over shards (`super::shard`, which calls
//! [`drive`]).

use super::init::{self, Start};
use super::prepare::Prepared;
use super::weights::Weighting;
use super::{EmptyClusters, Init, Iteration, KMeansModel, KMeansParams, Stop};
use crate::backend::{AssignStats, Lloyd, StepRun};
use crate::beside::Beside;
use crate::error::{Error, Result};
use crate::matrix::MatrixView;
use kernels_gpu::seeding::WeightScale;
use kernels_gpu::small::HaltRule;
use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

/// What a fit knows before its first step, from all of its rows ([`Prepared`] for one
/// process; the shards' survey for a sharded fit).
pub(super) struct Setup<'a> {
    /// Columns.
    pub d: usize,
    /// `params.tol` times the weighted mean per-feature variance (asked for once a run's
    /// seeding is done, so that it may be computed beside the seeding).
    pub tol: &'a (dyn Fn() -> f64 + Sync),
    /// The seeding weights' scale.
    pub seeding: WeightScale,
    /// The rows' weights in units.
    pub weights: &'a Weighting,
    /// The given initial centroids (unit rows for cosine), with [`Init::Centroids`].
    pub init_centroids: Option<&'a [f32]>,
}

impl Prepared<'_> {
    /// What the Lloyd loop needs of this fit, with its `tol`.
    pub(super) fn setup<'s>(&'s self, tol: &'s (dyn Fn() -> f64 + Sync)) -> Setup<'s> {
        Setup {
            d: self.data.cols(),
            tol,
            seeding: self.seeding,
            weights: &self.weights,
            init_centroids: self.init_centroids.as_deref(),
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
    pub stop: Stop,
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
            stop: Some(self.stop),
            device,
        }
    }
}

pub(super) fn fit(
    params: &KMeansParams,
    data: &MatrixView<'_>,
    sample_weight: Option<&[f32]>,
) -> Result<KMeansModel> {
    let prepared = Prepared::new(params, data, sample_weight)?;
    // The pass over every row that `tol` takes (~2 ms for seed 000's rows on 16 threads) runs
    // while the backend takes the rows and seeds.
    let tol = Beside::new(|| prepared.tol(params));
    tol.during(|| {
        let backend = params.device.backend()?;
        let mut lloyd = backend.lloyd(&prepared.data, &prepared.spec(params))?;
        let fitted = drive(params, lloyd.as_mut(), &prepared.setup(&|| tol.get()))?;
        Ok(fitted.into_model(params, lloyd.labels()?, backend.describe()))
    })
}

/// The `n_init` runs of a fit over `lloyd`, which holds all of its rows (here, or spread over
/// shards): returns the run of lowest inertia (the earliest of equals), whose labels `lloyd`
/// holds at the end.
pub(super) fn drive(
    params: &KMeansParams,
    lloyd: &mut dyn Lloyd,
    setup: &Setup<'_>,
) -> Result<Fitted> {
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let mut best: Option<(usize, Fitted)> = None;
    for run in 0..params.n_init {
        let start = start(params, lloyd, setup, &mut rng)?;
        let result = run_once(lloyd, start, params, setup, run, &mut rng)?;
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
    setup: &Setup<'_>,
    rng: &mut ChaCha8Rng,
) -> Result<Start> {
    let (weights, ws, k) = (setup.weights, setup.seeding, params.k);
    Ok(match &params.init {
        Init::KMeansPlusPlus => {
            let rows = init::kmeans_plus_plus(lloyd, weights, k, ws, rng)?;
            Start::Centroids(lloyd.gather(&rows)?)
        }
        Init::KMeansParallel => {
            let rows = init::kmeans_parallel(lloyd, k, params.metric, setup.d, ws, weights, rng)?;
            Start::Centroids(lloyd.gather(&rows)?)
        }
        Init::RandomPoints => Start::Centroids(lloyd.gather(&init::random_rows(k, weights, rng))?),
        Init::RandomLabels => Start::Labels(init::random_labels(weights.rows(), k, rng)),
        Init::Centroids(_) => Start::Centroids(
            setup
                .init_centroids
                .expect("prepared with the initial centroids")
                .to_vec(),
        ),
    })
}

/// The centroids that the first run of a fit starts from (validated as `fit` does).
pub(super) fn initial_centroids(params: &KMeansParams, data: &MatrixView<'_>) -> Result<Vec<f32>> {
    let prepared = Prepared::new(params, data, None)?;
    let backend = params.device.backend()?;
    let mut lloyd = backend.lloyd(&prepared.data, &prepared.spec(params))?;
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    // Seeding asks for no `tol`.
    match start(params, lloyd.as_mut(), &prepared.setup(&|| 0.0), &mut rng)? {
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
    setup: &Setup<'_>,
    run: usize,
    rng: &mut ChaCha8Rng,
) -> Result<Fitted> {
    let (tol, weights) = ((setup.tol)(), setup.weights);
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
    let mut consistent = false;
    let report = |iteration: &Iteration| {
        if let Some(progress) = &params.progress {
            progress(iteration);
        }
    };
    let stop = loop {
        if n_iter == params.max_iter {
            stats = lloyd.assign()?;
            consistent = true;
            break Stop::MaxIter;
        }
        let run_of_steps = step_run(params, tol, n_iter, labels_known);
        let steps = lloyd.steps(&run_of_steps)?;
        let (&step, passed) = steps.split_last().expect("a run of steps has one");
        for (i, s) in passed.iter().enumerate() {
            // Steps that met no halt rule: the loop neither stops nor acts on them, and the
            // backend committed them.
            let rule = run_of_steps.halt(i);
            debug_assert!(!rule.halts(s.assign.changed.min(1) as u32, s.empty as u32, s.shift));
            n_iter += 1;
            report(&Iteration {
                run,
                iteration: n_iter,
                changed: s.assign.changed,
                inertia: s.assign.inertia,
                shift: s.shift,
                stop: None,
            });
        }
        stats = step.assign;
        if stats.changed == 0 && (n_iter > 0 || labels_known) {
            // The current centroids are the means of exactly these labels (points without weight
            // count for nothing in them): a fixed point.
            consistent = true;
            report(&Iteration {
                run,
                iteration: n_iter + 1,
                changed: 0,
                inertia: stats.inertia,
                shift: 0.0,
                stop: Some(Stop::Unchanged),
            });
            break Stop::Unchanged;
        }
        let mut shift = step.shift;
        if step.empty > 0 && params.empty_clusters != EmptyClusters::KeepPrevious {
            match params.empty_clusters {
                EmptyClusters::TakeFarthestPoint => take_farthest(lloyd)?,
                _ => relocate_farthest(lloyd, weights)?,
            }
            shift = lloyd.shift()?;
        }
        lloyd.commit();
        n_iter += 1;
        let stop = if within_tol(lloyd, shift, tol)? {
            Some(Stop::Tolerance)
        } else {
            (n_iter == params.max_iter).then_some(Stop::MaxIter)
        };
        report(&Iteration {
            run,
            iteration: n_iter,
            changed: stats.changed,
            inertia: stats.inertia,
            shift,
            stop,
        });
        if stop == Some(Stop::Tolerance) {
            break Stop::Tolerance;
        }
    };
    if !consistent {
        // Labels and inertia must belong to the centroids that are returned.
        stats = lloyd.assign()?;
    }
    Ok(Fitted {
        centroids: lloyd.centroids()?,
        sizes: lloyd.sizes()?,
        inertia: stats.inertia,
        n_iter,
        converged: stop != Stop::MaxIter,
        stop,
    })
}

/// The steps that the loop may have `lloyd` queue at once from iteration `n_iter`: up to
/// `max_iter`, halting after any step that the loop would stop at or act on (no label changed
/// after the first step, or after one from known labels; a cluster left empty that the policy
/// relocates; a shift that [`within_tol`] could find within `tol`, with room for its rounding).
fn step_run(params: &KMeansParams, tol: f64, n_iter: usize, labels_known: bool) -> StepRun {
    StepRun {
        max: params.max_iter - n_iter,
        first_halt: HaltRule {
            shift: tol + 2e-6 * tol,
            unchanged: n_iter > 0 || labels_known,
            empty: params.empty_clusters != EmptyClusters::KeepPrevious,
        },
    }
}

/// Whether a squared shift `shift` reported by `lloyd` is at most `tol`. A backend may sum the
/// shift's terms in an order of its own (the GPU does); where that order could decide otherwise
/// than the host's (within 10⁻⁶ of tol, far beyond the rounding of any order), the host's
/// [`Lloyd::exact_shift`] decides, so that every backend and every split of the rows stops at
/// the same iteration. (After the commit, the shift is between the current and the previous
/// centroids; `exact_shift` is asked before the next step, so it compares the same pair.)
fn within_tol(lloyd: &mut dyn Lloyd, shift: f64, tol: f64) -> Result<bool> {
    if (shift - tol).abs() <= 1e-6 * tol {
        Ok(lloyd.exact_shift()? <= tol)
    } else {
        Ok(shift <= tol)
    }
}

/// Moves each cluster without weight to the point with weight farthest from its centroid (ties:
/// lowest index); a point of weight w > 1 takes up to ⌈w⌉ of them in turn, as w copies of it
/// would. Points on their centroid are never taken (as scikit-learn: with more clusters than
/// distinct points, the extra ones keep their centroid rather than duplicate another).
fn relocate_farthest(lloyd: &mut dyn Lloyd, weights: &Weighting) -> Result<()> {
    let sizes = lloyd.cluster_weights()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let farthest = lloyd.farthest(empty.len())?;
    let targets = farthest
        .iter()
        .filter(|f| f.distance > 0.0)
        .flat_map(|f| std::iter::repeat_n(f.row as usize, weights.copies(f.row as usize)));
    for (&cluster, point) in empty.iter().zip(targets) {
        lloyd.relocate(cluster, point)?;
    }
    Ok(())
}

/// scikit-learn's relocation (`_relocate_empty_clusters_dense`, then `_average_centers`): the
/// clusters without weight take the points with weight farthest from their centroids, one each,
/// farthest first (none when the farthest is on its centroid), and each point leaves its
/// cluster with its weight before the means are taken. The means are those of the labels with
/// the points moved, as every backend's update computes them (exact sums: the same bits on
/// every backend and split); the labels then go back to the assignment's, which the next
/// assignment's count of changes compares with (as scikit-learn's). A cluster still without
/// weight takes the mean of the heaviest cluster (the first of equals).
fn take_farthest(lloyd: &mut dyn Lloyd) -> Result<()> {
    let sizes = lloyd.cluster_weights()?;
    let empty: Vec<usize> = (0..sizes.len()).filter(|&c| sizes[c] == 0).collect();
    let farthest = lloyd.farthest(empty.len())?;
    if farthest.first().is_some_and(|f| f.distance > 0.0) {
        let assigned = lloyd.labels()?;
        let mut moved = assigned.clone();
        for (&cluster, f) in empty.iter().zip(&farthest) {
            moved[f.row as usize] = cluster as u32;
        }
        lloyd.set_labels(&moved)?;
        lloyd.update()?;
        lloyd.set_labels(&assigned)?;
    }
    let weights = lloyd.cluster_weights()?;
    let heaviest = (0..weights.len())
        .min_by_key(|&c| (std::cmp::Reverse(weights[c]), c))
        .expect("k ≥ 1");
    for cluster in (0..weights.len()).filter(|&c| weights[c] == 0) {
        lloyd.copy_next_row(heaviest, cluster)?;
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
