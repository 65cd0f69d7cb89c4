//! Whole-job rows of `gpu-bench` (`--whole`): the seeding alone and a whole `fit` (seeding,
//! every Lloyd iteration, the downloads), wall clock around the public API, as a user runs it.

use crate::data::Case;
use kmeans_knn::{Device, Init, KMeans, KMeansParams, MatrixView};
use std::time::Instant;

/// One whole-job measurement: medians over the repetitions.
#[derive(Debug)]
pub struct WholeJob {
    /// What ran, e.g. `fit kmeans++ to convergence`.
    pub what: String,
    /// `KMeansParams::initial_centroids` alone (data upload included).
    pub init_ms: f64,
    /// The whole `fit`.
    pub fit_ms: f64,
    pub n_iter: usize,
    pub inertia: f64,
}

/// The median of `v` (the upper middle value for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn wall_ms(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64() * 1e3
}

/// Times the seeding and the whole fit of `params` on `x`, `reps` times each after one warm-up.
pub fn measure(
    what: &str,
    x: &MatrixView<'_>,
    params: &KMeansParams,
    reps: usize,
) -> kmeans_knn::Result<WholeJob> {
    params.initial_centroids(x.clone())?;
    let (mut init, mut fit) = (vec![], vec![]);
    let mut last = None;
    for _ in 0..reps.max(1) {
        let mut r = Ok(vec![]);
        init.push(wall_ms(|| r = params.initial_centroids(x.clone())));
        r?;
        let mut m = None;
        fit.push(wall_ms(|| m = Some(params.fit(x.clone()))));
        last = m;
    }
    let model = last.expect("one repetition")?;
    Ok(WholeJob {
        what: what.to_string(),
        init_ms: median(init),
        fit_ms: median(fit),
        n_iter: model.n_iter,
        inertia: model.inertia,
    })
}

/// The whole-job runs of a case: the default init (k-means++; k-means‖ for E, where n·k is
/// largest) to convergence, and a fixed 20 iterations; for E also k-means++ to convergence, the
/// inertia k-means‖ is held to.
pub fn runs(case: &Case, device: Device) -> Vec<(String, KMeansParams)> {
    let init = if case.name == "E" {
        Init::KMeansParallel
    } else {
        Init::KMeansPlusPlus
    };
    let parallel = init == Init::KMeansParallel;
    let name = if parallel { "kmeans||" } else { "kmeans++" };
    let base = (KMeans::params(case.k).init(init).seed(0).device(device)).metric(case.metric);
    let mut runs = vec![
        (format!("fit {name} to convergence"), base.clone()),
        (
            format!("fit {name}, 20 iterations"),
            base.clone().max_iter(20).tol(0.0),
        ),
    ];
    if parallel {
        // The quality k-means‖ must keep: greedy k-means++'s converged inertia on the same rows.
        let greedy = base.init(Init::KMeansPlusPlus);
        runs.push(("fit kmeans++ to convergence".into(), greedy));
    }
    runs
}
