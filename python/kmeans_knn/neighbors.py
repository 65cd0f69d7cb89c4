"""Exact kNN search, classification and regression with scikit-learn's interfaces.

Shared parameters (scikit-learn's names and meaning; see ``_kneighbors``):

n_neighbors : int ≥ 1.
algorithm : "auto", "brute", "kd_tree", "ball_tree" — the search is always the exact brute-force
    one (on the GPU or the CPU); "kd_tree" and "ball_tree" warn that it is used (and raise
    scikit-learn's ValueError for a metric that tree cannot take). leaf_size is accepted for
    scikit-learn's signature and unused.
metric : on the engine's exact kernels: "minkowski" (the default) with p = 1 (manhattan) or
    p = 2 (euclidean), "euclidean"/"l2", "sqeuclidean", "manhattan"/"cityblock"/"l1", "cosine"
    (1 − cosine similarity) or "inner_product" (the negated inner product). Any other metric of
    scikit-learn (other p, also 0 < p < 1; chebyshev; scipy's metrics with their metric_params;
    a callable; a DistanceMetric object; "precomputed", where X holds distances, dense or a
    sparse graph) runs on the CPU in float64 as scikit-learn computes it, neighbours chosen by
    (distance, index). ``_kneighbors._engine_metric`` decides which.
n_jobs : CPU threads of each call (None or -1: all cores); the answers do not depend on it.
device : "auto", "cpu", "cuda", "cuda:N"; or several GPUs, "cuda:0,1" or "cuda:all", over which
    the training rows are cut (the same answers as one GPU).
memory_budget : bytes of GPU memory the index may use (None: 70 % of what is free); a larger
    training set stays in host memory and streams through the GPU at every search, with the same
    answers.

Neighbours come nearest first; equal distances by training index, ascending. The engine's
arithmetic is float32 (bit-identical on CPU and GPU); distances and predictions come back in the
input's float dtype (float64 unless the input is float32), float64 distances recomputed from the
rows for the neighbours the engine chose.
"""

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from . import _engine
from ._radius import RadiusSearchMixin
from ._kneighbors import (
    NEIGHBOUR_CONSTRAINTS,
    VOTE_CONSTRAINTS,
    KNeighborsQueries,
    output_dtype,
    threads,
)
from ._validation import ResidentModel


class _NeighboursBase(KNeighborsQueries, ResidentModel):
    """What the three estimators share: the parameters and the fitted training rows."""

    def _set_params(self, n_neighbors, algorithm, leaf_size, metric, p, metric_params, n_jobs,
                    device, memory_budget):
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.device = device
        self.memory_budget = memory_budget

    def _python_vote(self, X):
        """Whether predictions run in NumPy over the neighbours (a callable weights, X=None, or a
        metric of the CPU fallback) rather than in the engine."""
        return callable(self.weights) or X is None or self._engine_metric is None

    def _send_to_device(self):
        """Builds the engine model now (the engine also rejects empty data here), except for the
        CPU fallback, and when n_neighbors > n_samples > 0: scikit-learn accepts that in fit
        and fails in predict."""
        if self._engine_metric is not None and not 0 < self.n_samples_fit_ < self.n_neighbors:
            self._model()

    def _vote_neighbours(self, X):
        """(weights of the neighbours by the callable ``weights``, indices) for the rows of X
        (None: leave-one-out over the training rows)."""
        distances, indices = self._search(X, self.n_neighbors)
        weights = np.asarray(self.weights(distances), dtype=np.float64)
        if weights.shape != indices.shape:
            raise ValueError(
                f"weights returned an array of shape {weights.shape}; the distances have shape "
                f"{indices.shape}"
            )
        return weights, indices

    def _engine_weights(self):
        """The engine's weighting: "uniform" (also for None), "distance"; a callable runs in
        Python over the engine's neighbours."""
        return "distance" if self.weights == "distance" else "uniform"


