"""KMeans with sample_weight and with metric="cosine" (spherical k-means)."""

import numpy as np
import pytest
from sklearn.datasets import load_digits

from kmeans_knn import KMeans

RNG = np.random.default_rng(3)
X = RNG.uniform(-1, 1, size=(400, 5)).astype(np.float32)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_integer_weights_equal_repeated_rows(metric):
    w = RNG.integers(0, 4, size=len(X))
    params = dict(n_clusters=6, metric=metric, random_state=5, device="cpu")
    weighted = KMeans(**params).fit(X, sample_weight=w)
    repeated = KMeans(**params).fit(np.repeat(X, w, axis=0))
    assert np.array_equal(bits(weighted.cluster_centers_), bits(repeated.cluster_centers_))
    assert weighted.inertia_ == repeated.inertia_ and weighted.n_iter_ == repeated.n_iter_
    assert np.array_equal(np.repeat(weighted.labels_, w), repeated.labels_)
    assert weighted.score(X, sample_weight=w) == pytest.approx(-weighted.inertia_, rel=1e-5)


def test_fit_predict_fit_transform_and_score_take_weights():
    w = RNG.uniform(0.1, 2.0, size=len(X))
    km = KMeans(4, random_state=0, device="cpu")
    labels = km.fit_predict(X, sample_weight=w)
    assert np.array_equal(labels, km.labels_)
    distances = KMeans(4, random_state=0, device="cpu").fit_transform(X, sample_weight=w)
    np.testing.assert_array_equal(distances, km.transform(X))
    assert km.score(X, sample_weight=w) == pytest.approx(-km.inertia_, rel=1e-5)
    assert km.score(X, sample_weight=np.ones(len(X))) == pytest.approx(km.score(X))
    # Weighted means: each centroid is the weighted average of its rows.
    for c in range(4):
        rows = km.labels_ == c
        mean = np.average(X[rows], axis=0, weights=w[rows])
        np.testing.assert_allclose(km.cluster_centers_[c], mean, rtol=1e-5, atol=1e-6)


def test_bad_weights_are_value_errors():
    km = KMeans(3, device="cpu")
    with pytest.raises(ValueError, match="sample_weight"):
        km.fit(X, sample_weight=np.ones(len(X) - 1))
    with pytest.raises(ValueError, match="(?i)negative"):
        km.fit(X, sample_weight=-np.ones(len(X)))
    with pytest.raises(ValueError, match="zero"):
        km.fit(X, sample_weight=np.zeros(len(X)))
    w = np.zeros(len(X))
    w[:2] = 1
    with pytest.raises(ValueError, match="positive weight"):
        km.fit(X, sample_weight=w)


def test_cosine_kmeans_is_spherical():
    km = KMeans(5, metric="cosine", random_state=2, device="cpu").fit(X)
    np.testing.assert_allclose(np.linalg.norm(km.cluster_centers_, axis=1), 1.0, rtol=1e-6)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    cos = unit @ km.cluster_centers_.T
    assert np.array_equal(np.argmax(cos, axis=1), km.labels_)
    np.testing.assert_allclose(km.transform(X), 1 - cos, atol=1e-6)
    assert km.inertia_ == pytest.approx((1 - cos.max(axis=1)).sum(), rel=1e-5)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-5)
    assert np.array_equal(km.predict(3.5 * X), km.labels_)
    zero = X.copy()
    zero[7] = 0
    with pytest.raises(ValueError, match="row 7"):
        km.predict(zero)


def spherical_reference(unit, init, max_iter=300):
    """Spherical k-means in NumPy float64: labels by the largest inner product, centroids the
    normalised means, until no label changes; returns Σ (1 − cos)."""
    centers = init.astype(np.float64)
    labels = None
    for _ in range(max_iter):
        new = np.argmax(unit @ centers.T, axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        for c in range(len(centers)):
            if np.any(labels == c):
                mean = unit[labels == c].sum(axis=0)
                centers[c] = mean / np.linalg.norm(mean)
    return (1 - np.einsum("ij,ij->i", unit, centers[labels])).sum()


def test_spherical_kmeans_on_digits_matches_a_numpy_reference():
    X = load_digits().data.astype(np.float32)
    unit = X / np.linalg.norm(X, axis=1, keepdims=True).astype(np.float32)
    init = unit[np.random.default_rng(0).choice(len(unit), 10, replace=False)]
    km = KMeans(10, init=init, metric="cosine", tol=0, device="cpu").fit(X)
    want = spherical_reference(unit.astype(np.float64), init)
    assert km.inertia_ == pytest.approx(want, rel=0.01)
