"""Conventions of the Python layer: input conversion, errors, seeds, labels, pickling."""

import pickle

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError

from kmeans_knn import KMeans, KNeighborsClassifier, NearestNeighbors, pairwise_distances
from kmeans_knn._validation import engine_array, engine_seed

X, Y = make_blobs(500, n_features=4, centers=5, random_state=2)
X32 = X.astype(np.float32)
ESTIMATORS = [
    lambda: KMeans(5, random_state=0),
    lambda: NearestNeighbors(),
    lambda: KNeighborsClassifier(),
]


def fit(make, X):
    est = make()
    return est.fit(X, Y[: len(X)]) if isinstance(est, KNeighborsClassifier) else est.fit(X)


def test_c_contiguous_float32_is_not_copied():
    assert engine_array(X32) is X32
    converted = engine_array(np.asfortranarray(X))
    assert converted.dtype == np.float32 and converted.flags.c_contiguous


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize("bad, shown", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_non_finite_values_are_named(make, bad, shown):
    Z = X32.copy()
    Z[3, 2] = bad
    with pytest.raises(ValueError, match=rf"non-finite value \({shown}\) at row 3, column 2"):
        fit(make, Z)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_empty_input_and_wrong_feature_count(make):
    with pytest.raises(ValueError, match="no rows|n_samples=0|0 sample"):
        fit(make, np.empty((0, 4), np.float32))
    est = fit(make, X32)
    method = getattr(est, "predict", None) or est.kneighbors
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4"):
        method(X32[:, :3])


@pytest.mark.parametrize("make", ESTIMATORS)
def test_not_fitted(make):
    est = make()
    method = getattr(est, "predict", None) or est.kneighbors
    with pytest.raises(NotFittedError):
        method(X32)


def test_device_names():
    with pytest.raises(ValueError, match="device"):
        KMeans(3, device="tpu").fit(X32)
    with pytest.raises(RuntimeError, match="no usable CUDA GPU"):
        NearestNeighbors(device="cuda:99").fit(X32)


def test_random_state_maps_to_the_engine_seed():
    assert engine_seed(7) == 7
    assert engine_seed(np.int64(2**40)) == 2**40
    assert engine_seed(np.random.RandomState(3)) == engine_seed(np.random.RandomState(3))
    with pytest.raises(ValueError, match="random_state"):
        engine_seed(-1)
    a = KMeans(5, init="random", n_init=2, random_state=np.random.RandomState(4)).fit(X32)
    b = KMeans(5, init="random", n_init=2, random_state=np.random.RandomState(4)).fit(X32)
    assert np.array_equal(a.cluster_centers_, b.cluster_centers_)


def test_kmeans_attributes_and_methods():
    km = KMeans(5, random_state=0).fit(X)
    # float64 in, float64 out (float32 arithmetic).
    assert km.cluster_centers_.shape == (5, 4) and km.cluster_centers_.dtype == np.float64
    assert km.labels_.dtype == np.int32 and km.n_features_in_ == 4 and km.n_iter_ >= 1
    assert np.array_equal(km.predict(X), km.labels_)
    distances = km.transform(X)
    assert distances.dtype == np.float64 and km.transform(X32).dtype == np.float32
    assert np.array_equal(np.argmin(distances, axis=1), km.labels_)
    np.testing.assert_allclose(distances, cdist(X32, km.cluster_centers_), rtol=1e-4, atol=1e-4)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-5)


def test_kmeans_init_centroids():
    start = X32[[0, 100, 200, 300, 400]]
    km = KMeans(5, init=start, max_iter=1).fit(X32)
    labels = np.argmin(cdist(X32, start, "sqeuclidean"), axis=1)
    expected = np.stack([X32[labels == c].mean(axis=0) for c in range(5)])
    np.testing.assert_allclose(km.cluster_centers_, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="does not match the number of"):
        KMeans(5, init=start[:, :3]).fit(X32)


def test_manhattan_kmeans_scores_l1():
    km = KMeans(5, metric="manhattan", random_state=1).fit(X32)
    assert km.score(X32) == pytest.approx(-km.inertia_, rel=1e-5)


def test_classifier_with_string_labels():
    names = np.array(["zero", "one", "two", "three", "four"], dtype=object)
    clf = KNeighborsClassifier(n_neighbors=5).fit(X32, names[Y])
    assert list(clf.classes_) == sorted(names)
    assert clf.score(X32, names[Y]) > 0.9
    proba = clf.predict_proba(X32)
    assert proba.shape == (500, 5)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-6)
    assert set(clf.predict(X32)) <= set(names)


def test_kneighbors_without_X_leaves_each_row_out():
    nn = NearestNeighbors(n_neighbors=3).fit(X32)
    distances, indices = nn.kneighbors()
    assert indices.shape == (500, 3) and indices.dtype == np.intp
    assert not np.any(indices == np.arange(500)[:, None])
    full_d, full_i = nn.kneighbors(X32, n_neighbors=4)
    assert np.array_equal(indices, full_i[:, 1:]) and np.array_equal(distances, full_d[:, 1:])
    assert nn.kneighbors(X32[:2], return_distance=False).shape == (2, 3)


@pytest.mark.parametrize("make", ESTIMATORS[1:])
def test_pickled_neighbours_rebuild_their_index(make):
    est = fit(make, X32)
    clone = pickle.loads(pickle.dumps(est))
    assert "_engine_model" not in clone.__dict__
    method = "predict" if hasattr(est, "predict") else "kneighbors"
    assert np.array_equal(
        np.asarray(getattr(clone, method)(X32[:50])), np.asarray(getattr(est, method)(X32[:50]))
    )


@pytest.mark.parametrize("metric, scipy_metric", [("euclidean", "euclidean"), ("sqeuclidean", "sqeuclidean"), ("manhattan", "cityblock"), ("cosine", "cosine")])
def test_pairwise_distances(metric, scipy_metric):
    d = pairwise_distances(X[:30], X[5:50], metric=metric)
    assert d.shape == (30, 45) and d.dtype == np.float32
    np.testing.assert_allclose(d, cdist(X32[:30], X32[5:50], scipy_metric), rtol=1e-4, atol=1e-4)
    assert pairwise_distances(X32[:7]).shape == (7, 7)
