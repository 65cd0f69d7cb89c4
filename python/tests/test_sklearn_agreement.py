"""The estimators agree with scikit-learn's on iris, digits, blobs and diabetes."""

import numpy as np
import pytest
import sklearn.cluster
import sklearn.neighbors
from scipy.spatial.distance import cdist
from sklearn.datasets import load_diabetes, load_digits, load_iris, make_blobs

from kmeans_knn import KMeans, KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors


def blobs():
    return make_blobs(4000, n_features=16, centers=12, random_state=1)


DATASETS = {
    "iris": lambda: load_iris(return_X_y=True),
    "digits": lambda: load_digits(return_X_y=True),
    "blobs": blobs,
}


def dataset(name):
    X, y = DATASETS[name]()
    return X.astype(np.float32), y


def no_tie_at_kth(queries, train, k, metric="euclidean"):
    """Exact distances, and the queries whose k-th and (k+1)-th nearest are clearly apart (so
    that which rows are the k nearest does not depend on the tie order)."""
    exact = cdist(queries.astype(np.float64), train.astype(np.float64), metric)
    kth, next_ = np.sort(exact, axis=1)[:, k - 1 : k + 1].T
    return exact, next_ - kth > 1e-4 * np.maximum(kth, 1)


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("metric, scipy_metric", [("euclidean", "euclidean"), ("manhattan", "cityblock")])
def test_kneighbors_indices_equal_sklearn_up_to_ties(name, metric, scipy_metric):
    X, _ = dataset(name)
    k = 10
    ours_d, ours = NearestNeighbors(n_neighbors=k, metric=metric).fit(X).kneighbors(X)
    sk_d, sk = sklearn.neighbors.NearestNeighbors(n_neighbors=k, metric=metric).fit(X).kneighbors(X)
    np.testing.assert_allclose(ours_d, sk_d, rtol=1e-5, atol=1e-4)
    # Exact distances: our neighbours are as near as scikit-learn's, rank by rank ...
    exact, clear = no_tie_at_kth(X, X, k, scipy_metric)
    rows = np.arange(len(X))[:, None]
    np.testing.assert_allclose(exact[rows, ours], exact[rows, sk], rtol=1e-5, atol=1e-4)
    # ... and the same rows wherever no tie straddles the k-th place (iris has many ties).
    assert clear.mean() > 0.3
    assert np.array_equal(np.sort(ours[clear], axis=1), np.sort(sk[clear], axis=1))


@pytest.mark.parametrize("name, k", [("iris", 3), ("digits", 10), ("blobs", 12)])
def test_kmeans_inertia_within_one_percent_of_sklearn(name, k):
    X, _ = dataset(name)
    ours = KMeans(k, n_init=10, random_state=0).fit(X)
    theirs = sklearn.cluster.KMeans(k, n_init=10, random_state=0).fit(X)
    assert abs(ours.inertia_ - theirs.inertia_) <= 0.01 * theirs.inertia_
    assert ours.score(X) == pytest.approx(-ours.inertia_, rel=1e-5)


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_agrees_with_sklearn(name, weights):
    X, y = dataset(name)
    train, test = slice(0, None, 2), slice(1, None, 2)
    ours = KNeighborsClassifier(n_neighbors=7, weights=weights).fit(X[train], y[train])
    theirs = sklearn.neighbors.KNeighborsClassifier(n_neighbors=7, weights=weights).fit(
        X[train], y[train]
    )
    # Ties (between classes, or at the 7th place) are broken differently; they are rare.
    assert (ours.predict(X[test]) == theirs.predict(X[test])).mean() >= 0.99
    _, clear = no_tie_at_kth(X[test], X[train], 7)
    np.testing.assert_allclose(
        ours.predict_proba(X[test])[clear], theirs.predict_proba(X[test])[clear], atol=1e-4
    )


def diabetes_split():
    X, y = load_diabetes(return_X_y=True)
    X = X.astype(np.float32)
    return X[:300], y[:300], X[300:], y[300:]


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("k", [1, 5, 20])
def test_regressor_agrees_with_sklearn_on_diabetes(weights, k):
    X, y, Q, _ = diabetes_split()
    _, clear = no_tie_at_kth(Q, X, k)
    ours = KNeighborsRegressor(k, weights=weights, device="cpu").fit(X, y).predict(Q)
    theirs = sklearn.neighbors.KNeighborsRegressor(n_neighbors=k, weights=weights).fit(X, y)
    assert ours.shape == (len(Q),)
    np.testing.assert_allclose(ours[clear], theirs.predict(Q)[clear], rtol=1e-5)
    assert clear.mean() > 0.85  # near-ties at the k-th neighbour are left out, few of them


def test_regressor_multi_output_and_score():
    X, y, Q, yq = diabetes_split()
    Y = np.column_stack([y, -2 * y])
    ours = KNeighborsRegressor(5, device="cpu").fit(X, Y)
    theirs = sklearn.neighbors.KNeighborsRegressor(5).fit(X, Y)
    assert ours.predict(Q).shape == (len(Q), 2)
    np.testing.assert_allclose(ours.predict(Q), theirs.predict(Q), rtol=1e-5)
    one = KNeighborsRegressor(5, device="cpu").fit(X, y)
    assert one.score(Q, yq) == pytest.approx(theirs.fit(X, y).score(Q, yq), rel=1e-5)
