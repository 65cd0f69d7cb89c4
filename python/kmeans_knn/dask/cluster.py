"""k-means over a Dask array, exact across workers."""

import functools

import dask.array as da
import numpy as np
from distributed import default_client, wait
from sklearn.utils.validation import check_is_fitted

from .. import _engine
from ..cluster import KMeans as _KMeans
from .._validation import engine_seed
from ._input import engine_rows, row_blocks
from ._resident import Resident


class KMeans(_KMeans):
    """k-means (Lloyd) over a Dask array whose partitions stay on their workers: equal, bit for
    bit, to :class:`kmeans_knn.KMeans` on the concatenated rows with the same parameters, however
    the rows are partitioned and whichever workers hold them.

    Parameters are those of :class:`kmeans_knn.KMeans`, plus ``client``: the
    ``distributed.Client`` to run on (default: the current one). ``device`` applies on each
    worker ("auto": the worker's GPU when it has one, else its CPU).

    ``fit`` takes a Dask array (chunked by rows; column chunks are merged), a Dask DataFrame of
    numeric columns, or an array-like (sent as one partition). Each partition is uploaded once
    to its worker's device; a Lloyd step sends the centroids to every worker and gets back
    exact fixed-point sums (k × d int64), counts, the changed labels and the inertia, which the
    client adds up and finishes into the next centroids. ``labels_`` is a Dask array with the
    input's row partitions; ``predict`` and ``transform`` map over Dask partitions (NumPy inputs
    are computed locally). The client calls each worker directly (not through the scheduler),
    and a worker holding several partitions adds up their sums before it replies.
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means++",
        n_init="auto",
        max_iter=300,
        tol=1e-4,
        random_state=None,
        metric="euclidean",
        precision="exact",
        device="auto",
        client=None,
    ):
        super().__init__(
            n_clusters,
            init=init,
            n_init=n_init,
            max_iter=max_iter,
            tol=tol,
            random_state=random_state,
            metric=metric,
            precision=precision,
            device=device,
        )
        self.client = client

    def fit(self, X, y=None, sample_weight=None):
        """Clusters the rows of X (see the class docs); returns self. Sample weights are not
        taken across workers yet (NotImplementedError): fit :class:`kmeans_knn.KMeans` on the
        computed rows instead."""
        if sample_weight is not None:
            raise NotImplementedError(
                "kmeans_knn.dask.KMeans does not take sample_weight yet; "
                "fit kmeans_knn.KMeans on the computed rows instead"
            )
        client = self.client or default_client()
        X, blocks, rows = row_blocks(X)
        n, d = sum(rows), X.shape[1]
        if n < self.n_clusters:
            raise ValueError(f"n_samples={n} should be >= n_clusters={self.n_clusters}.")
        init, init_centroids, n_init = self._init_and_runs(d)
        make = functools.partial(_new_shard, device=self.device)
        with Resident(client, client.compute(blocks), rows, make) as shards:
            centers, inertia, n_iter, device = _engine.kmeans_fit_sharded(
                _Transport(shards),
                self.n_clusters,
                init,
                init_centroids,
                n_init,
                self.max_iter,
                self.tol,
                engine_seed(self.random_state),
                self.metric,
                self.precision,
            )
            labels = [shards.submit(i, "labels") for i in range(len(rows))]
            wait(labels)
        # The fit's rounds (the requests to the partitions) and their timings.
        self._timings = shards.timings
        self.cluster_centers_ = centers
        self.labels_ = _labels(labels, rows, X.chunks[0])
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        self.device_ = device
        self.n_features_in_ = d
        self._n_features_out = self.n_clusters
        return self

    def _dask_input(self, X):
        check_is_fitted(self)
        X, _, _ = row_blocks(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return X

    def predict(self, X):
        """Index of the nearest centroid of every row of X: a Dask array for Dask input."""
        if not _is_dask(X):
            return super().predict(X)
        X = self._dask_input(X)
        return X.map_blocks(
            _predict_block, self._centers(), self.metric, self.device, drop_axis=1, dtype=np.int32
        )

    def transform(self, X):
        """Distance of every row of X to every centroid: a Dask array for Dask input."""
        if not _is_dask(X):
            return super().transform(X)
        X = self._dask_input(X)
        chunks = (X.chunks[0], (self.n_clusters,))
        return X.map_blocks(
            _transform_block, self._centers(), self.metric, chunks=chunks, dtype=np.float32
        )

    def score(self, X, y=None):
        """Minus the inertia of X under the fitted centroids, summed in float64 (per partition,
        then over partitions, for Dask input)."""
        if not _is_dask(X):
            return super().score(X)
        X = self._dask_input(X)
        parts = X.map_blocks(
            _score_block,
            self._centers(),
            self.metric,
            self.device,
            chunks=((1,) * X.numblocks[0],),
            drop_axis=1,
            dtype=np.float64,
        )
        return -float(parts.sum().compute())


class _Transport:
    """What `_engine.kmeans_fit_sharded` calls to reach the shards: request bytes out, reply
    bytes back, in partition order; for a step's partial sums, one reply per worker, the sum of
    its partitions' (added up on the worker, so a worker sends k × d sums once per step however
    many partitions it holds), added into one `PartialSum` as the replies arrive."""

    def __init__(self, shards):
        self.shards = shards

    def broadcast(self, request):
        label = _engine.request_name(request)
        return self.shards.map("handle", [(request,)] * len(self.shards.rows), label)

    def scatter(self, requests):
        label = _engine.request_name(requests[0])
        return self.shards.map("handle", [(r,) for r in requests], label)

    def partial(self, request):
        label = _engine.request_name(request)
        calls = [(request,)] * len(self.shards.rows)
        total = _engine.PartialSum()
        self.shards.map("handle", calls, label, combine=_engine.add_partials, each=total.add)
        return total


def _labels(futures, rows, chunks):
    """The labels of the non-empty partitions (futures of `rows` labels each) as a Dask array
    with the input's row chunks (empty ones included)."""
    parts = [da.from_delayed(f, (r,), dtype=np.uint32) for f, r in zip(futures, rows)]
    labels = da.concatenate(parts).astype(np.int32)
    return labels if labels.chunks[0] == chunks else labels.rechunk((chunks,))


def _is_dask(X):
    return isinstance(X, da.Array) or hasattr(X, "to_dask_array")


def _new_shard(block, first_row, device):
    return _engine.Shard(block, first_row, device)


def _predict_block(block, centers, metric, device):
    block = engine_rows(block)
    return _engine.kmeans_predict(centers, block, metric, device).view(np.int32)


def _transform_block(block, centers, metric):
    return _engine.kmeans_transform(centers, engine_rows(block), metric)


def _score_block(block, centers, metric, device):
    block = engine_rows(block)
    labels = _engine.kmeans_predict(centers, block, metric, device)
    rows, centers = block.astype(np.float64), centers[labels].astype(np.float64)
    kind = _engine.kmeans_metric(metric)
    if kind == "cosine":
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return np.array([(1.0 - np.einsum("ij,ij->i", rows, centers)).sum()])
    if kind == "l1":
        return np.array([np.abs(rows - centers).sum()])
    return np.array([np.square(rows - centers).sum()])
