"""On a GPU the estimators give the CPU's results bit for bit. Without a GPU this module is
skipped (visibly), unless KMEANS_KNN_REQUIRE_GPU=1, where that is a failure."""

import os

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_blobs

from kmeans_knn import (
    KMeans,
    KNeighborsClassifier,
    NearestNeighbors,
    describe_device,
    pairwise_distances,
)


@pytest.fixture(scope="module", autouse=True)
def gpu():
    try:
        return describe_device("cuda")
    except RuntimeError as e:
        if os.environ.get("KMEANS_KNN_REQUIRE_GPU") == "1":
            pytest.fail(f"KMEANS_KNN_REQUIRE_GPU=1, but {e}")
        pytest.skip(f"SKIPPED (no GPU): {e}")


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


# Shapes for the GPU's fused small-shape step and for its tiled assignment (d > 96).
@pytest.mark.parametrize("n, d, k", [(20000, 3, 16), (5000, 40, 100), (3000, 200, 20)])
@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
def test_kmeans_gpu_equals_cpu(n, d, k, metric):
    X = make_blobs(n, n_features=d, centers=k, random_state=d)[0].astype(np.float32)
    fits = [
        KMeans(k, metric=metric, n_init=2, random_state=9, device=device).fit(X)
        for device in ("cpu", "cuda")
    ]
    cpu, gpu = fits
    assert gpu.device_.startswith("cuda") and cpu.device_.startswith("cpu")
    assert np.array_equal(cpu.labels_, gpu.labels_)
    assert np.array_equal(bits(cpu.cluster_centers_), bits(gpu.cluster_centers_))
    assert cpu.inertia_ == gpu.inertia_ and cpu.n_iter_ == gpu.n_iter_
    assert np.array_equal(cpu.predict(X[:999]), gpu.predict(X[:999]))


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
def test_weighted_and_cosine_kmeans_gpu_equals_cpu(metric):
    X = make_blobs(5000, n_features=12, centers=8, random_state=3)[0].astype(np.float32)
    w = np.random.default_rng(4).uniform(0, 3, len(X))
    cpu, gpu = (
        KMeans(8, metric=metric, n_init=2, random_state=9, device=device).fit(X, sample_weight=w)
        for device in ("cpu", "cuda")
    )
    assert gpu.device_.startswith("cuda")
    assert np.array_equal(cpu.labels_, gpu.labels_)
    assert np.array_equal(bits(cpu.cluster_centers_), bits(gpu.cluster_centers_))
    assert cpu.inertia_ == gpu.inertia_ and cpu.n_iter_ == gpu.n_iter_


def digits():
    X, y = load_digits(return_X_y=True)
    return X.astype(np.float32), y


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "cosine"])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_kneighbors_gpu_equals_cpu(metric, k):
    X, _ = digits()
    cpu, gpu = (
        NearestNeighbors(n_neighbors=k, metric=metric, device=device).fit(X[:1500]).kneighbors(X)
        for device in ("cpu", "cuda")
    )
    assert np.array_equal(cpu[1], gpu[1])
    assert np.array_equal(bits(cpu[0]), bits(gpu[0]))


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_gpu_equals_cpu(weights):
    X, y = digits()
    cpu, gpu = (
        KNeighborsClassifier(n_neighbors=25, weights=weights, device=device).fit(X[::2], y[::2])
        for device in ("cpu", "cuda")
    )
    assert np.array_equal(cpu.predict(X[1::2]), gpu.predict(X[1::2]))
    assert np.array_equal(bits(cpu.predict_proba(X[1::2])), bits(gpu.predict_proba(X[1::2])))


def test_pairwise_distances_gpu_equals_cpu():
    X, _ = digits()
    cpu, gpu = (pairwise_distances(X[:700], X, device=device) for device in ("cpu", "cuda"))
    assert np.array_equal(bits(cpu), bits(gpu))


@pytest.mark.parametrize("budget", [64 * 1024, 256 * 1024])
def test_streamed_training_rows_equal_the_cpu(budget):
    """A memory_budget below the training rows' size streams them through the GPU in parts."""
    X, y = digits()  # 1797 × 64: 489 KB of training rows on the device
    cpu = KNeighborsClassifier(n_neighbors=15, weights="distance", device="cpu").fit(X, y)
    gpu = KNeighborsClassifier(
        n_neighbors=15, weights="distance", device="cuda", memory_budget=budget
    ).fit(X, y)
    assert np.array_equal(cpu.predict(X[::3]), gpu.predict(X[::3]))
    assert np.array_equal(bits(cpu.predict_proba(X[::3])), bits(gpu.predict_proba(X[::3])))
    nn_cpu = NearestNeighbors(n_neighbors=40, device="cpu").fit(X).kneighbors(X[:300])
    nn_gpu = NearestNeighbors(n_neighbors=40, device="cuda", memory_budget=budget).fit(X)
    nn_gpu = nn_gpu.kneighbors(X[:300])
    assert np.array_equal(nn_cpu[1], nn_gpu[1])
    assert np.array_equal(bits(nn_cpu[0]), bits(nn_gpu[0]))


@pytest.mark.parametrize("budget", [7 << 20, 6 << 20])
def test_a_fit_past_the_memory_budget_equals_the_cpu(budget):
    """A memory_budget below the data's size: the rows take turns on the GPU in batches."""
    X = make_blobs(60_000, n_features=32, centers=20, random_state=2)[0].astype(np.float32)
    cpu, gpu = (
        KMeans(20, init="k-means||", random_state=1, device=device, memory_budget=budget).fit(X)
        for device in ("cpu", "cuda")
    )
    assert "streamed past the memory budget" in gpu.device_
    assert np.array_equal(cpu.labels_, gpu.labels_)
    assert np.array_equal(bits(cpu.cluster_centers_), bits(gpu.cluster_centers_))
    assert cpu.inertia_ == gpu.inertia_ and cpu.n_iter_ == gpu.n_iter_
    with pytest.raises(ValueError, match="memory budget"):
        KMeans(20, device="cuda", memory_budget=1 << 20).fit(X)


def test_a_gpu_set_equals_one_gpu():
    """device="cuda:0,0": the multi-GPU path (row shards, a thread each) on one GPU."""
    X = make_blobs(4000, n_features=10, centers=12, random_state=5)[0].astype(np.float32)
    one, two = (
        KMeans(12, init="k-means||", random_state=3, device=device).fit(X)
        for device in ("cuda:0", "cuda:0,0")
    )
    assert np.array_equal(one.labels_, two.labels_)
    assert np.array_equal(bits(one.cluster_centers_), bits(two.cluster_centers_))
    assert one.inertia_ == two.inertia_ and one.n_iter_ == two.n_iter_
    nn = [
        NearestNeighbors(n_neighbors=9, device=device).fit(X).kneighbors(X[:200])
        for device in ("cuda:0", "cuda:0,0,0")
    ]
    assert np.array_equal(nn[0][1], nn[1][1])
    assert np.array_equal(bits(nn[0][0]), bits(nn[1][0]))
