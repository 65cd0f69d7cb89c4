"""scikit-learn-compatible k-means and exact kNN on the kmeans-knn engine.

The estimators run on an NVIDIA GPU when libcuda and a device are present (``device="auto"``,
the default), else on the CPU; both give bit-identical results. Swap the import::

    from kmeans_knn import KMeans, NearestNeighbors, KNeighborsClassifier, pairwise_distances
    from kmeans_knn import KNeighborsRegressor, MiniBatchKMeans

``kmeans_knn.dask`` has KMeans and NearestNeighbors for Dask arrays across workers and hosts
(``pip install kmeans-knn[dask]``).
"""

from ._engine import __version__, describe_device, last_engine_seconds, warmup
from .cluster import KMeans
from .metrics import pairwise_distances
from .minibatch import MiniBatchKMeans
from .neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors


def _prime_input_checks():
    """scikit-learn's input checks look for dataframe plugins on their first call (10–15 ms with
    many packages installed): paid here, at import, rather than by the first fit."""
    import numpy as np

    from ._validation import engine_data

    engine_data(KMeans(), np.zeros((1, 1), np.float32), reset=True)


_prime_input_checks()

__all__ = [
    "__version__",
    "KMeans",
    "KNeighborsClassifier",
    "KNeighborsRegressor",
    "MiniBatchKMeans",
    "NearestNeighbors",
    "describe_device",
    "last_engine_seconds",
    "pairwise_distances",
    "warmup",
]
