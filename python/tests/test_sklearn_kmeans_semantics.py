"""KMeans and MiniBatchKMeans as scikit-learn defines them: n_iter_ counted as its Lloyd counts,
verbose printing its lines, float64 transform, and MiniBatchKMeans' sample_weight and
compute_labels. The GPU tests compare with the CPU bit for bit (skipped visibly without a GPU)."""

import os

import numpy as np
import pytest
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import pairwise_distances

from kmeans_knn import KMeans, MiniBatchKMeans, describe_device

X, _ = make_blobs(n_samples=600, centers=5, n_features=4, random_state=3)


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_n_iter_counts_the_confirming_assignment(dtype):
    # scikit-learn's test_kmeans_results: one update, then the assignment that confirms it.
    toy = np.array([[0, 0], [0.5, 0], [0.5, 1], [1, 1]], dtype=dtype)
    init = np.array([[0, 0], [1, 1]], dtype=dtype)
    km = KMeans(2, init=init, n_init=1, device="cpu").fit(toy, sample_weight=[3, 1, 1, 3])
    assert km.n_iter_ == 2
    np.testing.assert_array_equal(km.labels_, [0, 0, 1, 1])


@pytest.mark.parametrize("tol", [0.0, 1e-2])
def test_n_iter_matches_scikit_learn_from_the_same_start(tol):
    init = X[[0, 100, 200, 300, 400]]
    ours = KMeans(5, init=init, n_init=1, tol=tol, device="cpu").fit(X)
    theirs = SkKMeans(5, init=init, n_init=1, tol=tol).fit(X)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    assert ours.n_iter_ == theirs.n_iter_


@pytest.mark.parametrize("tol", [1e-3, 1e-2, 3e-2])
def test_weighted_tol_is_scaled_by_the_unweighted_variance(tol):
    # scikit-learn's _tolerance ignores sample_weight; scaling by the weighted variance (a half
    # of it here) stops these runs later.
    rng = np.random.default_rng(0)
    data = rng.uniform(-1, 1, size=(500, 2))
    w = np.where(np.abs(data[:, 0]) < 0.1, 500.0, 1.0)
    init = data[:6]
    ours = KMeans(6, init=init, n_init=1, tol=tol, device="cpu").fit(data, sample_weight=w)
    theirs = SkKMeans(6, init=init, n_init=1, tol=tol).fit(data, sample_weight=w)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    assert ours.n_iter_ == theirs.n_iter_


def test_empty_clusters_are_relocated_as_scikit_learn_does():
    # scikit-learn's test_kmeans_relocated_clusters without its tie (which NumPy's argpartition
    # breaks by platform; the engine takes the lowest row), plain and weighted: the farthest
    # point leaves its cluster with its weight.
    toy = np.array([[0, 0], [0.5, 0], [0.5, 1], [1.1, 1]])
    init = np.array([[0.5, 0.5], [3, 3]])
    for w in [None, [1, 2, 1, 3]]:
        ours = KMeans(2, init=init, n_init=1, device="cpu").fit(toy, sample_weight=w)
        theirs = SkKMeans(2, init=init, n_init=1).fit(toy, sample_weight=w)
        np.testing.assert_array_equal(ours.labels_, theirs.labels_)
        np.testing.assert_allclose(ours.cluster_centers_, theirs.cluster_centers_, rtol=1e-6)
        assert ours.n_iter_ == theirs.n_iter_


def test_n_iter_at_max_iter():
    km = KMeans(5, max_iter=2, tol=0, random_state=0, device="cpu").fit(X)
    assert km.n_iter_ == 2


@pytest.mark.parametrize("tol", [0.0, 1e-2])
def test_kmeans_verbose_prints_every_iteration(tol, capsys):
    km = KMeans(5, init="random", n_init=2, random_state=1, tol=tol, verbose=1, device="cpu")
    km.fit(X)
    out = capsys.readouterr().out.splitlines()
    assert out.count("Initialization complete") == 2
    iterations = [line for line in out if line.startswith("Iteration ")]
    assert iterations and all(line.endswith(".") for line in iterations)
    converged = [line for line in out if line.startswith("Converged at iteration")]
    assert len(converged) == 2
    assert all(("strict convergence" in line) == (tol == 0) for line in converged)
    assert all(("within tolerance" in line) == (tol > 0) for line in converged)
    assert KMeans(5, random_state=1, device="cpu").fit(X) is not None
    assert capsys.readouterr().out == ""


