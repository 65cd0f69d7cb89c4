"""Neighbours for the metrics the engine has no exact kernel for, on the CPU, as scikit-learn's
brute force computes them; and float64 distances of neighbours the engine chose.

The distances come from ``sklearn.metrics.pairwise_distances`` (scipy's ``cdist`` for scipy's
metrics) in float64, from a scikit-learn ``DistanceMetric`` object's ``pairwise``, from a
callable, or are the rows of a precomputed distance matrix (dense, or a sparse graph whose stored
entries are the only candidates, as scikit-learn's). Neighbours are then selected by a
stable sort: nearest first, equal distances by training index (scikit-learn's own brute force
leaves the order of equal distances unspecified). Queries go in chunks of scikit-learn's
``working_memory``, so the full distance matrix is never held.
"""

import numpy as np
from scipy.sparse import issparse
from sklearn import get_config
from sklearn.metrics import DistanceMetric, pairwise_distances
from sklearn.neighbors import VALID_METRICS

# Metric names scikit-learn's trees know and pairwise_distances does not ("p", "infinity", ...).
_TREE_ONLY = set(VALID_METRICS["ball_tree"]) - set(VALID_METRICS["brute"])


def pairwise(queries, train, metric, params, n_jobs=None):
    """float64 distances (n_queries × n_train) of `metric` with keyword arguments `params`;
    "precomputed": the queries are the distance rows (a sparse graph's missing entries are NaN:
    never a neighbour)."""
    if isinstance(metric, str) and metric == "precomputed":
        if issparse(queries):
            return _graph_rows(queries)
        return np.asarray(queries, dtype=np.float64)
    if isinstance(metric, DistanceMetric):
        # DistanceMetric32 objects take float32 rows, DistanceMetric64 float64.
        dtype = np.float32 if type(metric).__name__.endswith("32") else np.float64
        distances = metric.pairwise(queries.astype(dtype, copy=False), train.astype(dtype))
        return np.asarray(distances, dtype=np.float64)
    if isinstance(metric, str) and metric in _TREE_ONLY:
        return DistanceMetric.get_metric(metric, **params).pairwise(queries, train)
    distances = pairwise_distances(queries, train, metric=metric, n_jobs=n_jobs, **params)
    return np.asarray(distances, dtype=np.float64)


def _graph_rows(graph):
    """The dense rows of a CSR graph of distances, NaN where it stores no entry (an explicit
    zero is a distance 0)."""
    rows = np.full(graph.shape, np.nan)
    counts = np.diff(graph.indptr)
    rows[np.repeat(np.arange(graph.shape[0]), counts), graph.indices] = graph.data
    return rows


def _batches(n, size):
    """Slices of range(n) of `size` (at least 1) items."""
    size = max(1, int(size))
    return (slice(start, start + size) for start in range(0, n, size))


def _chunks(n_queries, n_train):
    """Slices of the queries whose distance rows fit scikit-learn's working_memory."""
    return _batches(n_queries, get_config()["working_memory"] * 2**20 // max(1, 8 * n_train))


def kneighbors(distance_rows, n_queries, n_train, k):
    """(distances, indices) of the k nearest training rows of every query, nearest first, equal
    distances by index; ``distance_rows(chunk)`` gives the float64 distances of a slice of the
    queries."""
    distances = np.empty((n_queries, k))
    indices = np.empty((n_queries, k), dtype=np.intp)
    for chunk in _chunks(n_queries, n_train):
        rows = distance_rows(chunk)
        order = np.argsort(rows, axis=1, kind="stable")[:, :k]
        indices[chunk] = order
        distances[chunk] = np.take_along_axis(rows, order, axis=1)
    return distances, indices


def radius_neighbors(distance_rows, n_queries, n_train, radius):
    """(offsets, distances, indices) in CSR form of the training rows at distance <= radius
    (a scalar or one per query) of every query, by training index."""
    radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), (n_queries,))
    counts, distances, indices = [], [], []
    for chunk in _chunks(n_queries, n_train):
        rows = distance_rows(chunk)
        query, index = np.nonzero(rows <= radius[chunk, None])
        counts.append(np.bincount(query, minlength=rows.shape[0]))
        distances.append(rows[query, index])
        indices.append(index.astype(np.intp))
    counts = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    if not distances:
        return offsets, np.zeros(0), np.zeros(0, dtype=np.intp)
    return offsets, np.concatenate(distances), np.concatenate(indices)


def exact_distances(queries, rows, train, indices, metric, params):
    """float64 distances between the pairs (``queries[rows[i]]``, ``train[indices[i]]``) the
    engine chose, queries in float64, for scikit-learn's effective metric name and params of an
    engine metric: cosine is 1 - cos (1 where either row is zero), the inner product is negated,
    Minkowski reads ``params["p"]``."""
    out = np.empty(len(indices))
    for chunk in _batches(len(indices), 2**22 // max(1, train.shape[1])):
        q = queries[rows[chunk]]
        x = train[indices[chunk]].astype(np.float64, copy=False)
        if metric in ("cosine", "inner_product"):
            dots = np.sum(q * x, axis=1)
            if metric == "inner_product":
                out[chunk] = -dots
                continue
            norms = np.linalg.norm(q, axis=1) * np.linalg.norm(x, axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                similarity = np.where(norms > 0, dots / norms, 0.0)
            out[chunk] = np.clip(1.0 - similarity, 0.0, 2.0)
            continue
        gaps = np.abs(q - x)
        if metric in ("euclidean", "sqeuclidean"):
            squared = np.sum(np.square(gaps), axis=1)
            out[chunk] = np.sqrt(squared) if metric == "euclidean" else squared
        elif metric == "manhattan":
            out[chunk] = np.sum(gaps, axis=1)
        elif metric == "chebyshev":
            out[chunk] = np.max(gaps, axis=1, initial=0.0)
        elif metric == "minkowski":
            p = params["p"]
            out[chunk] = np.sum(gaps**p, axis=1) ** (1.0 / p)
        else:
            raise ValueError(f"no float64 formula for the engine metric {metric!r}")
    return out
