"""Radius queries of NearestNeighbors, with scikit-learn's semantics: ``radius_neighbors`` and
``radius_neighbors_graph``, exact, on the estimator's device (the GPU and the CPU give the same
arrays).

A neighbour is a training row at distance <= radius, in the metric's units. The arithmetic is
float32: a distance that float64 would put just on the other side of the radius can differ from
scikit-learn's.
"""

import numpy as np
from scipy.sparse import csr_matrix
from sklearn.utils.validation import check_is_fitted

from ._kneighbors import output_dtype
from ._validation import engine_data

_MODES = ("connectivity", "distance")
# The engine's names of the negated inner product, the one metric with negative distances.
_SIGNED = ("ip", "inner_product", "innerproduct", "dot")


def _signed(metric):
    """Whether `metric` (a name the engine parses) can have negative distances."""
    return str(metric).strip().lower().replace("-", "_") in _SIGNED


class RadiusSearchMixin:
    """``radius_neighbors`` and ``radius_neighbors_graph`` over the estimator's engine index;
    the estimator has ``radius``, ``effective_metric_``, ``_fit_X``, ``_fit_dtype`` and
    ``_model()``. Distances come in the queries' float dtype, as ``kneighbors`` gives them."""

    def _radius_csr(self, X, radius, sort_results):
        """(offsets, distances, indices) of every query's neighbours within radius: by
        distance, then index, with sort_results, else by index. X=None: the training rows,
        each without itself."""
        check_is_fitted(self)
        radius = self.radius if radius is None else radius
        dtype = self._fit_dtype if X is None else output_dtype(X)
        queries = self._fit_X if X is None else engine_data(self, X, reset=False)
        m = queries.shape[0]
        if radius < 0 and not _signed(self.effective_metric_):
            # No distance of the metric is negative: nothing is within.
            empty = np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.intp)
            return np.zeros(m + 1, dtype=np.int64), *empty
        offsets, distances, indices = self._model().radius_search(queries, float(radius))
        indices = indices.astype(np.intp)
        distances = distances.astype(dtype, copy=False)
        rows = np.repeat(np.arange(m), np.diff(offsets))
        if X is None:
            keep = indices != rows
            rows, distances, indices = rows[keep], distances[keep], indices[keep]
            offsets = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=m))))
        if not sort_results:
            order = np.lexsort((indices, rows))
            distances, indices = distances[order], indices[order]
        return offsets, distances, indices

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """The training rows within ``radius`` (default: the estimator's) of every row of X, as
        scikit-learn returns them: object arrays holding one array per query, distances then
        indices. X=None: of every training row, leaving the row itself out. With sort_results
        each query's neighbours come nearest first (equal distances by index); without, by
        training index."""
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
