"""scikit-learn's neighbour parameters and k-neighbour queries, shared by the neighbour estimators.

The parameters keep scikit-learn's names and meaning: ``n_jobs`` is the number of CPU threads of
a call (results are identical at every count), ``metric``/``p``/``metric_params`` resolve to one
of the engine's exact metrics or to the CPU fallback (``_engine_metric`` decides,
``_cpu_metrics`` computes), ``algorithm`` is accepted (the search is always the exact brute
force one; "kd_tree"/"ball_tree" warn that it is used), and bad values raise scikit-learn's
``InvalidParameterError`` or ``ValueError`` naming the parameter.
"""

import os
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.sparse import csr_matrix, issparse
from sklearn.metrics import DistanceMetric
from sklearn.neighbors import VALID_METRICS
from sklearn.neighbors._base import KNeighborsMixin, NeighborsBase
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_non_negative, validate_data

from . import _cpu_metrics
from ._validation import ENGINE_ARRAY

# scikit-learn's metric names that run on the engine's exact kernels (CPU and GPU bit-identical)
# → the engine's names; "minkowski" resolves through p in `_engine_metric`.
ENGINE_METRICS = {
    "euclidean": "euclidean",
    "l2": "euclidean",
    "sqeuclidean": "sqeuclidean",
    "manhattan": "manhattan",
    "cityblock": "manhattan",
    "l1": "manhattan",
    "cosine": "cosine",
    "inner_product": "inner_product",
    "chebyshev": "chebyshev",
    "infinity": "chebyshev",
}
METRIC_NAMES = set(ENGINE_METRICS) | {name for names in VALID_METRICS.values() for name in names}

NEIGHBOUR_CONSTRAINTS = {
    "n_neighbors": [Interval(Integral, 1, None, closed="left")],
    "algorithm": [StrOptions({"auto", "brute", "kd_tree", "ball_tree"})],
    "leaf_size": [Interval(Integral, 1, None, closed="left")],
    "metric": [StrOptions(METRIC_NAMES), callable, DistanceMetric],
    "p": [Interval(Real, 0, None, closed="right"), None],
    "metric_params": [dict, None],
    "n_jobs": [Integral, None],
    "device": [str],
    "memory_budget": [Interval(Integral, 1, None, closed="left"), None],
}

VOTE_CONSTRAINTS = {
    "weights": [StrOptions({"uniform", "distance"}), callable, None],
}


def _engine_metric(metric, p, metric_params):
    """The engine's metric for scikit-learn's (metric, p, metric_params) — the name
    ``_engine.Index`` takes — or None where the distances are computed on the CPU as
    scikit-learn computes them (``_cpu_metrics``). This is the one place that decides which
    metrics run on the engine: Minkowski with any p ≥ 1 (p = 1, 2 and ∞ as manhattan,
    euclidean and chebyshev; no weights ``w``) and the names of ``ENGINE_METRICS``; everything
    else (0 < p < 1, scipy's other metrics, callables, ``DistanceMetric`` objects,
    "precomputed") runs the CPU fallback."""
    if not isinstance(metric, str):
        return None
    params = dict(metric_params or {})
    if metric == "minkowski":
        p = params.pop("p", 2 if p is None else p)
        if params.pop("w", None) is not None or params:
            return None
        if p == np.inf:
            return "chebyshev"
        # 0 < p < 1 is not a metric: scikit-learn's semimetric runs on the fallback.
        if not p >= 1:
            return None
        return {1: "manhattan", 2: "euclidean"}.get(p, f"minkowski:{float(p)!r}")
    # As scikit-learn, a p in metric_params is kept and only Minkowski reads it.
    params.pop("p", None)
    return None if params else ENGINE_METRICS.get(metric)


def _effective_metric(metric, p, metric_params):
    """(effective_metric_, effective_metric_params_) as scikit-learn sets them (Minkowski with
    p = 1, 2, inf is manhattan, euclidean, chebyshev), with the engine's metrics under their
    canonical names (``l2`` → ``euclidean``)."""
    params = dict(metric_params or {})
    if "p" in params and p is not None:
        warnings.warn(
            "Parameter p is found in metric_params. The corresponding parameter from __init__ "
            "is ignored.",
            SyntaxWarning,
            stacklevel=5,
        )
    if not isinstance(metric, str):
        return metric, params
    if metric != "minkowski":
        return ENGINE_METRICS.get(metric, metric), params
    p = params.pop("p", 2 if p is None else p)
    w = params.pop("w", None)
    if w is None and p in (1, 2, np.inf):
        return {1: "manhattan", 2: "euclidean", np.inf: "chebyshev"}[p], params
    return "minkowski", {**params, "p": p, **({} if w is None else {"w": w})}