class NearestNeighbors(RadiusSearchMixin, _NeighboursBase, BaseEstimator):
    """Exact k-nearest-neighbour and radius search; the training rows stay resident on the
    device.

    radius : the default radius of ``radius_neighbors`` and ``radius_neighbors_graph``, in the
        metric's units (a row within it: distance ≤ radius, scikit-learn's rule).
    Other parameters as in the module documentation. ``kneighbors``, ``kneighbors_graph``,
    ``radius_neighbors`` and ``radius_neighbors_graph`` as scikit-learn's (X=None: the training
    rows, each without itself).
    """

    _parameter_constraints = {
        **NEIGHBOUR_CONSTRAINTS,
        "radius": [Interval(Real, 0, None, closed="both")],
    }

    def __init__(
        self, n_neighbors=5, radius=1.0, *, algorithm="auto", leaf_size=30, metric="minkowski",
        p=2, metric_params=None, n_jobs=None, device="auto", memory_budget=None,
    ):
        self._set_params(n_neighbors, algorithm, leaf_size, metric, p, metric_params, n_jobs,
                         device, memory_budget)
        self.radius = radius

    def fit(self, X, y=None):
        """Indexes X (a fitted neighbours estimator or a scikit-learn tree: its training
        rows; metric="precomputed": the square matrix of distances); returns self."""
        self._check_neighbour_params()
        self._fit_rows(X)
        if self._engine_metric is not None:
            self._model()
        return self

    def _build_engine_model(self):
        index = _engine.Index(self._fit_X, self._engine_metric, self.device, self.memory_budget)
        # The GPU's buffers and Auto's choice for n_neighbors, made now rather than by the
        # first kneighbors.
        index.prepare(self.n_neighbors)
        return index