def test_minibatch_verbose_prints_every_step(capsys):
    km = MiniBatchKMeans(5, batch_size=50, random_state=0, max_no_improvement=3, verbose=1)
    km.set_params(device="cpu").fit(X)
    out = capsys.readouterr().out.splitlines()
    steps = [line for line in out if line.startswith("Minibatch step ")]
    assert len(steps) == km.n_steps_
    assert "ewa inertia" not in steps[0] and "ewa inertia" in steps[1]
    assert out[-1] == f"Converged (lack of improvement in inertia) at step {km.n_steps_}/" + str(
        100 * 600 // 50
    )


@pytest.mark.parametrize("Estimator", [KMeans, MiniBatchKMeans])
def test_transform_float64(Estimator):
    km = Estimator(5, random_state=0, device="cpu").fit(X)
    Xt = km.transform(X)
    assert Xt.dtype == np.float64
    np.testing.assert_allclose(Xt, pairwise_distances(X, km.cluster_centers_), rtol=1e-12)
    np.testing.assert_array_equal(km.transform(km.cluster_centers_).diagonal(), 0)
    manhattan = Estimator(5, metric="manhattan", random_state=0, device="cpu").fit(X)
    np.testing.assert_allclose(
        manhattan.transform(X),
        pairwise_distances(X, manhattan.cluster_centers_, metric="manhattan"),
        rtol=1e-12,
    )
    assert km.transform(X.astype(np.float32)).dtype == np.float32


def test_minibatch_unit_and_scaled_weights():
    params = dict(random_state=4, batch_size=64, n_init=1, device="cpu")
    plain = MiniBatchKMeans(5, **params).fit(X)
    ones = MiniBatchKMeans(5, **params).fit(X, sample_weight=np.ones(len(X)))
    np.testing.assert_array_equal(bits(plain.cluster_centers_), bits(ones.cluster_centers_))
    np.testing.assert_array_equal(plain.labels_, ones.labels_)
    w = np.random.RandomState(0).uniform(size=len(X))
    a = MiniBatchKMeans(5, **params).fit(X, sample_weight=w)
    b = MiniBatchKMeans(5, **params).fit(X, sample_weight=0.5 * w)
    np.testing.assert_array_equal(bits(a.cluster_centers_), bits(b.cluster_centers_))
    assert a.inertia_ == 2 * b.inertia_


def test_minibatch_weights_draw_rows_by_weight():
    # Rows of weight 0 are never drawn: no centroid moves to the far group they form.
    far = np.vstack([X, X[:100] + 1000.0])
    w = np.r_[np.ones(len(X)), np.zeros(100)]
    init = X[[0, 100, 200, 300, 400]]
    km = MiniBatchKMeans(5, init=init, random_state=0, device="cpu").fit(far, sample_weight=w)
    assert np.abs(km.cluster_centers_).max() < 100
    distances = km.transform(far).min(axis=1) ** 2
    np.testing.assert_allclose(km.inertia_, (distances * w).sum(), rtol=1e-4)


def test_minibatch_sample_weight_errors():
    with pytest.raises(ValueError, match="sample_weight"):
        MiniBatchKMeans(2, device="cpu").fit(X, sample_weight=np.ones(3))
    km = MiniBatchKMeans(5, random_state=0, device="cpu")
    km.partial_fit(X, sample_weight=np.ones(len(X)))
    with pytest.raises(ValueError, match="ones only"):
        km.partial_fit(X, sample_weight=np.full(len(X), 2.0))


def test_minibatch_compute_labels_false():
    kept = MiniBatchKMeans(5, random_state=2, device="cpu").fit(X)
    km = MiniBatchKMeans(5, random_state=2, compute_labels=False, device="cpu").fit(X)
    assert not hasattr(km, "labels_")
    np.testing.assert_array_equal(bits(km.cluster_centers_), bits(kept.cluster_centers_))
    assert km.inertia_ > 0 and km.inertia_ != kept.inertia_
    partial = MiniBatchKMeans(5, random_state=2, compute_labels=False, device="cpu")
    partial.partial_fit(X)
    assert not hasattr(partial, "labels_") and not hasattr(partial, "inertia_")


def test_minibatch_weighted_fit_on_gpu_equals_cpu():
    try:
        describe_device("cuda")
    except RuntimeError as e:
        if os.environ.get("KMEANS_KNN_REQUIRE_GPU") == "1":
            pytest.fail(f"KMEANS_KNN_REQUIRE_GPU=1, but {e}")
        pytest.skip(f"SKIPPED (no GPU): {e}")
    w = np.random.RandomState(1).uniform(size=len(X))
    fits = [
        MiniBatchKMeans(5, random_state=3, device=device).fit(X, sample_weight=w)
        for device in ("cpu", "cuda")
    ]
    np.testing.assert_array_equal(bits(fits[0].cluster_centers_), bits(fits[1].cluster_centers_))
    np.testing.assert_array_equal(fits[0].labels_, fits[1].labels_)
    assert fits[0].inertia_ == fits[1].inertia_
