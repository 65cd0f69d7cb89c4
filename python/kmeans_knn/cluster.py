"""k-means with scikit-learn's KMeans interface."""

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from . import _engine
from ._kneighbors import output_dtype
from ._validation import engine_data, engine_seed


class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """k-means clustering (Lloyd) on the GPU or the CPU, bit-identical on both.

    Parameters
    ----------
    n_clusters : int, default 8
    init : "k-means++", "k-means||" (scalable k-means++, cuML's default: a few passes over the
        rows instead of one per centroid), "random" (n_clusters distinct random points) or an
        array of shape (n_clusters, n_features) of initial centroids.
    n_init : int or "auto", default "auto" — runs from different initialisations, the lowest
        inertia wins; "auto" is 10 for init="random" and 1 otherwise (as scikit-learn).
    max_iter : int, default 300
    tol : float, default 1e-4 — stop when the squared centroid shift is at most tol times the
        mean per-feature variance of X (unweighted even with sample_weight, as scikit-learn's);
        a run also stops when no label changes. An empty cluster takes the farthest point out
        of its cluster, with its weight, as scikit-learn relocates it.
    random_state : int, RandomState or None — an int is the engine's seed as is (the command
        line's ``--seed``); None or a RandomState draws the seed from that generator.
    metric : "euclidean" (squared-L2 assignment, as scikit-learn), "manhattan" (L1 assignment,
        mean centroids; inertia is then the sum of L1 distances) or "cosine" (spherical k-means:
        rows scaled to unit length — a row of zeros is an error —, assigned to the centroid of
        largest inner product, centroids renormalised after each update; inertia is the sum of
        1 − cos, transform gives 1 − cos, predict normalises its rows).
    precision : "auto" (the default: "tf32" where it is faster, else "exact"), "exact" (FP32
        arithmetic only) or "tf32" (tensor cores on GPUs of compute capability 8.0+, every
        centroid a proven error bound cannot rule out re-scored in FP32). All three give the
        same labels, centroids, inertia and iteration counts, bit for bit.
    device : "auto", "cpu", "cuda" or "cuda:N"; or several GPUs, "cuda:0,1" or "cuda:all", over
        which ``fit`` shards the rows (the same result as one GPU). "auto" takes the GPU when
        there is one, except for fits the CPU finishes before a GPU's driver could start (while
        no GPU has started in the process): those run on the CPU, with the same result.
    verbose : int, default 0 — when > 0, fit prints what scikit-learn's Lloyd prints, once the
        fit is done: "Initialization complete" for each run, then "Iteration i, inertia x." for
        every assignment (from 0) and the reason the run stopped ("Converged at iteration i:
        strict convergence." or "... center shift s within tolerance t.").
    copy_x : bool, default True — accepted for scikit-learn's signature: X is never modified.
    algorithm : "lloyd" (default, what runs) or "elkan" (warns that Lloyd runs: the same
        partition, Elkan's bounds only save distance computations).
    memory_budget : bytes of GPU memory ``fit`` may use (None: 70 % of what is free; per GPU of
        a set). Rows beyond it stay in host memory and take turns on the GPU in batches: the
        same result, at the cost of the copies (prefer init="k-means||" then).

    The arithmetic of fit and predict is float32 (bit-identical on CPU and GPU); cluster_centers_
    come back in X's float dtype (float64 unless X is float32), as scikit-learn's. transform
    computes float64 input's distances in float64 from cluster_centers_ (float32 input and
    metric "cosine": in float32, on the engine).

    Attributes: cluster_centers_, labels_, inertia_, n_iter_ (as scikit-learn counts: the
    assignment that finds the labels unchanged is counted, so a run whose first update leaves
    the labels as they are has n_iter_ 2), device_ (the backend that ran).

    ``fit``, ``fit_predict``, ``fit_transform`` and ``score`` take ``sample_weight`` (one
    finite weight ≥ 0 per row, not all zero): centroids are weighted means, inertia is the
    weighted sum, seeding draws rows in proportion to their weight. Integer weights give the
    model of the rows repeated that many times (rows in the same order), bit for bit.
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
        precision="auto",
        device="auto",
        memory_budget=None,
        verbose=0,
        copy_x=True,
        algorithm="lloyd",
    ):
        self.verbose = verbose
        self.copy_x = copy_x
        self.algorithm = algorithm
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.metric = metric
        self.precision = precision
        self.device = device
        self.memory_budget = memory_budget

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": [
            StrOptions({"k-means++", "kmeans++", "k-means||", "kmeans||", "random", "random-labels"}),
            callable,
            "array-like",
        ],
        "n_init": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        # Any seed below 2**64 (the engine's), a RandomState or None.
        "random_state": [Interval(Integral, 0, None, closed="left"), np.random.RandomState, None],
        "metric": [str],
        "precision": [str],
        "device": [str],
        "memory_budget": [Interval(Integral, 1, None, closed="left"), None],
        "verbose": ["verbose"],
        "copy_x": ["boolean"],
        "algorithm": [StrOptions({"lloyd", "elkan"})],
    }

    def fit(self, X, y=None, sample_weight=None):
        """Clusters X (with a weight per row when sample_weight is given); returns self."""
        self._validate_params()
        if self.algorithm == "elkan":
            warnings.warn(
                "algorithm='elkan': kmeans_knn runs Lloyd's algorithm (the same partition; "
                "Elkan's bounds only skip distance computations)",
                UserWarning,
                stacklevel=2,
            )
        dtype = output_dtype(X)
        X_in = X
        X = engine_data(self, X, reset=True)
        if X.shape[0] < self.n_clusters:
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}.")
        weights = _engine_weights(sample_weight, X)
        init, init_centroids, n_init = self._init_and_runs(X.shape[1], X_in)
        tol = self._tolerance(X_in, dtype)
        centers, labels, inertia, n_iter, device, history = _engine.kmeans_fit(
            X,
            self.n_clusters,
            init,
            init_centroids,
            n_init,
            self.max_iter,
            self.tol if tol is None else tol,
            engine_seed(self.random_state),
            self.metric,
            self.precision,
            self.device,
            weights,
            self.memory_budget,
            bool(self.verbose),
            absolute_tol=tol is not None,
        )
        if self.verbose:
            shown = self.tol * float(np.mean(np.var(X, axis=0, dtype=np.float64)))
            _print_lloyd(history, shown if tol is None else tol)
        self.cluster_centers_ = centers.astype(dtype, copy=False)
        # Labels are below k ≤ 2^31, so the engine's u32 reads as int32 without a copy.
        self.labels_ = labels.view(np.int32)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        self.device_ = device
        self._n_features_out = centers.shape[0]
        distinct = len(np.unique(self.labels_))
        if distinct < self.n_clusters:
            warnings.warn(
                f"Number of distinct clusters ({distinct}) found smaller than n_clusters "
                f"({self.n_clusters}). Possibly due to duplicate points in X.",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def _tolerance(self, X, dtype):
        """scikit-learn's `_tolerance` for metric "euclidean": tol times the mean per-feature
        variance of X in its own dtype, unweighted even with sample_weight. None for the other
        metrics, whose rows the engine transforms: it scales tol by their variance itself."""
        if _engine.kmeans_metric(self.metric) != "l2":
            return None
        if self.tol == 0:
            return 0.0
        with np.errstate(all="ignore"):  # non-finite rows: the engine's error names them
            return float(np.mean(np.var(np.asarray(X, dtype=dtype), axis=0)) * self.tol)

    def fit_predict(self, X, y=None, sample_weight=None):
        """Clusters X and returns its labels."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def fit_transform(self, X, y=None, sample_weight=None):
        """Clusters X and returns its distances to the centroids."""
        return self.fit(X, sample_weight=sample_weight).transform(X)

    def _init_and_runs(self, n_features, X=None):
        """The engine's init name, the initial centroids (or None) and the number of runs; a
        callable init is called as scikit-learn calls it, init(X, n_clusters, random_state)."""
        if isinstance(self.init, str):
            runs = 10 if self.init == "random" else 1
            return self.init, None, runs if self.n_init == "auto" else self.n_init
        return "centroids", _explicit_centroids(self, X, n_features, stacklevel=4), 1

    def _centers(self):
        check_is_fitted(self)
        return np.ascontiguousarray(self.cluster_centers_, dtype=np.float32)

    def predict(self, X):
        """Index of the nearest centroid of every row of X."""
        centers = self._centers()
        X = engine_data(self, X, reset=False)
        return _engine.kmeans_predict(centers, X, self.metric, self.device).view(np.int32)

    def transform(self, X):
        """Distance of every row of X to every centroid (Euclidean, Manhattan for metric
        "manhattan", 1 − cos for "cosine"), in X's float dtype: float64 input's in float64 from
        cluster_centers_, float32 input's (and "cosine") in float32 on the engine."""
        centers = self._centers()
        metric = _engine.kmeans_metric(self.metric)
        if output_dtype(X) == np.float64 and metric != "cosine":
            engine_data(self, X, reset=False)
            X = check_array(X, dtype=np.float64)
            return _float64_distances(X, self.cluster_centers_.astype(np.float64), metric)
        dtype = output_dtype(X)
        X = engine_data(self, X, reset=False)
        return _engine.kmeans_transform(centers, X, self.metric).astype(dtype, copy=False)

    def score(self, X, y=None, sample_weight=None):
        """Minus the (weighted) inertia of X under the fitted centroids (squared Euclidean,
        L1 for metric "manhattan", 1 − cos for "cosine"), summed in float64."""
        labels = self.predict(X)
        X = engine_data(self, X, reset=False).astype(np.float64)
        centers = self.cluster_centers_[labels].astype(np.float64)
        metric = _engine.kmeans_metric(self.metric)
        if metric == "cosine":
            X /= np.linalg.norm(X, axis=1, keepdims=True)
            distances = 1.0 - np.einsum("ij,ij->i", X, centers)
        elif metric == "l1":
            distances = np.abs(X - centers).sum(axis=1)
        else:
            distances = np.square(X - centers).sum(axis=1)
        if sample_weight is not None:
            distances *= _check_sample_weight(sample_weight, X, dtype=np.float64)
        return -float(distances.sum())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # float32 arithmetic, outputs in the input's float dtype.
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _float64_distances(X, centers, metric):
    """Euclidean (metric "l2") or Manhattan ("l1") distances of the rows of X to `centers`,
    from the differences, in float64; in blocks of rows of at most about 32 MiB."""
    out = np.empty((X.shape[0], centers.shape[0]), dtype=np.float64)
    rows = max(1, (1 << 22) // max(1, centers.size))
    for start in range(0, X.shape[0], rows):
        diff = X[start : start + rows, None, :] - centers[None, :, :]
        if metric == "l1":
            out[start : start + rows] = np.abs(diff).sum(axis=2)
        else:
            out[start : start + rows] = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    return out


def _print_lloyd(history, tol):
    """Prints a fit's iterations as scikit-learn's verbose Lloyd does (`tol` as scikit-learn
    scales it, for the message)."""
    previous_run = None
    for run, iteration, inertia, shift, stop in history:
        if run != previous_run:
            print("Initialization complete")
            previous_run = run
        i = iteration - 1
        print(f"Iteration {i}, inertia {inertia}.")
        if stop == "unchanged":
            print(f"Converged at iteration {i}: strict convergence.")
        elif stop == "tolerance":
            print(f"Converged at iteration {i}: center shift {shift} within tolerance {tol}.")


def _explicit_centroids(estimator, X, n_features, stacklevel):
    """The initial centroids that ``estimator.init`` gives (an array, or a callable called as
    scikit-learn calls it, init(X, n_clusters, random_state)), checked as scikit-learn checks
    them; warns, as scikit-learn, that an explicit array runs once whatever ``n_init`` says."""
    init = estimator.init
    if callable(init):
        init = init(X, estimator.n_clusters, check_random_state(estimator.random_state))
    centroids = check_array(init, dtype=np.float32, order="C", copy=True)
    _check_init_shape(centroids, estimator.n_clusters, n_features)
    if estimator.n_init not in ("auto", 1) and not callable(estimator.init):
        warnings.warn(
            "Explicit initial center position passed: performing only one init in "
            f"{type(estimator).__name__} instead of n_init={estimator.n_init}.",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
    return centroids


def _check_init_shape(centroids, n_clusters, n_features):
    """scikit-learn's errors for initial centroids of the wrong shape."""
    if centroids.shape[0] != n_clusters:
        raise ValueError(
            f"The shape of the initial centers {centroids.shape} does not match the number of "
            f"clusters {n_clusters}."
        )
    if centroids.shape[1] != n_features:
        raise ValueError(
            f"The shape of the initial centers {centroids.shape} does not match the number of "
            f"features of the data {n_features}."
        )


def _engine_weights(sample_weight, X):
    """sample_weight as the engine takes it (C-contiguous float32, checked by scikit-learn: one
    per row, finite, ≥ 0, not all zero), or None."""
    if sample_weight is None:
        return None
    weights = _check_sample_weight(sample_weight, X, dtype=np.float32, ensure_non_negative=True)
    return np.ascontiguousarray(weights, dtype=np.float32)
