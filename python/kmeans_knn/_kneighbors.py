"""scikit-learn's neighbour parameters and k-neighbour queries, shared by the neighbour estimators.

The parameters keep scikit-learn's names and meaning: ``n_jobs`` is the number of CPU threads of
a call (results are identical at every count), ``metric``/``p``/``metric_params`` resolve to one
of the engine's exact metrics, ``algorithm`` is accepted (the search is always the exact brute
force one; "kd_tree"/"ball_tree" warn that it is used), and bad values raise scikit-learn's
``InvalidParameterError`` naming the parameter.
"""

import os
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.sparse import csr_matrix
from sklearn.neighbors._base import KNeighborsMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._validation import engine_data

# scikit-learn's metric names → the engine's; "minkowski" resolves through p.
METRICS = {
    "euclidean": "euclidean",
    "l2": "euclidean",
    "sqeuclidean": "sqeuclidean",
    "manhattan": "manhattan",
    "cityblock": "manhattan",
    "l1": "manhattan",
    "cosine": "cosine",
    "inner_product": "inner_product",
    "minkowski": None,
}

NEIGHBOUR_CONSTRAINTS = {
    "n_neighbors": [Interval(Integral, 1, None, closed="left")],
    "algorithm": [StrOptions({"auto", "brute", "kd_tree", "ball_tree"})],
    "leaf_size": [Interval(Integral, 1, None, closed="left")],
    "metric": [StrOptions(set(METRICS))],
    "p": [Interval(Real, 0, None, closed="right"), None],
    "metric_params": [dict, None],
    "n_jobs": [Integral, None],
    "device": [str],
    "memory_budget": [Interval(Integral, 1, None, closed="left"), None],
}

VOTE_CONSTRAINTS = {
    "weights": [StrOptions({"uniform", "distance"}), callable, None],
}


def resolve_metric(metric, p, metric_params):
    """(effective_metric_, effective_metric_params_) as scikit-learn sets them; the effective
    metric is one of the engine's. Minkowski runs for p = 1 (manhattan) and p = 2 (euclidean)."""
    params = dict(metric_params or {})
    if "p" in params and p is not None:
        warnings.warn(
            "Parameter p is found in metric_params. The corresponding parameter from __init__ "
            "is ignored.",
            SyntaxWarning,
            stacklevel=4,
        )
    if metric != "minkowski":
        # As scikit-learn, a p in metric_params is kept and only Minkowski reads it.
        if set(params) - {"p"}:
            raise ValueError(f"metric_params {sorted(params)} are not used by metric={metric!r}")
        return METRICS[metric], params
    p = params.pop("p", 2 if p is None else p)
    if params.pop("w", None) is not None:
        raise ValueError("metric_params w (a weighted Minkowski distance) is not supported")
    if params:
        raise ValueError(f"metric_params {sorted(params)} are not used by metric='minkowski'")
    if p < 1:
        raise ValueError(f"p must be greater or equal to one for minkowski metric, got p={p}")
    if p == 1:
        return "manhattan", params
    if p == 2:
        return "euclidean", params
    raise ValueError(
        f"metric='minkowski' runs with p=1 (manhattan) or p=2 (euclidean), got p={p}: the exact "
        "GPU and CPU kernels exist for those two"
    )


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
    float64 (as scikit-learn); the arithmetic itself is float32."""
    dtype = getattr(X, "dtype", None)
    return np.float32 if dtype == np.float32 else np.float64


class KNeighborsQueries(KNeighborsMixin):
    """``kneighbors`` and ``kneighbors_graph`` over the engine's exact search, and the checks of
    the shared parameters. scikit-learn's ``KNeighborsMixin`` is a base for code that tests
    ``isinstance``; these methods come first in the method order."""

    def _check_neighbour_params(self):
        """Validates the parameters (``InvalidParameterError`` names the bad one) and sets
        ``effective_metric_`` and ``effective_metric_params_``; returns the engine's metric."""
        self._validate_params()
        if self.algorithm in ("kd_tree", "ball_tree"):
            warnings.warn(
                f"algorithm={self.algorithm!r}: kmeans_knn always runs the exact brute-force "
                "search (on the GPU or the CPU), which gives the same neighbours",
                UserWarning,
                stacklevel=3,
            )
        self.effective_metric_, self.effective_metric_params_ = resolve_metric(
            self.metric, self.p, self.metric_params
        )
        self._fit_method = "brute"
        return self.effective_metric_

    def _search(self, X, k):
        """(distances in X's float dtype, indices as intp) of the k nearest training rows of
        every row of X (None: every training row, leaving the row itself out)."""
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
            dtype = self._fit_dtype
            distances, indices = self._model().search(self._fit_X, k + 1, threads(self.n_jobs))
            distances, indices = leave_self_out(distances, indices)
        else:
            dtype = output_dtype(X)
            X = engine_data(self, X, reset=False)
            if k > n_fit:
                raise ValueError(
                    f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                    f"n_samples_fit = {n_fit}, n_samples = {X.shape[0]}"
                )
            distances, indices = self._model().search(X, k, threads(self.n_jobs))
        return distances.astype(dtype, copy=False), indices.astype(np.intp)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """(distances, indices) of the n_neighbors nearest training rows of every row of X,
        nearest first, equal distances by training index; with X=None, of every training row,
        leaving the row itself out. Distances come in X's float dtype (float32 arithmetic)."""
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


def leave_self_out(distances, indices, first=0):
    """Drops each query's own row (query i being training row first + i) from its k + 1
    neighbours (as scikit-learn: where duplicates push the row itself out of the list, the first
    neighbour goes instead)."""
    n, k_plus_1 = indices.shape
    keep = indices != np.arange(first, first + n)[:, None]
    keep[np.all(keep, axis=1), 0] = False
    shape = (n, k_plus_1 - 1)
    return distances[keep].reshape(shape), indices[keep].reshape(shape)
