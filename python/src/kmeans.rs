//! k-means: fit, and predict / transform against given centroids (the Python estimator keeps the
//! centroids as a NumPy array, so a fitted estimator pickles without any Rust object).

use crate::{engine, matrix, parse_device, value_error};
use kmeans_knn::{Init, KMeans, KMeansModel, KMeansParams, Metric, Precision};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

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

/// What a fit returns: centroids (k × d), labels, inertia, iterations, the backend's name.
type Fitted<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<u32>>,
    f64,
    usize,
    String,
);

/// Fits k-means. `init` is "k-means++" or "random" (k distinct points), or "centroids" with
/// `init_centroids` (k × d); `sample_weight`, when given, holds one weight per row.
#[pyfunction]
#[pyo3(signature = (
    x, k, init, init_centroids, n_init, max_iter, tol, seed, metric, precision, device,
    sample_weight=None, memory_budget=None
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
    .device(parse_device(device)?);
    let params = match memory_budget {
        Some(budget) => params.memory_budget(budget),
        None => params,
    };
    let data = matrix(&x)?;
    let weights = match &sample_weight {
        Some(w) => Some(w.as_slice().map_err(|_| {
            pyo3::exceptions::PyValueError::new_err("sample_weight must be C-contiguous")
        })?),
        None => None,
    };
    let model = engine(py, || match weights {
        Some(w) => params.fit_weighted(&data, w),
        None => params.fit(&data),
    })?;
    let centroids = model.centroids_array().into_pyarray(py);
    Ok((
        centroids,
        model.labels.into_pyarray(py),
        model.inertia,
        model.n_iter,
        model.device,
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
        device: String::new(),
    })
}
