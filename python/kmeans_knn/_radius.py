"""Radius queries of NearestNeighbors, with scikit-learn's semantics: ``radius_neighbors`` and
``radius_neighbors_graph``, exact, on the estimator's device (the GPU and the CPU give the same
arrays).

A neighbour is a training row at distance <= radius, in the metric's units; ``radius`` may
hold one radius per query. For the engine's metrics the comparison is float32 (a distance that
float64 would put just on the other side of the radius can differ from scikit-learn's), and for
float64 output the distances of the rows found are then recomputed in float64; other metrics
run on the CPU in float64, as ``kneighbors``.
"""

import numpy as np
from scipy.sparse import csr_matrix
from sklearn.neighbors._base import RadiusNeighborsMixin
from sklearn.utils.validation import check_is_fitted

from . import _cpu_metrics
from ._kneighbors import output_dtype

_MODES = ("connectivity", "distance")
# The engine's names of the negated inner product, the one metric with negative distances.
_SIGNED = ("ip", "inner_product", "innerproduct", "dot")


def _signed(metric):
    """Whether `metric` (a name the engine parses) can have negative distances."""
    return str(metric).strip().lower().replace("-", "_") in _SIGNED


class RadiusSearchMixin(RadiusNeighborsMixin):
    """``radius_neighbors`` and ``radius_neighbors_graph`` over the estimator's engine index or
    the CPU fallback (``KNeighborsQueries``'s state). Distances come in the queries' float
    dtype, as ``kneighbors`` gives them. scikit-learn's ``RadiusNeighborsMixin`` is a base for
    code that tests ``isinstance``; these methods come first in the method order."""

    def _radius_csr(self, X, radius, sort_results):
        """(offsets, distances, indices) of every query's neighbours within radius (a scalar or
        one per query): by distance, then index, with sort_results, else by index. X=None: the
        training rows, each without itself."""
        check_is_fitted(self)
        radius = np.asarray(self.radius if radius is None else radius, dtype=np.float64)
        if X is None:
            dtype, queries, exact = self._fit_dtype, self._fit_X, self._fit_X64
        else:
            dtype = output_dtype(X)
            queries, exact = self._query_rows(X)
        m = queries.shape[0]
        if radius.ndim > 1 or (radius.ndim == 1 and radius.size != m):
            raise ValueError(
                f"radius must be a number or hold one radius per query ({m}), got shape "
                f"{radius.shape}"
            )
        if self._engine_metric is None:
            offsets, distances, indices = _cpu_metrics.radius_neighbors(
                self._cpu_distances(queries), m, self.n_samples_fit_, radius
            )
        else:
            offsets, distances, indices = self._engine_radius(queries, radius)
        indices = indices.astype(np.intp)
        rows = np.repeat(np.arange(m), np.diff(offsets))
        if X is None:
            keep = indices != rows
            rows, distances, indices = rows[keep], distances[keep], indices[keep]
            offsets = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=m))))
        if self._engine_metric is not None and dtype == np.float64:
            distances = self._exact_pair_distances(exact, rows, indices)
        keys = (indices, distances, rows) if sort_results else (indices, rows)
        order = np.lexsort(keys)
        return offsets, distances[order].astype(dtype, copy=False), indices[order]

    def _engine_radius(self, queries, radius):
        """The engine's (offsets, float32 distances, indices) within radius; a radius per query
        searches within the largest and keeps each query's distances <= its own radius, the
        float32 comparison the engine makes."""
        largest = float(np.max(radius))
        if largest < 0 and not _signed(self._engine_metric):
            # No distance of the metric is negative: nothing is within.
            m = queries.shape[0]
            empty = np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.intp)
            return np.zeros(m + 1, dtype=np.int64), *empty
        offsets, distances, indices = self._model().radius_search(queries, largest)
        if radius.ndim == 1:
            rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            keep = distances <= radius.astype(np.float32)[rows]
            counts = np.bincount(rows[keep], minlength=len(offsets) - 1)
            offsets = np.concatenate(([0], np.cumsum(counts)))
            distances, indices = distances[keep], indices[keep]
        return offsets, distances, indices

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """The training rows within ``radius`` (default: the estimator's; a number, or an array
        of one radius per query) of every row of X, as scikit-learn returns them: object arrays
        holding one array per query, distances then indices. X=None: of every training row,
        leaving the row itself out. With sort_results each query's neighbours come nearest first
        (equal distances by index); without, by training index."""
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        offsets, distances, indices = self._radius_csr(X, radius, sort_results)
        neigh_ind = _ragged(indices, offsets)
        if not return_distance:
            return neigh_ind
        return _ragged(distances, offsets), neigh_ind

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """The queries × training rows sparse (CSR) matrix of the neighbours within ``radius``:
        1 for each (mode="connectivity") or its distance (mode="distance"). X=None: the training
        rows, each without itself."""
        if mode not in _MODES:
            raise ValueError(
                'Unsupported mode, must be one of "connectivity", or "distance" but got '
                f'"{mode}" instead'
            )
        offsets, distances, indices = self._radius_csr(X, radius, sort_results)
        data = np.ones(len(indices)) if mode == "connectivity" else distances
        shape = (len(offsets) - 1, self.n_samples_fit_)
        return csr_matrix((data, indices, offsets), shape=shape)


def _ragged(values, offsets):
    """An object array holding values[offsets[i] : offsets[i + 1]] for every query i."""
    out = np.empty(len(offsets) - 1, dtype=object)
    for i, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        out[i] = values[start:end]
    return out