def _check_algorithm_metric(algorithm, metric, effective_metric, effective_params):
    """scikit-learn's errors for a metric its requested tree cannot take, and its warning for
    0 < p < 1; a tree, where scikit-learn would build one, warns that the exact brute-force
    search runs instead."""
    is_object = callable(metric) or isinstance(metric, DistanceMetric)
    if algorithm == "auto":
        tree = "brute" if metric == "precomputed" else "ball_tree"
        checked = tree if is_object or metric in VALID_METRICS["ball_tree"] else "brute"
    else:
        checked = algorithm
    if callable(metric) and algorithm == "kd_tree":
        raise ValueError(f"kd_tree does not support callable metric '{metric}'")
    if not is_object and metric not in VALID_METRICS[checked] and metric not in ENGINE_METRICS:
        raise ValueError(
            f"Metric '{metric}' not valid. Use sorted(sklearn.neighbors.VALID_METRICS"
            f"['{checked}']) to get valid options. Metric can also be a callable function."
        )
    minkowski = effective_metric == "minkowski"
    if algorithm == "kd_tree" and minkowski and effective_params.get("w") is not None:
        raise ValueError(
            "algorithm='kd_tree' is not valid for metric='minkowski' with a weight parameter "
            "'w': try algorithm='ball_tree' or algorithm='brute' instead."
        )
    if minkowski and effective_params["p"] < 1:
        if algorithm in ("kd_tree", "ball_tree"):
            raise ValueError(
                f'algorithm="{algorithm}" does not support 0 < p < 1 for the Minkowski '
                'metric. To resolve this problem either set p >= 1 or algorithm="brute".'
            )
        warnings.warn(
            "Mind that for 0 < p < 1, Minkowski metrics are not distance metrics. Continuing "
            "the execution with `algorithm='brute'`.",
            UserWarning,
            stacklevel=4,
        )
    if algorithm in ("kd_tree", "ball_tree"):
        warnings.warn(
            f"algorithm={algorithm!r}: kmeans_knn always runs the exact brute-force search (on "
            "the GPU or the CPU), which gives the same neighbours",
            UserWarning,
            stacklevel=4,
        )


def _fitted_rows(X):
    """The training rows of a fitted neighbours estimator or a scikit-learn tree passed to fit
    as X (scikit-learn fits on them), else None."""
    if isinstance(X, KNeighborsQueries):
        check_is_fitted(X)
        return X._fit_X if X._fit_X64 is None else X._fit_X64
    if isinstance(X, NeighborsBase):
        check_is_fitted(X)
        return X._fit_X
    data = getattr(X, "data", None)
    if type(X).__name__ in ("KDTree", "BallTree") and data is not None:
        return np.asarray(data)
    return None


def threads(n_jobs):
    """The CPU threads of a call for scikit-learn's ``n_jobs``: None (all cores, the process's
    pool), or a count; -1 is all cores, -2 all but one, and so on, as joblib counts."""
    if n_jobs is None or n_jobs == -1:
        return None
    if n_jobs == 0:
        raise ValueError("n_jobs == 0 has no meaning; use None or -1 for all cores")
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return int(n_jobs)


def output_dtype(X):
    """The float dtype of outputs computed from X: float32 stays float32, anything else is
    float64 (as scikit-learn)."""
    dtype = getattr(X, "dtype", None)
    return np.float32 if dtype == np.float32 else np.float64


