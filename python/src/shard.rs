//! Sharded k-means for `kmeans_knn.dask`: a `Shard` that a worker keeps resident, and the
//! client's fit, which reaches the shards through a Python transport object (Dask futures). The
//! messages are the library's `Request`/`Reply` bytes; all the arithmetic stays in Rust.

use crate::{engine, matrix, parse_device, to_py_err, value_error};
use kmeans_knn::kmeans::shard::{self, Partial, Reply, Request, Transport};
use kmeans_knn::{Error, MatrixView};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Mutex;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Shard>()?;
    m.add_class::<PartialSum>()?;
    m.add_function(wrap_pyfunction!(kmeans_fit_sharded, m)?)?;
    m.add_function(wrap_pyfunction!(request_name, m)?)?;
    m.add_function(wrap_pyfunction!(add_partials, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_count, m)?)
}

/// The name of the request in `request` bytes (e.g. "Step"); None for bytes that are not one.
#[pyfunction]
fn request_name(request: &[u8]) -> Option<&'static str> {
    Request::name_of(request)
}

/// The sum of `replies` (`Reply::to_bytes` of partials of the same shape, at least one) as one
/// such reply: a worker's partitions' answers to a step, added up before they leave it.
#[pyfunction]
fn add_partials<'py>(
    py: Python<'py>,
    replies: Vec<Bound<'py, PyBytes>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let sum = PartialSum::default();
    for reply in &replies {
        sum.add(py, reply.as_bytes())?;
    }
    let total = sum.take().map_err(to_py_err)?;
    Ok(PyBytes::new(py, &Reply::Partial(total).to_bytes()))
}

/// Step replies (`Reply::to_bytes` of partials of the same shape) added up one by one as they
/// arrive, so that only the last one's decoding and adding waits for the last worker.
#[pyclass(frozen, module = "kmeans_knn._engine")]
#[derive(Default)]
struct PartialSum {
    /// The sum so far and the replies in it.
    total: Mutex<(Option<Partial>, usize)>,
}

#[pymethods]
impl PartialSum {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Adds one reply.
    fn add(&self, py: Python<'_>, reply: &[u8]) -> PyResult<()> {
        py.detach(|| {
            let Reply::Partial(p) = Reply::from_bytes(reply)? else {
                return Err(Error::Shard("not a step's partial reply".into()));
            };
            let mut total = self.lock();
            let (sum, count) = &mut *total;
            match sum {
                None => *sum = Some(p),
                Some(s) if s.sums.len() == p.sums.len() && s.weights.len() == p.weights.len() => {
                    s.merge(&p)
                }
                Some(s) => {
                    return Err(Error::Shard(format!(
                        "reply {count} is not a step's partial sums of {} clusters of {} \
                         dimensions",
                        s.weights.len(),
                        s.sums.len() / s.weights.len().max(1)
                    )));
                }
            }
            *count += 1;
            Ok(())
        })
        .map_err(to_py_err)
    }
}

impl PartialSum {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Partial>, usize)> {
        self.total.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sum of the replies added (an error if none was).
    fn take(&self) -> kmeans_knn::Result<Partial> {
        self.lock()
            .0
            .take()
            .ok_or_else(|| Error::Shard("no step's partial reply was added".into()))
    }
}

/// CUDA devices this process sees (0 without a usable driver); makes no CUDA context.
#[pyfunction]
fn gpu_count() -> usize {
    kmeans_knn::gpu_count()
}

/// Rows of the whole data set held on this process's device for a sharded fit (a copy of
/// `rows`, rows `first_row..` of the whole set).
#[pyclass(frozen, module = "kmeans_knn._engine")]
struct Shard {
    shard: Mutex<shard::Shard>,
}

#[pymethods]
impl Shard {
    #[new]
    fn new(
        py: Python<'_>,
        rows: PyReadonlyArray2<'_, f32>,
        first_row: u64,
        device: &str,
    ) -> PyResult<Self> {
        let device = parse_device(device)?;
        let view = matrix(&rows)?;
        let (n, d) = (view.rows(), view.cols());
        let owned = MatrixView::from_vec(view.as_slice().to_vec(), n, d).map_err(value_error)?;
        let shard = engine(py, || shard::Shard::new(owned, first_row, device))?;
        Ok(Shard {
            shard: Mutex::new(shard),
        })
    }

    /// Rows held.
    fn rows(&self) -> usize {
        self.lock().rows()
    }

    /// The backend the rows live on.
    fn device(&self) -> String {
        self.lock().device()
    }

    /// Answers a request (`Request::to_bytes`) with a reply (`Reply::to_bytes`).
    fn handle<'py>(&self, py: Python<'py>, request: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let reply = engine(py, || {
            let request = Request::from_bytes(request)?;
            self.lock().handle(&request).map(|r| r.to_bytes())
        })?;
        Ok(PyBytes::new(py, &reply))
    }

    /// The labels of the last assignment.
    fn labels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let labels = engine(py, || match self.lock().handle(&Request::Labels)? {
            Reply::Labels(l) => Ok(l),
            _ => Err(Error::Shard("no labels".into())),
        })?;
        Ok(labels.into_pyarray(py))
    }
}

