//! kNN: an index, a classifier and a regressor that keep the training rows resident on their device between
//! calls, and the pairwise distance matrix.

use crate::{engine, engine_on, matrix, parse_device, value_error};
use kmeans_knn::{
    Device, DistanceMetric, KnnClassifier, KnnIndex, KnnRegressor, TieBreak, Weights,
};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Index>()?;
    m.add_class::<Classifier>()?;
    m.add_class::<Regressor>()?;
    m.add_function(wrap_pyfunction!(pairwise_distances, m)?)
}

/// An engine metric name (`DistanceMetric`'s `FromStr`): `l2`, `sqeuclidean`, `l1`, `ip`,
/// `cosine`, `chebyshev`, or `minkowski:P` for a finite `P ≥ 1` written as Python's `repr` of a
/// float writes it (`minkowski:3.0`; read back exactly; 1 and 2 give `l1` and `l2`). A bad name
/// or `P` is a `ValueError`.
fn parse_metric(metric: &str) -> PyResult<DistanceMetric> {
    metric.parse().map_err(value_error)
}

/// The options a classifier or regressor is fitted with, parsed.
fn neighbour_options(
    weights: &str,
    metric: &str,
    device: &str,
) -> PyResult<(Weights, DistanceMetric, Device)> {
    let weights = weights.parse().map_err(value_error)?;
    Ok((weights, parse_metric(metric)?, parse_device(device)?))
}

/// Queries a fit prepares the GPU for ([`KnnIndex::prepare`]): the first search of up to this
/// many rows then costs what later ones do; larger ones grow the buffers once.
const PREPARED_QUERIES: usize = 4096;

/// What a search returns: distances and training row indices (`intp`, as scikit-learn's),
/// queries × k.
type Neighbours<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray2<i64>>);

/// What a radius search returns: CSR offsets, distances and training row indices.
type RadiusNeighbours<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<u32>>,
);

/// An exact kNN index over training rows.
#[pyclass(frozen, module = "kmeans_knn._engine")]
struct Index {
    index: KnnIndex,
}

#[pymethods]
impl Index {
    #[new]
    #[pyo3(signature = (train, metric, device, memory_budget=None))]
    fn new(
        py: Python<'_>,
        train: PyReadonlyArray2<'_, f32>,
        metric: &str,
        device: &str,
        memory_budget: Option<usize>,
    ) -> PyResult<Self> {
        let (metric, device) = (parse_metric(metric)?, parse_device(device)?);
        let train = matrix(&train)?;
        let index = engine(py, || {
            KnnIndex::with_memory_budget(&train, metric, device, memory_budget)
        })?;
        Ok(Index { index })
    }

    /// Makes ahead on the GPU what the first search for `k` neighbours needs (`Auto`'s choice,
    /// the buffers), so that it costs what later ones do; nothing on the CPU, or for a `k` the
    /// index cannot answer (the search says why).
    fn prepare(&self, py: Python<'_>, k: usize) -> PyResult<()> {
        if k == 0 || k > self.index.len() {
            return Ok(());
        }
        engine(py, || self.index.prepare(PREPARED_QUERIES, k))
    }

    /// The `k` nearest training rows of every query: (distances, indices), nearest first; on
    /// `threads` CPU threads when given.
    #[pyo3(signature = (queries, k, threads=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        threads: Option<usize>,
    ) -> PyResult<Neighbours<'py>> {
        search(py, &self.index, queries, k, threads)
    }

    /// Every query's training rows at distance `≤ radius`, as CSR arrays (offsets, distances,
    /// indices): query `q`'s neighbours are `offsets[q] .. offsets[q + 1]`, nearest first
    /// (equal distances by index).
    fn radius_search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        radius: f32,
    ) -> PyResult<RadiusNeighbours<'py>> {
        let queries = matrix(&queries)?;
        let found = engine(py, || self.index.radius_search(&queries, radius))?;
        let offsets: Vec<i64> = found.offsets.iter().map(|&o| o as i64).collect();
        Ok((
            offsets.into_pyarray(py),
            found.distances.into_pyarray(py),
            found.indices.into_pyarray(py),
        ))
    }
}

/// The `k` nearest rows of `index` to every query, on `threads` CPU threads when given.
fn search<'py>(
    py: Python<'py>,
    index: &KnnIndex,
    queries: PyReadonlyArray2<'py, f32>,
    k: usize,
    threads: Option<usize>,
) -> PyResult<Neighbours<'py>> {
    let queries = matrix(&queries)?;
    let (distances, indices) = engine_on(py, threads, || {
        let found = index.search_i64(&queries, k)?;
        Ok((found.distances, found.indices))
    })?;
    Ok((distances.into_pyarray(py), indices.into_pyarray(py)))
}

