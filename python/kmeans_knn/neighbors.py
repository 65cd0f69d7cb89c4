"""Exact kNN search, classification and regression with scikit-learn's interfaces."""

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from . import _engine
from ._radius import RadiusSearchMixin
from ._validation import ENGINE_ARRAY, ResidentModel, engine_data


class NearestNeighbors(RadiusSearchMixin, ResidentModel, BaseEstimator):
    """Exact k-nearest-neighbour search; the training rows stay resident on the device.

    metric : "euclidean", "sqeuclidean", "manhattan", "cosine" (1 − cosine similarity) or
        "inner_product" (the negated inner product).
    device : "auto", "cpu", "cuda", "cuda:N"; or several GPUs, "cuda:0,1" or "cuda:all", over
        which the training rows are cut (the same answers as one GPU).
    radius : the default radius of radius_neighbors and radius_neighbors_graph (in the metric's
        units).
    memory_budget : bytes of GPU memory the index may use (None: 70 % of what is free); a larger
        training set stays in host memory and streams through the GPU at every search, with the
        same answers.
    Neighbours come nearest first; equal distances by training index, ascending.
    """

    def __init__(
        self, n_neighbors=5, radius=1.0, *, metric="euclidean", device="auto", memory_budget=None
    ):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.metric = metric
        self.device = device
        self.memory_budget = memory_budget

    def fit(self, X, y=None):
        """Indexes X; returns self."""
        self._fit_X = engine_data(self, X, reset=True)
        self.n_samples_fit_ = self._fit_X.shape[0]
        self._engine_model = None
        self._model()
        return self

    def _build_engine_model(self):
        return _engine.Index(self._fit_X, self.metric, self.device, self.memory_budget)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """(distances, indices) of the n_neighbors nearest training rows of every row of X,
        nearest first; with X=None, of every training row, leaving the row itself out."""
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is None:
            if k >= self.n_samples_fit_:
                raise ValueError(
                    f"Expected n_neighbors < n_samples_fit when X is None, but n_neighbors = {k},"
                    f" n_samples_fit = {self.n_samples_fit_}"
                )
            distances, indices = self._model().search(self._fit_X, k + 1)
            distances, indices = _leave_self_out(distances, indices)
        else:
            X = engine_data(self, X, reset=False)
            distances, indices = self._model().search(X, k)
        indices = indices.astype(np.intp)
        return (distances, indices) if return_distance else indices


def _leave_self_out(distances, indices, first=0):
    """Drops each query's own row (query i being training row first + i) from its k + 1
    neighbours (as scikit-learn: where duplicates push the row itself out of the list, the first
    neighbour goes instead)."""
    n, k_plus_1 = indices.shape
    keep = indices != np.arange(first, first + n)[:, None]
    keep[np.all(keep, axis=1), 0] = False
    shape = (n, k_plus_1 - 1)
    return distances[keep].reshape(shape), indices[keep].reshape(shape)


class KNeighborsClassifier(ClassifierMixin, ResidentModel, BaseEstimator):
    """kNN classification; the training rows stay resident on the device with their labels.

    weights : "uniform" or "distance" (votes ∝ 1/distance; at distance 0 only the exact matches
    vote). metric, device and memory_budget as NearestNeighbors. Labels may be any values np.unique can sort
    (strings too). Ties between classes go to the class whose nearest member ranks first among
    the neighbours (scikit-learn takes the smallest label).
    """

    def __init__(
        self, n_neighbors=5, *, weights="uniform", metric="euclidean", device="auto",
        memory_budget=None,
    ):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.device = device
        self.memory_budget = memory_budget

    def fit(self, X, y):
        """Keeps X and y; returns self."""
        X, y = validate_data(self, X, y, reset=True, **ENGINE_ARRAY)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        self._fit_X, self._fit_codes = X, codes.astype(np.uint32)
        self.n_samples_fit_ = X.shape[0]
        self._engine_model = None
        # Sent to the device now (the engine also rejects empty data here), except when
        # n_neighbors > n_samples > 0: scikit-learn accepts that in fit and fails in predict,
        # and so does this (the engine raises then).
        if not 0 < self.n_samples_fit_ < self.n_neighbors:
            self._model()
        return self

    def _build_engine_model(self):
        return _engine.Classifier(
            self._fit_X, self._fit_codes, self.n_neighbors, self.weights, self.metric, self.device,
            self.memory_budget,
        )

    def predict(self, X):
        """The predicted label of every row of X."""
        check_is_fitted(self)
        X = engine_data(self, X, reset=False)
        return self.classes_[self._model().predict(X)]

    def predict_proba(self, X):
        """Every row's share of the vote per class (columns in the order of classes_)."""
        check_is_fitted(self)
        X = engine_data(self, X, reset=False)
        return self._model().predict_proba(X).astype(np.float64)


class KNeighborsRegressor(MultiOutputMixin, RegressorMixin, ResidentModel, BaseEstimator):
    """kNN regression; the training rows stay resident on the device, the targets on the host.

    weights : "uniform" (the mean of the k nearest targets) or "distance" (weighted by
    1/distance; at distance 0 only the exact matches count). metric, device and memory_budget
    as NearestNeighbors. y of shape (n,) gives predictions of shape (m,), y of shape (n, t) gives
    (m, t). Predictions are the engine's float32 averages (taken in float64, identical on CPU and
    GPU) as float64.
    """

    def __init__(
        self, n_neighbors=5, *, weights="uniform", metric="euclidean", device="auto",
        memory_budget=None,
    ):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.metric = metric
        self.device = device
        self.memory_budget = memory_budget

    def fit(self, X, y):
        """Keeps X and y; returns self."""
        X, y = validate_data(
            self, X, y, reset=True, multi_output=True, y_numeric=True, **ENGINE_ARRAY
        )
        self._y_1d = y.ndim == 1
        self._fit_X = X
        self._fit_y = np.ascontiguousarray(y.reshape(len(y), -1), dtype=np.float32)
        self.n_samples_fit_ = X.shape[0]
        self._engine_model = None
        # As KNeighborsClassifier: n_neighbors > n_samples > 0 fails in predict, not in fit.
        if not 0 < self.n_samples_fit_ < self.n_neighbors:
            self._model()
        return self

    def _build_engine_model(self):
        return _engine.Regressor(
            self._fit_X, self._fit_y, self.n_neighbors, self.weights, self.metric, self.device,
            self.memory_budget,
        )

    def predict(self, X):
        """The predicted target(s) of every row of X."""
        check_is_fitted(self)
        X = engine_data(self, X, reset=False)
        y = self._model().predict(X).astype(np.float64)  # scikit-learn's regressors give float64
        return y[:, 0] if self._y_1d else y
