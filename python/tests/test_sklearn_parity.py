"""Parity with scikit-learn's brute-force neighbour estimators, ties included.

The data: integer grids (many equal distances, so even k gives tied votes everywhere) and
random floats. A query whose k-th and (k+1)-th nearest are at the same distance has no unique
neighbour set (scikit-learn's brute force then picks by an unstable sort), so the neighbour sets
are compared on the queries where that boundary is clear; on those, uniform votes — with all
their ties between classes — give scikit-learn's labels exactly. Distance-weighted votes agree
except where the two libraries' weights (float64 1/d there, fixed-point float32 d₁/d here)
order two classes differently in the last bits: the test names those as rows whose
scikit-learn shares are within 1e-6 of each other.
"""

import os

import numpy as np
import pytest
import sklearn.neighbors
from scipy.spatial.distance import cdist

from kmeans_knn import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors, describe_device

KS = [1, 2, 3, 4, 5, 6, 10]
WEIGHTS = ["uniform", "distance"]


def grid_data(seed, n=300, m=200, d=2, classes=3):
    """Integer points in a small grid: many equal distances."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 24, size=(n, d)).astype(np.float64)
    Q = rng.integers(0, 24, size=(m, d)).astype(np.float64) + 0.5 * rng.integers(0, 2, (m, d))
    y = rng.integers(0, classes, size=n)
    return X, Q, y


def float_data(seed, n=400, m=150, d=5, classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32).astype(np.float64)
    Q = rng.normal(size=(m, d)).astype(np.float32).astype(np.float64)
    y = rng.integers(0, classes, size=n)
    return X, Q, y


DATA = {"grid": grid_data, "float": float_data}
LABELS = {
    "int": lambda y: np.array([7, 3, 11, 5])[y],
    "str": lambda y: np.array(["pear", "apple", "fig", "kiwi"])[y],
}


def clear_boundary(X, Q, k):
    """Queries whose k-th nearest is strictly nearer than the (k+1)-th (exact in float64 on
    these inputs: squared distances of float32 values)."""
    d = np.sort(cdist(Q, X, "sqeuclidean"), axis=1)
    if k >= X.shape[0]:
        return np.ones(len(Q), dtype=bool)
    return d[:, k - 1] < d[:, k]


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("labels", LABELS)
@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("k", KS)
def test_classifier_matches_scikit_learn(data, labels, weights, k):
    X, Q, codes = DATA[data](k)
    y = LABELS[labels](codes)
    ours = KNeighborsClassifier(k, weights=weights, device="cpu").fit(X, y)
    theirs = sklearn.neighbors.KNeighborsClassifier(k, weights=weights, algorithm="brute")
    theirs.fit(X, y)
    np.testing.assert_array_equal(ours.classes_, theirs.classes_)
    clear = clear_boundary(X, Q, k)
    assert clear.sum() > len(Q) // 4
    Qc = Q[clear]
    pred, proba = ours.predict(Q), ours.predict_proba(Q)
    # scikit-learn's rule: the prediction is the argmax of the probabilities, on every row.
    np.testing.assert_array_equal(pred, ours.classes_[np.argmax(proba, axis=1)])
    want, want_proba = theirs.predict(Qc), theirs.predict_proba(Qc)
    np.testing.assert_allclose(proba[clear], want_proba, rtol=1e-5, atol=1e-6)
    if weights == "uniform":
        np.testing.assert_array_equal(pred[clear], want)
        if k % 2 == 0 and data == "grid":
            # The comparison covers tied votes: many rows with two classes at the top.
            top = np.sort(want_proba, axis=1)
            assert np.sum(top[:, -1] == top[:, -2]) > 5
    else:
        top = np.sort(want_proba, axis=1)
        decided = (top[:, -1] - top[:, -2] > 1e-6) | (top[:, -1] == 1.0)
        np.testing.assert_array_equal(pred[clear][decided], want[decided])


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("k", KS)
def test_regressor_and_search_match_scikit_learn(data, weights, k):
    X, Q, codes = DATA[data](100 + k)
    y = codes * 1.5 - 2.0
    clear = clear_boundary(X, Q, k)
    Qc = Q[clear]
    ours = KNeighborsRegressor(k, weights=weights, device="cpu").fit(X, y)
    theirs = sklearn.neighbors.KNeighborsRegressor(k, weights=weights, algorithm="brute")
    theirs.fit(X, y)
    np.testing.assert_allclose(ours.predict(Qc), theirs.predict(Qc), rtol=1e-5, atol=1e-5)
    for est in (ours, NearestNeighbors(n_neighbors=k, device="cpu").fit(X)):
        dist, ind = est.kneighbors(Qc)
        want_dist, want_ind = theirs.kneighbors(Qc)
        assert dist.dtype == np.float64 and ind.dtype == np.intp
        np.testing.assert_allclose(dist, want_dist, rtol=1e-6, atol=1e-5)
        # Within equal distances scikit-learn's order is its sort's; the sets are the same.
        np.testing.assert_array_equal(np.sort(ind, axis=1), np.sort(want_ind, axis=1))
        for mode in ("connectivity", "distance"):
            graph = est.kneighbors_graph(Qc, mode=mode)
            want = theirs.kneighbors_graph(Qc, mode=mode)
            np.testing.assert_allclose(graph.toarray(), want.toarray(), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_leave_one_out_matches_scikit_learn(k):
    X, _, codes = float_data(k)
    ours = KNeighborsClassifier(k, device="cpu").fit(X, codes)
    theirs = sklearn.neighbors.KNeighborsClassifier(k, algorithm="brute").fit(X, codes)
    np.testing.assert_array_equal(ours.predict(None), theirs.predict(None))
    assert ours.score(None, codes) == theirs.score(None, codes)
    for est, ref in (
        (ours, theirs),
        (NearestNeighbors(n_neighbors=k, device="cpu").fit(X), theirs),
    ):
        graph = est.kneighbors_graph(None, mode="distance")
        want = ref.kneighbors_graph(None, mode="distance")
        np.testing.assert_allclose(graph.toarray(), want.toarray(), rtol=1e-6, atol=1e-5)


def test_nearest_tie_break_keeps_the_engines_rule():
    # Query at 5 between 6 (label 2, training row 0) and 4 (label 1): a 1–1 tie.
    X, y = np.array([[6.0], [4.0]]), np.array([2, 1])
    assert KNeighborsClassifier(2).fit(X, y).predict([[5.0]])[0] == 1
    nearest = KNeighborsClassifier(2, tie_break="nearest", device="cpu").fit(X, y)
    assert nearest.predict([[5.0]])[0] == 2
    assert nearest.predict([[4.5]])[0] == 1


def test_callable_weights_match_scikit_learn():
    X, Q, codes = grid_data(3)

    def weights(d):
        return 1.0 / (1.0 + d)

    for ours_cls, theirs_cls in (
        (KNeighborsClassifier, sklearn.neighbors.KNeighborsClassifier),
        (KNeighborsRegressor, sklearn.neighbors.KNeighborsRegressor),
    ):
        clear = clear_boundary(X, Q, 4)
        ours = ours_cls(4, weights=weights, device="cpu").fit(X, codes)
        theirs = theirs_cls(4, weights=weights, algorithm="brute").fit(X, codes)
        np.testing.assert_allclose(ours.predict(Q[clear]), theirs.predict(Q[clear]), rtol=1e-6)


def test_results_do_not_depend_on_n_jobs():
    X, Q, codes = float_data(5, n=3000, m=700)
    runs = []
    for n_jobs in (None, -1, 1, 2, 3):
        clf = KNeighborsClassifier(6, n_jobs=n_jobs, device="cpu").fit(X, codes)
        nn = NearestNeighbors(n_neighbors=7, n_jobs=n_jobs, device="cpu").fit(X)
        reg = KNeighborsRegressor(4, weights="distance", n_jobs=n_jobs, device="cpu")
        reg.fit(X, codes)
        runs.append((clf.predict_proba(Q), clf.predict(Q), *nn.kneighbors(Q), reg.predict(Q)))
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            np.testing.assert_array_equal(a, b)


def gpu_or_skip():
    try:
        return describe_device("cuda")
    except RuntimeError as e:
        if os.environ.get("KMEANS_KNN_REQUIRE_GPU") == "1":
            pytest.fail(f"KMEANS_KNN_REQUIRE_GPU=1, but {e}")
        pytest.skip(f"SKIPPED (no GPU): {e}")


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("tie_break", ["smallest_label", "nearest"])
@pytest.mark.parametrize("k", KS)
def test_gpu_equals_cpu(data, weights, tie_break, k):
    gpu_or_skip()
    X, Q, codes = DATA[data](k)
    y = LABELS["str"](codes)
    results = []
    for device in ("cpu", "cuda"):
        clf = KNeighborsClassifier(k, weights=weights, tie_break=tie_break, device=device)
        clf.fit(X, y)
        reg = KNeighborsRegressor(k, weights=weights, device=device).fit(X, codes * 1.5)
        results.append(
            (clf.predict(Q), clf.predict_proba(Q), *clf.kneighbors(Q), reg.predict(Q),
             clf.kneighbors_graph(Q, mode="distance").toarray())
        )
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
