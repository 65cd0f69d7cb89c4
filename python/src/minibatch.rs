//! Mini-batch k-means: fit, and one partial-fit step from the state the Python estimator keeps
//! as NumPy arrays and ints (centroids, counts, steps, rows since the last reassignment check),
//! so a fitted estimator pickles without any Rust object.

use crate::kmeans::stop_name;
use crate::{engine, matrix, parse_device, value_error};
use kmeans_knn::{
    Init, KMeansModel, MiniBatchKMeans, MiniBatchKMeansModel, MiniBatchParams, MiniBatchStep,
};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(minibatch_fit, m)?)?;
    m.add_function(wrap_pyfunction!(minibatch_partial_fit, m)?)
}

/// The parameters shared by fit and partial fit, from a dict with these keys.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct Settings<'py> {
    k: usize,
    init: String,
    init_centroids: Option<PyReadonlyArray2<'py, f32>>,
    n_init: Option<usize>,
    max_iter: usize,
    batch_size: usize,
    tol: f64,
    max_no_improvement: Option<usize>,
    init_size: Option<usize>,
    reassignment_ratio: f64,
    seed: u64,
    metric: String,
    device: String,
    compute_labels: bool,
    /// Whether fit hands back every step (for `verbose`).
    history: bool,
}

impl Settings<'_> {
    fn params(&self) -> PyResult<MiniBatchParams> {
        let init = match (self.init.as_str(), &self.init_centroids) {
            ("centroids", Some(c)) => Init::Centroids(c.as_array().iter().copied().collect()),
            (name, None) => name.parse().map_err(value_error)?,
            (name, Some(_)) => {
                return Err(PyValueError::new_err(format!(
                    "init '{name}' takes no centroids"
                )));
            }
        };
        Ok(MiniBatchKMeans::params(self.k)
            .init(init)
            .n_init(self.n_init)
            .max_iter(self.max_iter)
            .batch_size(self.batch_size)
            .tol(self.tol)
            .max_no_improvement(self.max_no_improvement)
            .init_size(self.init_size)
            .reassignment_ratio(self.reassignment_ratio)
            .seed(self.seed)
            .metric(self.metric.parse().map_err(value_error)?)
            .device(parse_device(&self.device)?)
            .compute_labels(self.compute_labels))
    }
}

/// One step of a fit as `verbose` prints it: step (from 1), steps at most, mean batch inertia,
/// its smoothed average (None on the first step), and why the fit stops there or None.
type Reported = (usize, usize, f64, Option<f64>, Option<&'static str>);

/// What the estimator keeps between calls: centroids (k × d), counts, steps, rows since the
/// last reassignment check.
type State<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<u64>>,
    usize,
    usize,
);

/// What a fit returns: the state, then labels (empty without `compute_labels`), inertia,
/// epochs, the backend's name and every step when asked for (else empty).
type Fitted<'py> = (
    State<'py>,
    Bound<'py, PyArray1<u32>>,
    f64,
    usize,
    String,
    Vec<Reported>,
);

fn fitted<'py>(py: Python<'py>, model: MiniBatchKMeansModel, steps: Vec<Reported>) -> Fitted<'py> {
    let state = (
        model.centroids_array().into_pyarray(py),
        model.counts.into_pyarray(py),
        model.n_steps,
        model.since_reassign,
    );
    let k = model.kmeans;
    (
        state,
        k.labels.into_pyarray(py),
        k.inertia,
        k.n_iter,
        k.device,
        steps,
    )
}

/// Fits mini-batch k-means on `x` with `settings` (a dict of the fields of [`Settings`]), each
/// row weighted by `sample_weight` when given.
#[pyfunction]
#[pyo3(signature = (x, settings, sample_weight=None))]
fn minibatch_fit<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f32>,
    settings: Settings<'py>,
    sample_weight: Option<PyReadonlyArray1<'py, f32>>,
) -> PyResult<Fitted<'py>> {
    // The steps are kept here and handed back: Python prints them after the fit.
    let reported: Arc<Mutex<Vec<Reported>>> = Arc::default();
    let params = if settings.history {
        let sink = Arc::clone(&reported);
        settings.params()?.on_step(move |s: &MiniBatchStep| {
            let entry = (
                s.step,
                s.n_steps,
                s.inertia,
                s.smoothed,
                s.stop.map(stop_name),
            );
            sink.lock().expect("not poisoned").push(entry);
        })
    } else {
        settings.params()?
    };
    let data = matrix(&x)?;
    let weights = crate::weights_of(&sample_weight)?;
    let model = engine(py, || match weights {
        Some(w) => params.fit_weighted(&data, w),
        None => params.fit(&data),
    })?;
    let steps = std::mem::take(&mut *reported.lock().expect("not poisoned"));
    Ok(fitted(py, model, steps))
}

/// One step on the piece `x`, continuing `state` (none: initialise from the piece first).
#[pyfunction]
fn minibatch_partial_fit<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f32>,
    state: Option<(
        PyReadonlyArray2<'py, f32>,
        PyReadonlyArray1<'py, u64>,
        usize,
        usize,
    )>,
    settings: Settings<'py>,
) -> PyResult<Fitted<'py>> {
    let params = settings.params()?;
    let previous = match state {
        None => None,
        Some((centroids, counts, n_steps, since_reassign)) => {
            let c = matrix(&centroids)?;
            let kmeans = KMeansModel {
                k: c.rows(),
                d: c.cols(),
                metric: settings.metric.parse().map_err(value_error)?,
                centroids: c.as_slice().to_vec(),
                labels: Vec::new(),
                cluster_sizes: Vec::new(),
                inertia: 0.0,
                n_iter: 0,
                converged: false,
                stop: None,
                device: String::new(),
            };
            Some(MiniBatchKMeansModel {
                kmeans,
                n_steps,
                counts: counts.as_array().to_vec(),
                since_reassign,
            })
        }
    };
    let data = matrix(&x)?;
    let model = engine(py, || params.partial_fit(previous.as_ref(), &data))?;
    Ok(fitted(py, model, Vec::new()))
}