class KNeighborsQueries(KNeighborsMixin):
    """``kneighbors`` and ``kneighbors_graph`` over the engine's exact search or the CPU
    fallback, the checks of the shared parameters, and the training rows. scikit-learn's
    ``KNeighborsMixin`` is a base for code that tests ``isinstance``; these methods come first
    in the method order.

    Fitted state: ``_engine_metric`` (None: the CPU fallback), ``_fit_X`` (float32 C rows for
    the engine; for the fallback the rows in float64, or bool, or the precomputed matrix),
    ``_fit_X64`` (float64 training rows of an engine metric when the input was not float32,
    else None) and ``_fit_dtype``."""

    def _check_neighbour_params(self):
        """Validates the parameters (``InvalidParameterError`` names the bad one, a metric a
        requested tree cannot take raises scikit-learn's ``ValueError``) and sets
        ``effective_metric_``, ``effective_metric_params_`` and ``_engine_metric``."""
        self._validate_params()
        self.effective_metric_, self.effective_metric_params_ = _effective_metric(
            self.metric, self.p, self.metric_params
        )
        _check_algorithm_metric(
            self.algorithm, self.metric, self.effective_metric_, self.effective_metric_params_
        )
        self._fit_method = "brute"
        self._engine_metric = _engine_metric(self.metric, self.p, self.metric_params)

    def _cpu_metric(self):
        """(metric, keyword arguments) for the CPU fallback's pairwise distances."""
        metric, params = self.effective_metric_, dict(self.effective_metric_params_)
        if metric != "minkowski":
            params.pop("p", None)
        return metric, params

    def _row_checks(self):
        """check_array's arguments for rows of this estimator's metric."""
        if self._engine_metric is not None:
            # float32 stays float32 (the engine's rows); anything else is float64 (kept for
            # the float64 distances of the chosen neighbours).
            return {**ENGINE_ARRAY, "dtype": [np.float64, np.float32]}
        return {
            **ENGINE_ARRAY,
            "dtype": [np.float64, bool],
            "ensure_all_finite": "allow-nan" if self.metric == "nan_euclidean" else True,
            # A graph of distances (scikit-learn's KNeighborsTransformer's output).
            "accept_sparse": "csr" if self.metric == "precomputed" else False,
        }

    def _fit_rows(self, X, y=None, *, supervised=False, **y_checks):
        """Validates and keeps the training rows (X may be a fitted neighbours estimator or a
        scikit-learn tree: its rows); returns y validated when `supervised` (y is then
        required), else None. Call after ``_check_neighbour_params``."""
        source = _fitted_rows(X)
        X = X if source is None else source
        if self.metric == "precomputed":
            _check_graph_format(X)
        self._fit_dtype = output_dtype(X)
        checks = self._row_checks()
        if not supervised:
            X = validate_data(self, X, reset=True, **checks)
        else:
            X, y = validate_data(self, X, y, reset=True, multi_output=True, **y_checks, **checks)
        if self.metric == "precomputed":
            _check_distances(X)
            if X.shape[0] != X.shape[1]:
                raise ValueError(
                    "Precomputed matrix must be square. Input is a "
                    f"{X.shape[0]}x{X.shape[1]} matrix."
                )
        if self._engine_metric is None and X.shape[0] == 0:
            raise ValueError("n_samples must be greater than 0")
        self._fit_X64 = X if self._engine_metric is not None and X.dtype == np.float64 else None
        if self._engine_metric is not None:
            X = np.ascontiguousarray(X, dtype=np.float32)
        self._fit_X = X
        self.n_samples_fit_ = X.shape[0]
        self._engine_model = None
        return y

    def _query_rows(self, X):
        """(rows for the engine or the fallback, float64 rows or None) of the queries X."""
        if self.metric == "precomputed":
            _check_graph_format(X)
        rows = validate_data(self, X, reset=False, **self._row_checks())
        if self._engine_metric is None:
            if self.metric == "precomputed":
                _check_distances(rows)
            return rows, None
        exact = rows if rows.dtype == np.float64 else None
        return np.ascontiguousarray(rows, dtype=np.float32), exact

    def _cpu_distances(self, queries):
        """``distance_rows(chunk)`` of the CPU fallback for the given query rows."""
        metric, params = self._cpu_metric()

        def distance_rows(chunk):
            return _cpu_metrics.pairwise(queries[chunk], self._fit_X, metric, params, self.n_jobs)

        return distance_rows

    def _search(self, X, k):
        """(distances in X's float dtype, indices as intp) of the k nearest training rows of
        every row of X (None: every training row, leaving the row itself out), nearest first,
        equal distances by index. For float64 output the engine's neighbours get their
        distances recomputed in float64 (and are put in that order)."""
        check_is_fitted(self)
        if isinstance(k, bool) or not isinstance(k, Integral) or k <= 0:
            raise ValueError(f"Expected n_neighbors > 0. Got {k}")
        n_fit = self.n_samples_fit_
        if X is None:
            if k >= n_fit:
                raise ValueError(
                    f"Expected n_neighbors < n_samples_fit when X is None, but n_neighbors = {k},"
                    f" n_samples_fit = {n_fit}"
                )
            dtype, queries, exact = self._fit_dtype, self._fit_X, self._fit_X64
            k_found = k + 1
        else:
            dtype = output_dtype(X)
            queries, exact = self._query_rows(X)
            if k > n_fit:
                raise ValueError(
                    f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                    f"n_samples_fit = {n_fit}, n_samples = {queries.shape[0]}"
                )
            k_found = k
        if issparse(queries):
            _check_graph_neighbours(queries, k_found)
        if self._engine_metric is None:
            distances, indices = _cpu_metrics.kneighbors(
                self._cpu_distances(queries), queries.shape[0], n_fit, k_found
            )
        else:
            distances, indices = self._model().search(queries, k_found, threads(self.n_jobs))
        if X is None:
            distances, indices = leave_self_out(distances, indices)
        # The engine's indices are intp already; the CPU fallback's and the self-less ones too.
        indices = indices.astype(np.intp, copy=False)
        if self._engine_metric is not None and dtype == np.float64:
            distances, indices = self._exact_distances(exact, indices)
        return distances.astype(dtype, copy=False), indices

    def _exact_distances(self, queries, indices):
        """float64 distances of the engine's neighbours, reordered by (distance, index)."""
        rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
        distances = self._exact_pair_distances(queries, rows, indices.ravel())
        distances = distances.reshape(indices.shape)
        order = np.lexsort((indices, distances), axis=-1)
        return np.take_along_axis(distances, order, 1), np.take_along_axis(indices, order, 1)

    def _exact_pair_distances(self, queries, rows, indices):
        """float64 distances between queries[rows[i]] and training row indices[i]."""
        train = self._fit_X if self._fit_X64 is None else self._fit_X64
        metric, params = self.effective_metric_, self.effective_metric_params_
        return _cpu_metrics.exact_distances(queries, rows, train, indices, metric, params)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """(distances, indices) of the n_neighbors nearest training rows of every row of X,
        nearest first, equal distances by training index; with X=None, of every training row,
        leaving the row itself out. With metric="precomputed", X holds the distances of the
        queries to the training rows (n_queries × n_samples_fit).

        Distances come in X's float dtype. Engine metrics select the neighbours in float32; for
        float64 output their distances are then recomputed in float64 from the rows (the order
        follows those distances, equal ones by index). Other metrics run on the CPU in float64.
        """
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        distances, indices = self._search(X, k)
        return (distances, indices) if return_distance else indices

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """The k-neighbour graph as a CSR matrix (n_queries × n_samples_fit): 1 per neighbour
        (mode="connectivity") or its distance (mode="distance"); X=None as in kneighbors."""
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if mode not in ("connectivity", "distance"):
            raise ValueError(
                'Unsupported mode, must be one of "connectivity", or "distance" but got '
                f'"{mode}" instead'
            )
        distances, indices = self._search(X, k)
        n_queries = indices.shape[0]
        if mode == "connectivity":
            data = np.ones(n_queries * k)
        else:
            data = distances.ravel()
        indptr = np.arange(0, n_queries * k + 1, k)
        return csr_matrix((data, indices.ravel(), indptr), shape=(n_queries, self.n_samples_fit_))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # As scikit-learn: cross-validation splits a precomputed matrix on both axes.
        tags.input_tags.pairwise = self.metric == "precomputed"
        tags.input_tags.positive_only = tags.input_tags.pairwise
        tags.input_tags.allow_nan = self.metric == "nan_euclidean"
        return tags


