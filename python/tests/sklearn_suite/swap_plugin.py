"""pytest plugin: runs scikit-learn's own k-means and neighbour tests against kmeans_knn.

Loaded with ``-p swap_plugin`` (this folder on the path). Before scikit-learn's test modules are
imported, ``sklearn.cluster.KMeans``/``MiniBatchKMeans`` and ``sklearn.neighbors.NearestNeighbors``
/ ``KNeighborsClassifier`` / ``KNeighborsRegressor`` are swapped for kmeans_knn's, with
``device="cpu"`` by default. Tests
listed in ``sklearn_out_of_scope.py`` are skipped (out of scope) or marked as expected failures
(with their reason); any other failure fails the run.
"""

import inspect
import re

import pytest
import sklearn.cluster
import sklearn.neighbors

import kmeans_knn
from sklearn_out_of_scope import EXPECTED_FAILURES, OUT_OF_SCOPE

SWAPPED = ("KMeans", "MiniBatchKMeans", "NearestNeighbors", "KNeighborsClassifier",
           "KNeighborsRegressor")


def on_cpu(cls):
    """A subclass of `cls` (same name) whose `device` defaults to "cpu"."""
    signature = inspect.signature(cls.__init__)
    parameters = [
        p.replace(default="cpu") if p.name == "device" else p
        for p in signature.parameters.values()
    ]
    signature = signature.replace(parameters=parameters)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        cls.__init__(*bound.args, **bound.kwargs)

    __init__.__signature__ = signature
    # Found by pickle under this module's name.
    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": __name__})


OURS = {name: on_cpu(getattr(kmeans_knn, name)) for name in SWAPPED}
globals().update(OURS)


def pytest_configure(config):
    """Swaps the estimators in scikit-learn's packages before its test modules import them
    (``from sklearn.cluster import KMeans``, ``neighbors.KNeighborsClassifier``)."""
    for name, cls in OURS.items():
        package = sklearn.cluster if "KMeans" in name else sklearn.neighbors
        setattr(package, name, cls)


def _reason(nodeid, table):
    for pattern, reason in table.items():
        if re.search(pattern, nodeid):
            return reason
    return None


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        name = item.nodeid.split("::", 1)[-1]
        reason = _reason(name, OUT_OF_SCOPE)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"out of scope: {reason}"))
            continue
        reason = _reason(name, EXPECTED_FAILURES)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=False))

