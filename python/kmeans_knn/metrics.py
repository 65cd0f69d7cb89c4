"""Pairwise distances with scikit-learn's signature."""

from . import _engine
from ._validation import engine_array


def pairwise_distances(X, Y=None, metric="euclidean", device="auto"):
    """The len(X) × len(Y) float32 distance matrix (Y defaults to X).

    metric : "euclidean", "sqeuclidean", "manhattan", "cosine" or "inner_product" (negated).
    """
    X = engine_array(X)
    Y = X if Y is None else engine_array(Y)
    return _engine.pairwise_distances(X, Y, metric, device)