class KNeighborsClassifier(_NeighboursBase, MultiOutputMixin, ClassifierMixin, BaseEstimator):
    """kNN classification; the training rows stay resident on the device with their labels.

    weights : "uniform" (also None), "distance" (votes ∝ 1/distance; at distance 0 only the exact
        matches vote) or a callable taking the distances array and returning weights of the
        same shape (the vote then runs in NumPy over the engine's neighbours).
    tie_break : "smallest_label" (default, scikit-learn's rule: a tie between classes goes to the
        smallest label, so predict is always classes_[argmax(predict_proba)]) or "nearest" (the
        engine's own rule: the class whose nearest member ranks first among the neighbours).
    Other parameters as in the module documentation. Labels may be any values np.unique can sort
    (strings too). Both rules are the same on CPU and GPU, bit for bit.
    """

    _parameter_constraints = {
        **NEIGHBOUR_CONSTRAINTS,
        **VOTE_CONSTRAINTS,
        "tie_break": [StrOptions({"smallest_label", "nearest"})],
    }

    def __init__(
        self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30,
        metric="minkowski", p=2, metric_params=None, n_jobs=None, device="auto",
        memory_budget=None, tie_break="smallest_label",
    ):
        self._set_params(n_neighbors, algorithm, leaf_size, metric, p, metric_params, n_jobs,
                         device, memory_budget)
        self.weights = weights
        self.tie_break = tie_break

    def fit(self, X, y):
        """Keeps X (as NearestNeighbors.fit takes it) and y; returns self."""
        self._check_neighbour_params()
        y = self._fit_rows(X, y, supervised=True)
        check_classification_targets(y)
        self.outputs_2d_ = y.ndim == 2 and y.shape[1] != 1
        columns = y.reshape(len(y), -1).T if self.outputs_2d_ else [y.ravel()]
        uniques = [np.unique(c, return_inverse=True) for c in columns]
        classes = [u[0] for u in uniques]
        self.classes_ = classes if self.outputs_2d_ else classes[0]
        self._fit_codes = [u[1].astype(np.uint32) for u in uniques]
        self._send_to_device()
        return self

    def _classes_list(self):
        return self.classes_ if self.outputs_2d_ else [self.classes_]

    def _build_engine_model(self):
        # One engine classifier per output column; each also answers kneighbors.
        return [
            _engine.Classifier(
                self._fit_X, codes, self.n_neighbors, self._engine_weights(), self._engine_metric,
                self.device, self.memory_budget, self.tie_break,
            )
            for codes in self._fit_codes
        ]

    def _model(self):
        return _FirstOf(super()._model())

    def _engine_models(self):
        return super()._model()

    def predict(self, X):
        """The predicted label of every row of X (X=None: of every training row, leaving the
        row itself out)."""
        check_is_fitted(self)
        if self._python_vote(X):
            probas, voters = self._python_votes(X)
            codes = [_winner(p, v, self.tie_break) for p, v in zip(probas, voters)]
        else:
            rows = self._engine_queries(X)
            codes = [m.predict(rows, threads(self.n_jobs)) for m in self._engine_models()]
        labels = [c[k] for c, k in zip(self._classes_list(), codes)]
        return np.stack(labels, axis=1) if self.outputs_2d_ else labels[0]

    def predict_proba(self, X):
        """Every row's share of the vote per class (columns in the order of classes_); a list
        of such arrays, one per output, for a 2-D y. X=None as in predict."""
        check_is_fitted(self)
        if self._python_vote(X):
            probas = self._python_votes(X)[0]
        else:
            rows = self._engine_queries(X)
            probas = [
                m.predict_proba(rows, threads(self.n_jobs)).astype(np.float64)
                for m in self._engine_models()
            ]
            if self._engine_weights() == "uniform":
                # Votes of 1 out of n_neighbors: the float32 shares give the counts exactly, and
                # the shares in float64 are scikit-learn's count / n_neighbors.
                k = self.n_neighbors
                probas = [np.rint(p * k) / k for p in probas]
        return probas if self.outputs_2d_ else probas[0]

    def _engine_queries(self, X):
        X = self._query_rows(X)[0]
        if self.n_neighbors > self.n_samples_fit_:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {self.n_neighbors}, "
                f"n_samples_fit = {self.n_samples_fit_}, n_samples = {X.shape[0]}"
            )
        return X

    def _python_votes(self, X):
        """The vote in NumPy over the neighbours (a callable weights, X=None, or a metric of the
        CPU fallback), as scikit-learn counts it: (shares per output, the neighbours' class codes
        per output)."""
        if callable(self.weights):
            weights, indices = self._vote_neighbours(X)
        else:
            distances, indices = self._search(X, self.n_neighbors)
            weights = _distance_weights(distances) if self.weights == "distance" else None
        if weights is None:
            weights = np.ones(indices.shape)
        rows = np.arange(indices.shape[0])[:, None]
        probas, voters = [], []
        for classes, codes in zip(self._classes_list(), self._fit_codes):
            proba = np.zeros((indices.shape[0], len(classes)))
            np.add.at(proba, (np.broadcast_to(rows, indices.shape), codes[indices]), weights)
            total = proba.sum(axis=1, keepdims=True)
            if callable(self.weights) and np.any(total == 0.0):
                raise ValueError(
                    "All neighbors of some sample is getting zero weights. Please modify "
                    "'weights' to avoid this case if you are using a user-defined function."
                )
            total[total == 0.0] = 1.0
            probas.append(proba / total)
            voters.append(codes[indices])
        return probas, voters

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        return tags


class _FirstOf:
    """The first of the per-output engine classifiers, for the neighbour search."""

    def __init__(self, models):
        self._models = models

    def search(self, X, k, n_threads=None):
        return self._models[0].search(X, k, n_threads)


def _winner(proba, voters, tie_break):
    """Each row's predicted class code: the largest share; a tie goes to the smallest label or,
    with tie_break="nearest", to the tied class whose member comes first among the neighbours
    (`voters`: their class codes, nearest first), the engine's two rules."""
    if tie_break == "smallest_label":
        return np.argmax(proba, axis=1)
    rows = np.arange(len(proba))
    tied = proba == proba.max(axis=1, keepdims=True)
    first = np.argmax(tied[rows[:, None], voters], axis=1)
    return voters[rows, first]