def _check_graph_format(X):
    """scikit-learn's error for a sparse precomputed matrix in a format that does not keep
    explicit zeros (csr, csc, coo and lil do)."""
    if issparse(X) and X.format not in ("csr", "csc", "coo", "lil"):
        raise TypeError(
            f"Sparse matrix in {X.format!r} format is not supported due to its handling of "
            "explicit zeros"
        )


def _check_distances(X):
    """scikit-learn's error for negative precomputed distances."""
    check_non_negative(X, "precomputed distance matrix" if issparse(X) else "X")


def _check_graph_neighbours(graph, k):
    """scikit-learn's error for a precomputed graph with fewer than k entries in a row."""
    fewest = int(np.diff(graph.indptr).min(initial=k))
    if fewest < k:
        raise ValueError(
            f"{k} neighbors per samples are required, but some samples have only {fewest} "
            "neighbors in precomputed graph matrix. Decrease number of neighbors used or "
            "recompute the graph with more neighbors."
        )


def leave_self_out(distances, indices, first=0):
    """Drops each query's own row (query i being training row first + i) from its k + 1
    neighbours (as scikit-learn: where duplicates push the row itself out of the list, the first
    neighbour goes instead)."""
    n, k_plus_1 = indices.shape
    keep = indices != np.arange(first, first + n)[:, None]
    keep[np.all(keep, axis=1), 0] = False
    shape = (n, k_plus_1 - 1)
    return distances[keep].reshape(shape), indices[keep].reshape(shape)
