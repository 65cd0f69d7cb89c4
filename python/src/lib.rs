//! `kmeans_knn._engine`: the thin layer between the Python estimators (`python/kmeans_knn/`) and
//! the `kmeans_knn` library. Arrays come in as float32 (a C-contiguous one is borrowed, never
//! copied), every computation runs with the GIL released, and library errors become Python
//! exceptions: bad parameters or data → `ValueError`, GPU trouble → `RuntimeError`.

mod kmeans;
mod knn;
mod minibatch;
mod shard;

use kmeans_knn::{Device, Error, MatrixView};
use numpy::{PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Seconds of the last engine call, as f64 bits (for the benchmark's overhead figure).
static LAST_ENGINE_SECONDS: AtomicU64 = AtomicU64::new(0);

#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(last_engine_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(describe_device, m)?)?;
    m.add_function(wrap_pyfunction!(warmup, m)?)?;
    kmeans::register(m)?;
    shard::register(m)?;
    minibatch::register(m)?;
    knn::register(m)
}

/// Wall-clock seconds that the last engine call spent in the library, GIL released.
#[pyfunction]
fn last_engine_seconds() -> f64 {
    f64::from_bits(LAST_ENGINE_SECONDS.load(Ordering::Relaxed))
}

/// The backend a device string runs on, e.g. `cpu (16 threads)` or `cuda:0 (NVIDIA H100 …)`.
#[pyfunction]
fn describe_device(py: Python<'_>, device: &str) -> PyResult<String> {
    let device = parse_device(device)?;
    engine(py, || device.describe())
}

/// Starts `device` now (for a GPU: the driver, its context and the kernels, about 0.3 s with
/// one GPU visible, and a tiny fit and search that take on the first calls' one-time costs), so
/// that a server's first fit or search costs what later ones do; returns what it started, as
/// `describe_device`. The driver starts every GPU the process sees: set `CUDA_VISIBLE_DEVICES`
/// before importing to let it start only those you use.
#[pyfunction]
#[pyo3(signature = (device = "auto"))]
fn warmup(py: Python<'_>, device: &str) -> PyResult<String> {
    let device = parse_device(device)?;
    engine(py, || kmeans_knn::warm_up(device))
}

/// Runs `f` with the GIL released, records its duration, and maps its error.
fn engine<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> kmeans_knn::Result<T> + Send,
) -> PyResult<T> {
    let result = py.detach(|| {
        let start = Instant::now();
        let result = f();
        let seconds = start.elapsed().as_secs_f64();
        LAST_ENGINE_SECONDS.store(seconds.to_bits(), Ordering::Relaxed);
        result
    });
    result.map_err(to_py_err)
}

/// As [`engine`], on `threads` CPU threads when given (scikit-learn's `n_jobs`; the answers do
/// not depend on it; the library keeps one pool per count), else on the process's pool.
fn engine_on<T: Send>(
    py: Python<'_>,
    threads: Option<usize>,
    f: impl FnOnce() -> kmeans_knn::Result<T> + Send,
) -> PyResult<T> {
    match threads {
        None => engine(py, f),
        Some(threads) => engine(py, || kmeans_knn::with_threads(threads.max(1), f)?),
    }
}

/// The engine's errors as Python exceptions, in the estimators' terms: a missing GPU names the
/// `device` parameter (the engine's text speaks of the command line's flag).
fn to_py_err(e: Error) -> PyErr {
    match e {
        Error::NoGpu(_) | Error::UnsupportedDriver(_) => {
            let reason = e.to_string().replace(", or use --device cpu", "");
            PyRuntimeError::new_err(format!(
                "the device parameter asks for a CUDA GPU, but: {reason}. \
                 Pass device=\"cpu\" (or \"auto\", which falls back to the CPU) to run without one"
            ))
        }
        Error::GpuOutOfMemory { .. } | Error::Cuda { .. } | Error::Shard(_) => {
            PyRuntimeError::new_err(e.to_string())
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn value_error(e: Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn parse_device(device: &str) -> PyResult<Device> {
    device.parse().map_err(value_error)
}

/// The weights a fit was given, borrowed (the Python side hands over C-contiguous arrays).
fn weights_of<'a>(w: &'a Option<numpy::PyReadonlyArray1<'_, f32>>) -> PyResult<Option<&'a [f32]>> {
    w.as_ref()
        .map(|w| {
            w.as_slice()
                .map_err(|_| PyValueError::new_err("sample_weight must be C-contiguous"))
        })
        .transpose()
}

/// A 2-D float32 array as the library's matrix: borrowed when C-contiguous, else copied in row
/// order (the Python side hands over C-contiguous arrays, so the copy is a safety net).
fn matrix<'a>(a: &'a PyReadonlyArray2<'_, f32>) -> PyResult<MatrixView<'a>> {
    let [rows, cols] = [a.shape()[0], a.shape()[1]];
    match a.as_slice() {
        Ok(values) => MatrixView::new(values, rows, cols).map_err(value_error),
        Err(_) => Ok(MatrixView::from(a.as_array())),
    }
}