def _distance_weights(distances):
    """scikit-learn's inverse-distance weights; a row with a distance 0 weighs only its exact
    matches, 1 each."""
    with np.errstate(divide="ignore"):
        weights = 1.0 / distances.astype(np.float64)
    inf = np.isinf(weights)
    rows = np.any(inf, axis=1)
    weights[rows] = inf[rows]
    return weights


class KNeighborsRegressor(_NeighboursBase, MultiOutputMixin, RegressorMixin, BaseEstimator):
    """kNN regression; the training rows stay resident on the device, the targets on the host.

    weights : "uniform" (also None: the mean of the k nearest targets), "distance" (weighted by
        1/distance; at distance 0 only the exact matches count) or a callable as in
        KNeighborsClassifier. Other parameters as in the module documentation. y of shape (n,)
        gives predictions of shape (m,), y of shape (n, t) gives (m, t). For float32 y the
        predictions are the engine's float32 averages (taken in float64); for any other y they
        are scikit-learn's float64 (weighted) means of the targets of the engine's neighbours
        (distance weights from kneighbors' distances). Identical on CPU and GPU either way, and
        returned in y's float dtype (float64 unless y is float32).
    """

    _parameter_constraints = {**NEIGHBOUR_CONSTRAINTS, **VOTE_CONSTRAINTS}

    def __init__(
        self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30,
        metric="minkowski", p=2, metric_params=None, n_jobs=None, device="auto",
        memory_budget=None,
    ):
        self._set_params(n_neighbors, algorithm, leaf_size, metric, p, metric_params, n_jobs,
                         device, memory_budget)
        self.weights = weights

    def fit(self, X, y):
        """Keeps X (as NearestNeighbors.fit takes it) and y; returns self."""
        self._check_neighbour_params()
        self._y_dtype = output_dtype(y)
        y = self._fit_rows(X, y, supervised=True, y_numeric=True)
        self._y_1d = y.ndim == 1
        targets = y.reshape(len(y), -1)
        self._fit_y = np.ascontiguousarray(targets, dtype=np.float32)
        self._fit_y64 = None if self._y_dtype == np.float32 else targets.astype(np.float64)
        self._send_to_device()
        return self

    def _build_engine_model(self):
        return _engine.Regressor(
            self._fit_X, self._fit_y, self.n_neighbors, self._engine_weights(),
            self._engine_metric, self.device, self.memory_budget,
        )

    def predict(self, X):
        """The predicted target(s) of every row of X (X=None: of every training row, leaving
        the row itself out)."""
        check_is_fitted(self)
        if self._python_vote(X) or self._fit_y64 is not None:
            y = self._python_predict(X)
        else:
            X = self._query_rows(X)[0]
            if self.n_neighbors > self.n_samples_fit_:
                raise ValueError(
                    f"Expected n_neighbors <= n_samples_fit, but n_neighbors = "
                    f"{self.n_neighbors}, n_samples_fit = {self.n_samples_fit_}, "
                    f"n_samples = {X.shape[0]}"
                )
            y = self._model().predict(X, threads(self.n_jobs))
        y = y.astype(self._y_dtype)
        return y[:, 0] if self._y_1d else y

    def _python_predict(self, X):
        """The (weighted) mean in NumPy over the engine's neighbours, as scikit-learn takes it."""
        if callable(self.weights):
            weights, indices = self._vote_neighbours(X)
        else:
            distances, indices = self._search(X, self.n_neighbors)
            weights = _distance_weights(distances) if self.weights == "distance" else None
        targets = (self._fit_y if self._fit_y64 is None else self._fit_y64)[indices]
        targets = targets.astype(np.float64, copy=False)
        if weights is None:
            return targets.mean(axis=1)
        return np.sum(targets * weights[..., None], axis=1) / np.sum(weights, axis=1)[:, None]
