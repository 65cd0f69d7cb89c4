//! k-means: fit, and predict / transform against given centroids (the Python estimator keeps the
//! centroids as a NumPy array, so a fitted estimator pickles without any Rust object).

use crate::{engine, matrix, parse_device, value_error};
use kmeans_knn::{
    EmptyClusters, Init, Iteration, KMeans, KMeansModel, KMeansParams, Metric, Precision, Stop,
};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kmeans_fit, m)?)?;
    m.add_function(wrap_pyfunction!(kmeans_predict, m)?)?;
    m.add_function(wrap_pyfunction!(kmeans_transform, m)?)?;
    m.add_function(wrap_pyfunction!(kmeans_metric, m)?)
}

/// The canonical name ("l2", "l1" or "cosine") of a k-means metric name.
#[pyfunction]
fn kmeans_metric(metric: &str) -> PyResult<String> {
    Ok(metric.parse::<Metric>().map_err(value_error)?.to_string())
}

/// One iteration of a run as `verbose` prints it: run, iteration (from 1), inertia of its
/// assignment, squared centroid shift of its update, and why the run stops there (see
/// [`stop_name`]) or None.
type Reported = (usize, usize, f64, f64, Option<&'static str>);

/// What a fit returns: centroids (k × d), labels, inertia, iterations as scikit-learn counts
/// them (see [`Stop`]), the backend's name, and every iteration when asked for (else empty).
type Fitted<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<u32>>,
    f64,
    usize,
    String,
    Vec<Reported>,
);

/// The name Python reads for why a run stopped.
pub(crate) fn stop_name(stop: Stop) -> &'static str {
    match stop {
        Stop::Unchanged => "unchanged",
        Stop::Tolerance => "tolerance",
        Stop::NoImprovement => "no_improvement",
        Stop::MaxIter => "max_iter",
    }
}

/// Iterations as scikit-learn's `n_iter_` counts them: the assignment that finds the labels
/// unchanged is one more.
pub(crate) fn sklearn_n_iter(model: &KMeansModel) -> usize {
    model.n_iter + usize::from(model.stop == Some(Stop::Unchanged))
}

/// Fits k-means. `init` is "k-means++" or "random" (k distinct points), or "centroids" with
/// `init_centroids` (k × d); `sample_weight`, when given, holds one weight per row. Empty
/// clusters follow scikit-learn's rule (`EmptyClusters::TakeFarthestPoint`); with
/// `absolute_tol`, `tol` is the bound on the squared shift itself (the caller scales it).
#[pyfunction]
#[pyo3(signature = (
    x, k, init, init_centroids, n_init, max_iter, tol, seed, metric, precision, device,
    sample_weight=None, memory_budget=None, history=false, absolute_tol=false
))]
#[allow(clippy::too_many_arguments)]
fn kmeans_fit<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f32>,
    k: usize,
    init: &str,
    init_centroids: Option<PyReadonlyArray2<'py, f32>>,
    n_init: usize,
    max_iter: usize,
    tol: f64,
    seed: u64,
    metric: &str,
    precision: &str,
    device: &str,
    sample_weight: Option<PyReadonlyArray1<'py, f32>>,
    memory_budget: Option<usize>,
    history: bool,
    absolute_tol: bool,
) -> PyResult<Fitted<'py>> {
    let params = params(
        k,
        init,
        init_centroids,
        n_init,
        max_iter,
        tol,
        seed,
        metric,
        precision,
    )?
    .device(parse_device(device)?)
    .empty_clusters(EmptyClusters::TakeFarthestPoint);
    let params = match absolute_tol {
        true => params.absolute_tol(tol),
        false => params,
    };
    let params = match memory_budget {
        Some(budget) => params.memory_budget(budget),
        None => params,
    };
    // The iterations are kept here and handed back: Python prints them after the fit.
    let reported: Arc<Mutex<Vec<Reported>>> = Arc::default();
    let params = if history {
        let sink = Arc::clone(&reported);
        params.on_iteration(move |it: &Iteration| {
            let entry = (
                it.run,
                it.iteration,
                it.inertia,
                it.shift,
                it.stop.map(stop_name),
            );
            sink.lock().expect("not poisoned").push(entry);
        })
    } else {
        params
    };
    let data = matrix(&x)?;
    let weights = crate::weights_of(&sample_weight)?;
    let model = engine(py, || match weights {
        Some(w) => params.fit_weighted(&data, w),
        None => params.fit(&data),
    })?;
    let centroids = model.centroids_array().into_pyarray(py);
    let n_iter = sklearn_n_iter(&model);
    let reported = std::mem::take(&mut *reported.lock().expect("not poisoned"));
    Ok((
        centroids,
        model.labels.into_pyarray(py),
        model.inertia,
        n_iter,
        model.device,
        reported,
    ))
}

/// The library's parameters for the estimator's (see `kmeans_fit`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn params(
    k: usize,
    init: &str,
    init_centroids: Option<PyReadonlyArray2<'_, f32>>,
    n_init: usize,
    max_iter: usize,
    tol: f64,
    seed: u64,
    metric: &str,
    precision: &str,
) -> PyResult<KMeansParams> {
    let init = match (init, init_centroids) {
        ("centroids", Some(c)) => Init::Centroids(c.as_array().iter().copied().collect()),
        (name, None) => name.parse().map_err(value_error)?,
        (name, Some(_)) => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "init '{name}' takes no centroids"
            )));
        }
    };
    Ok(KMeans::params(k)
        .init(init)
        .n_init(n_init)
        .max_iter(max_iter)
        .tol(tol)
        .seed(seed)
        .metric(metric.parse().map_err(value_error)?)
        .precision(precision.parse::<Precision>().map_err(value_error)?))
}

/// Nearest centroid of every row of `x`, on `device`.
#[pyfunction]
fn kmeans_predict<'py>(
    py: Python<'py>,
    centroids: PyReadonlyArray2<'py, f32>,
    x: PyReadonlyArray2<'py, f32>,
    metric: &str,
    device: &str,
) -> PyResult<Bound<'py, PyArray1<u32>>> {
    let model = model(&centroids, metric)?;
    let device = parse_device(device)?;
    let data = matrix(&x)?;
    Ok(engine(py, || model.predict_on(&data, device))?.into_pyarray(py))
}

/// Distance of every row of `x` to every centroid (Euclidean for l2, Manhattan for l1, 1 − cos
/// for cosine).
#[pyfunction]
fn kmeans_transform<'py>(
    py: Python<'py>,
    centroids: PyReadonlyArray2<'py, f32>,
    x: PyReadonlyArray2<'py, f32>,
    metric: &str,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let model = model(&centroids, metric)?;
    let data = matrix(&x)?;
    Ok(engine(py, || model.transform(&data))?.into_pyarray(py))
}

/// A model made of centroids alone: predict and transform need nothing else.
fn model(centroids: &PyReadonlyArray2<'_, f32>, metric: &str) -> PyResult<KMeansModel> {
    let c = matrix(centroids)?;
    let metric: Metric = metric.parse().map_err(value_error)?;
    Ok(KMeansModel {
        k: c.rows(),
        d: c.cols(),
        metric,
        centroids: c.as_slice().to_vec(),
        labels: Vec::new(),
        cluster_sizes: Vec::new(),
        inertia: 0.0,
        n_iter: 0,
        converged: true,
        stop: None,
        device: String::new(),
    })
}
