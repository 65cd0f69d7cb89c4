"""radius_neighbors and radius_neighbors_graph against scikit-learn's brute force, entry for
entry, on integer grids with radii between attainable distances (where float32 and float64
cannot disagree), and the GPU against the CPU bit for bit (skipped visibly without a GPU)."""

import os

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors as SkNearestNeighbors

from kmeans_knn import NearestNeighbors, describe_device

# Our metric name -> scikit-learn's.
METRICS = {"euclidean": "euclidean", "manhattan": "manhattan", "sqeuclidean": "sqeuclidean"}


def grid(n, d, seed):
    """Integer points in 0..4: duplicates and many equal distances."""
    return np.random.default_rng(seed).integers(0, 5, size=(n, d)).astype(np.float64)


def radii(metric):
    """Radii halfway between attainable distances (integers for L1 and squared L2, square
    roots of integers for L2), and one that catches every row."""
    if metric == "euclidean":
        return [np.sqrt(k + 0.5) for k in (0, 2, 5)] + [100.0]
    return [0.5, 2.5, 5.5, 100.0]


def pair(metric, radius, **kw):
    ours = NearestNeighbors(radius=radius, metric=metric, device="cpu", **kw)
    theirs = SkNearestNeighbors(radius=radius, metric=METRICS[metric], algorithm="brute")
    return ours, theirs


def same_ragged(a, b):
    """Object arrays of per-query arrays with the same entries (in any order)."""
    assert a.dtype == object and a.shape == b.shape
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.sort(x), np.sort(y))


@pytest.mark.parametrize("metric", list(METRICS))
@pytest.mark.parametrize("with_x", [True, False])
def test_radius_neighbors_matches_scikit_learn(metric, with_x):
    X, Q = grid(120, 3, 1), grid(40, 3, 2)
    for radius in radii(metric):
        ours, theirs = pair(metric, radius)
        ours.fit(X), theirs.fit(X)
        query = Q if with_x else None
        # Sorted: both nearest first; ours breaks ties by index (scikit-learn's order among
        # equal distances is its sort's), and the (index, distance) pairs are the same.
        d1, i1 = ours.radius_neighbors(query, sort_results=True)
        d2, i2 = theirs.radius_neighbors(query, sort_results=True)
        same_ragged(i1, i2)
        for dx, ix, dy, iy in zip(d1, i1, d2, i2):
            assert np.all(np.diff(dx) >= 0) and np.all(np.diff(dy) >= 0)
            np.testing.assert_array_equal(np.lexsort((ix, dx)), np.arange(len(ix)))
            np.testing.assert_allclose(dx[np.argsort(ix)], dy[np.argsort(iy)], rtol=1e-6)
        # Unsorted: the same sets, ours in index order.
        i1 = ours.radius_neighbors(query, return_distance=False)
        i2 = theirs.radius_neighbors(query, return_distance=False)
        same_ragged(i1, i2)
        assert all(np.all(np.diff(x) > 0) for x in i1)
        # A radius given to the call overrides the estimator's.
        i1 = ours.radius_neighbors(query, radius=radii(metric)[0], return_distance=False)
        i2 = theirs.radius_neighbors(query, radius=radii(metric)[0], return_distance=False)
        same_ragged(i1, i2)


@pytest.mark.parametrize("metric", list(METRICS))
@pytest.mark.parametrize("mode", ["connectivity", "distance"])
@pytest.mark.parametrize("with_x", [True, False])
def test_radius_neighbors_graph_matches_scikit_learn(metric, mode, with_x):
    X, Q = grid(90, 2, 3), grid(30, 2, 4)
    radius = radii(metric)[1]
    ours, theirs = pair(metric, radius)
    ours.fit(X), theirs.fit(X)
    query = Q if with_x else None
    g1 = ours.radius_neighbors_graph(query, mode=mode)
    g2 = theirs.radius_neighbors_graph(query, mode=mode)
    assert g1.shape == g2.shape and g1.format == "csr"
    np.testing.assert_array_equal(g1.indptr, g2.indptr)
    a, b = g1.toarray(), g2.toarray()
    np.testing.assert_array_equal(a != 0, b != 0)
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_scikit_learn_errors_and_edge_cases():
    X = grid(20, 2, 5)
    nn = NearestNeighbors(radius=1.5, device="cpu").fit(X)
    with pytest.raises(ValueError, match="return_distance must be True"):
        nn.radius_neighbors(X, return_distance=False, sort_results=True)
    with pytest.raises(ValueError, match="Unsupported mode"):
        nn.radius_neighbors_graph(X, mode="weights")
    # Nothing within a negative radius; everything within a huge one (X=None: but itself).
    empty = nn.radius_neighbors(X, radius=-1.0, return_distance=False)
    assert all(len(x) == 0 for x in empty)
    everything = nn.radius_neighbors(radius=1e6, return_distance=False)
    assert all(len(x) == len(X) - 1 for x in everything)
    assert nn.get_params()["radius"] == 1.5
    # Radius 0 catches exact duplicates only.
    dist, ind = nn.radius_neighbors(X[:3], radius=0.0)
    for q, (d, i) in enumerate(zip(dist, ind)):
        assert np.all(d == 0) and np.all((X[i] == X[q]).all(axis=1))


@pytest.fixture
def gpu():
    try:
        return describe_device("cuda")
    except RuntimeError as e:
        if os.environ.get("KMEANS_KNN_REQUIRE_GPU") == "1":
            pytest.fail(f"KMEANS_KNN_REQUIRE_GPU=1, but {e}")
        pytest.skip(f"SKIPPED (no GPU): {e}")


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine", "inner_product"])
def test_gpu_radius_equals_cpu(gpu, metric):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3000, 16)).astype(np.float32)
    Q = rng.standard_normal((200, 16)).astype(np.float32)
    cpu = NearestNeighbors(metric=metric, device="cpu").fit(X)
    # A radius at the 50th neighbour's distance of the first query: ties at the radius count.
    radius = float(cpu.kneighbors(Q[:1], 50)[0][0, -1])
    results = []
    for device in ("cpu", "cuda"):
        # The constructor takes radius >= 0, as scikit-learn's; the negated inner product's
        # negative radius goes to the calls, which take any.
        nn = NearestNeighbors(metric=metric, device=device).fit(X)
        d, i = nn.radius_neighbors(Q, radius=radius, sort_results=True)
        g = nn.radius_neighbors_graph(radius=radius, mode="distance")
        results.append((d, i, g))
    (d1, i1, g1), (d2, i2, g2) = results
    for a, b in zip(i1, i2):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(d1, d2):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    np.testing.assert_array_equal(g1.indptr, g2.indptr)
    np.testing.assert_array_equal(g1.indices, g2.indices)
    np.testing.assert_array_equal(g1.data.view(np.uint32), g2.data.view(np.uint32))
