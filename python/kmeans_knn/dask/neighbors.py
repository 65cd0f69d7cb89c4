"""Exact kNN over a Dask array: a top-k per partition on the workers, merged exactly."""

import functools
import operator
import weakref

import dask.array as da
import numpy as np
from distributed import default_client
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import _engine
from .._validation import ENGINE_ARRAY
from .._kneighbors import leave_self_out as _leave_self_out
from ._input import row_blocks
from ._resident import Resident


class NearestNeighbors(BaseEstimator):
    """Exact k-nearest-neighbour search over the rows of a Dask array: each partition is indexed
    on the worker that holds it (resident on its GPU when it has one), every partition's k
    nearest are found there, and the client's merge keeps the k nearest of all by distance, then
    training index. Distances and indices equal those of :class:`kmeans_knn.NearestNeighbors`
    on the concatenated rows, however the rows are partitioned.

    Parameters are those of :class:`kmeans_knn.NearestNeighbors`, plus ``client``: the
    ``distributed.Client`` to run on (default: the current one). ``kneighbors`` takes NumPy
    queries (sent to every worker; NumPy results) or a Dask array of queries (each partition of
    queries meets every training partition; Dask results with the queries' partitions).
    """

    def __init__(self, n_neighbors=5, *, metric="euclidean", device="auto", client=None):
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.device = device
        self.client = client

    def fit(self, X, y=None):
        """Indexes the rows of X (a Dask array, Dask DataFrame or array-like); returns self."""
        self._release()
        self._fit_X, blocks, rows = row_blocks(X)
        self.n_samples_fit_ = sum(rows)
        self.n_features_in_ = self._fit_X.shape[1]
        self._build(blocks, rows)
        return self

    def _build(self, blocks, rows):
        client = self.client or default_client()
        make = functools.partial(_new_index, metric=self.metric, device=self.device)
        index = Resident(client, client.compute(blocks), rows, make)
        release = weakref.finalize(self, index.release)
        release.atexit = False
        self._index, self._index_release = index, release

    def _resident(self):
        """The resident index (rebuilt after unpickling)."""
        if self.__dict__.get("_index") is None:
            _, blocks, rows = row_blocks(self._fit_X)
            self._build(blocks, rows)
        return self._index

    def _release(self):
        release = self.__dict__.pop("_index_release", None)
        if release is not None:
            release()
        self.__dict__.pop("_index", None)

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_index", None)
        state.pop("_index_release", None)
        return state

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """(distances, indices) of the n_neighbors nearest training rows of every row of X,
        nearest first; with X=None, of every training row, leaving the row itself out."""
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        n = self.n_samples_fit_
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"Expected n_neighbors > 0, got {k}")
        index = self._resident()
        if X is None:
            if k >= n:
                raise ValueError(
                    f"Expected n_neighbors < n_samples_fit when X is None, but n_neighbors = {k},"
                    f" n_samples_fit = {n}"
                )
            _, blocks, rows = row_blocks(self._fit_X)
            result = self._search_blocks(index, blocks, rows, k, leave_self_out=True)
        else:
            if k > n:
                raise ValueError(
                    f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                    f"n_samples_fit = {n}"
                )
            if isinstance(X, da.Array) or hasattr(X, "to_dask_array"):
                Q, blocks, rows = row_blocks(X)
                self._check_features(Q.shape[1])
                result = self._search_blocks(index, blocks, rows, k, leave_self_out=False)
            else:
                Q = validate_data(self, X, reset=False, **ENGINE_ARRAY)
                queries = index.client.scatter(Q, broadcast=True, hash=False)
                distances, indices = index.client.gather(_merged(index, queries, k, None))
                result = distances, indices.astype(np.intp)
        return result if return_distance else result[1]

    def _check_features(self, d):
        if d != self.n_features_in_:
            raise ValueError(
                f"X has {d} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )

    def _search_blocks(self, index, blocks, rows, k, *, leave_self_out):
        """Dask arrays of the k nearest of every row of the query partitions `blocks`."""
        client = index.client
        queries = client.compute(blocks)
        first = np.concatenate([[0], np.cumsum(rows)])
        merged = [
            _merged(index, q, k, int(first[i]) if leave_self_out else None)
            for i, q in enumerate(queries)
        ]

        def column(part, dtype):
            return da.concatenate(
                [
                    da.from_delayed(client.submit(operator.itemgetter(part), m), (r, k), dtype)
                    for m, r in zip(merged, rows)
                ]
            )

        return column(0, np.float32), column(1, np.intp)


def _merged(index, queries, k, leave_out_from):
    """A future of the merged (distances, indices) of `queries` (a future or array): with
    `leave_out_from` (the training row of the first query), k + 1 are searched and each query's
    own row is left out."""
    wanted = k if leave_out_from is None else k + 1
    parts = [
        index.submit(p, "search", queries, min(wanted, rows))
        for p, rows in enumerate(index.rows)
    ]
    return index.client.submit(_merge, parts, index.starts[:-1], wanted, leave_out_from)


def _merge(parts, starts, k, leave_out_from):
    """The k nearest of every query among every partition's nearest (`parts[p]`: distances and
    partition indices, each query's row sorted), by distance, then training index."""
    distances = np.concatenate([d for d, _ in parts], axis=1)
    indices = np.concatenate(
        [i.astype(np.intp) + s for (_, i), s in zip(parts, starts)], axis=1
    )
    order = np.lexsort((indices, distances), axis=1)[:, :k]
    distances = np.take_along_axis(distances, order, axis=1)
    indices = np.take_along_axis(indices, order, axis=1)
    if leave_out_from is not None:
        distances, indices = _leave_self_out(distances, indices, leave_out_from)
    return distances, indices


def _new_index(block, first_row, metric, device):
    return _engine.Index(block, metric, device)