impl Shard {
    fn lock(&self) -> std::sync::MutexGuard<'_, shard::Shard> {
        self.shard.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A transport that hands request bytes to a Python object with methods `broadcast(bytes)` and
/// `scatter(list of bytes)`, each returning a list of reply bytes in shard order, and
/// `partial(bytes)`, returning a `PartialSum` of replies that add up to every shard's. A Python
/// exception is kept to be raised as it is once the fit has stopped.
struct PyTransport {
    shards: Py<PyAny>,
    error: Option<PyErr>,
}

impl PyTransport {
    fn call(
        &mut self,
        method: &str,
        arg: impl FnOnce(Python<'_>) -> PyResult<Py<PyAny>>,
    ) -> kmeans_knn::Result<Vec<Reply>> {
        let result = Python::attach(|py| -> PyResult<kmeans_knn::Result<Vec<Reply>>> {
            let arg = arg(py)?;
            let replies = self.shards.bind(py).call_method1(method, (arg,))?;
            let mut out = Vec::new();
            for reply in replies.try_iter()? {
                let reply = reply?.cast_into::<PyBytes>()?;
                match Reply::from_bytes(reply.as_bytes()) {
                    Ok(r) => out.push(r),
                    Err(e) => return Ok(Err(e)),
                }
            }
            Ok(Ok(out))
        });
        result.unwrap_or_else(|e| {
            let message = e.to_string();
            self.error = Some(e);
            Err(Error::Shard(message))
        })
    }
}

impl Transport for PyTransport {
    fn broadcast(&mut self, request: &Request) -> kmeans_knn::Result<Vec<Reply>> {
        let bytes = request.to_bytes();
        self.call("broadcast", |py| {
            Ok(PyBytes::new(py, &bytes).into_any().unbind())
        })
    }

    fn scatter(&mut self, requests: Vec<Request>) -> kmeans_knn::Result<Vec<Reply>> {
        let bytes: Vec<Vec<u8>> = requests.iter().map(Request::to_bytes).collect();
        self.call("scatter", |py| {
            let list = bytes.iter().map(|b| PyBytes::new(py, b));
            Ok(pyo3::types::PyList::new(py, list)?.into_any().unbind())
        })
    }

    fn partial(
        &mut self,
        request: &Request,
        _shards: usize,
        k: usize,
        d: usize,
    ) -> kmeans_knn::Result<Partial> {
        let bytes = request.to_bytes();
        let answer = Python::attach(|py| -> PyResult<kmeans_knn::Result<Partial>> {
            let request = PyBytes::new(py, &bytes);
            let sum = self.shards.bind(py).call_method1("partial", (request,))?;
            Ok(sum.cast::<PartialSum>()?.get().take())
        });
        let total = answer.unwrap_or_else(|e| {
            let message = e.to_string();
            self.error = Some(e);
            Err(Error::Shard(message))
        })?;
        if total.sums.len() != k * d || total.weights.len() != k {
            return Err(Error::Shard(format!(
                "the partial replies are not sums of {k} clusters of {d} dimensions"
            )));
        }
        Ok(total)
    }
}

/// What a sharded fit returns: centroids (k × d), inertia, iterations, the shards' backends.
type ShardedFit<'py> = (Bound<'py, PyArray2<f32>>, f64, usize, String);

/// Fits k-means over the shards that `shards` reaches (see `PyTransport`); parameters as
/// `kmeans_fit`. The labels stay on the shards (`Shard.labels`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn kmeans_fit_sharded<'py>(
    py: Python<'py>,
    shards: Py<PyAny>,
    k: usize,
    init: &str,
    init_centroids: Option<PyReadonlyArray2<'py, f32>>,
    n_init: usize,
    max_iter: usize,
    tol: f64,
    seed: u64,
    metric: &str,
    precision: &str,
) -> PyResult<ShardedFit<'py>> {
    let params = crate::kmeans::params(
        k,
        init,
        init_centroids,
        n_init,
        max_iter,
        tol,
        seed,
        metric,
        precision,
    )?;
    let mut transport = PyTransport {
        shards,
        error: None,
    };
    let fitted = py.detach(|| params.fit_sharded(&mut transport));
    let model = match (fitted, transport.error) {
        (Ok(model), _) => model,
        (Err(_), Some(python_error)) => return Err(python_error),
        (Err(e), None) => return Err(to_py_err(e)),
    };
    let centroids = model.centroids_array().into_pyarray(py);
    Ok((
        centroids,
        model.inertia,
        crate::kmeans::sklearn_n_iter(&model),
        model.device,
    ))
}