/// A kNN classifier over training rows labelled 0..C−1.
#[pyclass(frozen, module = "kmeans_knn._engine")]
struct Classifier {
    classifier: KnnClassifier,
}

#[pymethods]
impl Classifier {
    #[new]
    #[pyo3(signature = (
        train, labels, k, weights, metric, device, memory_budget=None, tie_break="nearest"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        train: PyReadonlyArray2<'_, f32>,
        labels: PyReadonlyArray1<'_, u32>,
        k: usize,
        weights: &str,
        metric: &str,
        device: &str,
        memory_budget: Option<usize>,
        tie_break: &str,
    ) -> PyResult<Self> {
        let (weights, metric, device) = neighbour_options(weights, metric, device)?;
        let tie_break: TieBreak = tie_break.parse().map_err(value_error)?;
        let train = matrix(&train)?;
        let labels = labels.as_slice()?;
        let classifier = engine(py, || {
            let index = KnnIndex::with_memory_budget(&train, metric, device, memory_budget)?;
            let classifier =
                KnnClassifier::from_index(index, labels, k, weights)?.with_tie_break(tie_break);
            classifier.prepare(PREPARED_QUERIES, false)?;
            Ok(classifier)
        })?;
        Ok(Classifier { classifier })
    }

    /// The `k` nearest training rows of every query, as `Index.search`.
    #[pyo3(signature = (queries, k, threads=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        threads: Option<usize>,
    ) -> PyResult<Neighbours<'py>> {
        search(py, self.classifier.index(), queries, k, threads)
    }

    /// The winning label of every query.
    #[pyo3(signature = (queries, threads=None))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let queries = matrix(&queries)?;
        Ok(engine_on(py, threads, || self.classifier.predict(&queries))?.into_pyarray(py))
    }

    /// Every query's share of the vote per label (queries × labels).
    #[pyo3(signature = (queries, threads=None))]
    fn predict_proba<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let queries = matrix(&queries)?;
        let proba = engine_on(py, threads, || self.classifier.predict_proba(&queries))?;
        Ok(proba.into_pyarray(py))
    }
}

/// A kNN regressor over training rows with a row of targets each.
#[pyclass(frozen, module = "kmeans_knn._engine")]
struct Regressor {
    regressor: KnnRegressor,
}

#[pymethods]
impl Regressor {
    #[new]
    #[pyo3(signature = (train, targets, k, weights, metric, device, memory_budget=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        train: PyReadonlyArray2<'_, f32>,
        targets: PyReadonlyArray2<'_, f32>,
        k: usize,
        weights: &str,
        metric: &str,
        device: &str,
        memory_budget: Option<usize>,
    ) -> PyResult<Self> {
        let (weights, metric, device) = neighbour_options(weights, metric, device)?;
        let (train, targets) = (matrix(&train)?, matrix(&targets)?);
        let regressor = engine(py, || {
            let index = KnnIndex::with_memory_budget(&train, metric, device, memory_budget)?;
            let regressor = KnnRegressor::from_index(index, &targets, k, weights)?;
            regressor.prepare(PREPARED_QUERIES)?;
            Ok(regressor)
        })?;
        Ok(Regressor { regressor })
    }

    /// The `k` nearest training rows of every query, as `Index.search`.
    #[pyo3(signature = (queries, k, threads=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        threads: Option<usize>,
    ) -> PyResult<Neighbours<'py>> {
        search(py, self.regressor.index(), queries, k, threads)
    }

    /// The predicted targets of every query (queries × outputs).
    #[pyo3(signature = (queries, threads=None))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        threads: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let queries = matrix(&queries)?;
        Ok(engine_on(py, threads, || self.regressor.predict(&queries))?.into_pyarray(py))
    }
}

/// The `a.rows × b.rows` distance matrix.
#[pyfunction]
fn pairwise_distances<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, f32>,
    b: PyReadonlyArray2<'py, f32>,
    metric: &str,
    device: &str,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let (metric, device) = (parse_metric(metric)?, parse_device(device)?);
    let (a, b) = (matrix(&a)?, matrix(&b)?);
    Ok(engine(py, || {
        kmeans_knn::pairwise_distances(&a, &b, metric, device)
    })?
    .into_pyarray(py))
}
