"""scikit-learn's other metrics (the CPU fallback), metric="precomputed", a radius per query,
fit on a fitted estimator, and float64 distances of the engine's neighbours, against
scikit-learn's brute force."""

import os
import warnings

import numpy as np
import pytest
import sklearn.neighbors as sk
from sklearn.metrics import DistanceMetric, pairwise_distances

from kmeans_knn import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors, describe_device
from kmeans_knn._kneighbors import _engine_metric

RNG = np.random.RandomState(0)
X = RNG.rand(80, 4)
Q = RNG.rand(9, 4)
Y = RNG.randint(3, size=80)


def custom(a, b):
    return np.sqrt(np.sum((a - b) ** 2)) + np.abs(a[0] - b[0])


# (metric, extra parameters, data transform) for the CPU fallback.
FALLBACK = [
    ("braycurtis", {}, None),
    ("canberra", {}, None),
    ("correlation", {}, None),
    ("minkowski", {"p": 0.5}, None),
    ("minkowski", {"p": 3, "metric_params": {"w": RNG.rand(4)}}, None),
    ("seuclidean", {"metric_params": {"V": RNG.rand(4) + 0.5}}, None),
    ("mahalanobis", {"metric_params": {"VI": np.eye(4) * 2 + 0.1}}, None),
    ("haversine", {}, lambda A: A[:, :2]),
    ("jaccard", {}, lambda A: A > 0.5),
    ("hamming", {}, lambda A: A > 0.5),
    ("nan_euclidean", {}, None),
    (custom, {}, None),
    (DistanceMetric.get_metric("chebyshev"), {}, None),
]
# Metrics with equal distances everywhere: scikit-learn leaves their order unspecified.
TIED = ("jaccard", "hamming")


def fallback_case(metric, params, transform):
    train, queries = (X, Q) if transform is None else (transform(X), transform(Q))
    ours = NearestNeighbors(n_neighbors=6, radius=0.6, metric=metric, device="cpu", **params)
    # scikit-learn's NearestNeighbors takes a DistanceMetric object in kneighbors only.
    same = "chebyshev" if isinstance(metric, DistanceMetric) else metric
    ref = sk.NearestNeighbors(n_neighbors=6, radius=0.6, metric=same, algorithm="brute",
                              **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # p < 1 and boolean conversions warn, as scikit-learn.
        return ours.fit(train), ref.fit(train), queries


@pytest.mark.parametrize(
    "metric, params, engine",
    [("chebyshev", {}, "chebyshev"), ("minkowski", {"p": 3}, "minkowski:3.0"),
     ("minkowski", {"p": np.inf}, "chebyshev")],
)
def test_engine_lp_metrics_equal_scikit_learns_brute_force(metric, params, engine):
    ours, ref, queries = fallback_case(metric, params, None)
    assert ours._engine_metric == engine
    for q in (queries, None):
        got, want = ours.kneighbors(q), ref.kneighbors(q)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(got[1], want[1])
        got_r = ours.radius_neighbors(q, sort_results=True)
        want_r = ref.radius_neighbors(q, sort_results=True)
        for a, b in zip(got_r[1], want_r[1]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("metric, params, transform", FALLBACK)
def test_fallback_equals_scikit_learns_brute_force(metric, params, transform):
    ours, ref, queries = fallback_case(metric, params, transform)
    assert ours._engine_metric is None
    for q in (queries, None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, want = ours.kneighbors(q), ref.kneighbors(q)
            got_r = ours.radius_neighbors(q, sort_results=True)
            want_r = ref.radius_neighbors(q, sort_results=True)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-15)
        if metric in TIED:
            # Ties by index: the stable order of scikit-learn's distances.
            train = ref._fit_X
            full = pairwise_distances(train if q is None else q, train, metric=metric)
            order = np.argsort(full, axis=1, kind="stable")
            if q is None:
                # scikit-learn's X=None: k + 1 neighbours without the row itself, or without
                # the first where duplicates push the row out.
                order = np.array([[j for j in o[:7] if j != i][:6] if i in o[:7] else o[1:7]
                                  for i, o in enumerate(order)])
            want = (None, order[:, :6])
        np.testing.assert_array_equal(got[1], want[1])
        for g_d, g_i, w_d, w_i in zip(*got_r, *want_r):
            np.testing.assert_array_equal(g_i, w_i)
            np.testing.assert_allclose(g_d, w_d, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("metric", ["chebyshev", "braycurtis"])
def test_ties_go_to_the_smaller_index(metric):
    grid = (np.arange(60).reshape(20, 3) * 7 % 5).astype(float)
    nn = NearestNeighbors(n_neighbors=7, metric=metric, device="cpu").fit(grid)
    distances, indices = nn.kneighbors(grid[:6])
    full = pairwise_distances(grid[:6], grid, metric=metric)
    want = np.argsort(full, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(distances, np.take_along_axis(full, want, 1))
    # The radius graph lists each row's neighbours by index, or nearest first when sorted.
    graph = nn.radius_neighbors_graph(grid[:6], radius=0.5, mode="distance")
    np.testing.assert_array_equal(graph.toarray(), np.where(full <= 0.5, full, 0.0))


def test_scikit_learns_mixins():
    assert isinstance(NearestNeighbors(), sk._base.KNeighborsMixin)
    assert isinstance(NearestNeighbors(), sk._base.RadiusNeighborsMixin)
    for cls in (KNeighborsClassifier, KNeighborsRegressor):
        assert isinstance(cls(), sk._base.KNeighborsMixin)


def test_metric_routing():
    assert _engine_metric("minkowski", 2, None) == "euclidean"
    assert _engine_metric("minkowski", None, {"p": 1}) == "manhattan"
    assert _engine_metric("l2", 2, None) == "euclidean"
    assert _engine_metric("cosine", 2, {"p": 3}) == "cosine"
    assert _engine_metric("minkowski", 3, None) == "minkowski:3.0"
    assert _engine_metric("chebyshev", 2, None) == "chebyshev"
    for metric, p, params in [
        ("minkowski", 0.5, None),
        ("minkowski", 2, {"w": np.ones(3)}),
        ("euclidean", 2, {"V": 1}),
        ("precomputed", 2, None),
        (custom, 2, None),
    ]:
        assert _engine_metric(metric, p, params) is None


def test_scikit_learns_errors_for_trees_and_p_below_one():
    with pytest.raises(ValueError, match="Metric 'canberra' not valid"):
        NearestNeighbors(metric="canberra", algorithm="kd_tree", device="cpu").fit(X)
    with pytest.raises(ValueError, match="kd_tree does not support callable"):
        NearestNeighbors(metric=custom, algorithm="kd_tree", device="cpu").fit(X)
    with pytest.raises(ValueError, match='algorithm="ball_tree" does not support 0 < p < 1'):
        NearestNeighbors(p=0.5, algorithm="ball_tree", device="cpu").fit(X)
    with pytest.warns(UserWarning, match="Mind that for 0 < p < 1"):
        NearestNeighbors(p=0.5, device="cpu").fit(X)


def test_precomputed_dense_equals_the_rows():
    D, DQ = pairwise_distances(X), pairwise_distances(Q, X)
    rows = NearestNeighbors(n_neighbors=5, device="cpu").fit(X)
    pre = NearestNeighbors(n_neighbors=5, metric="precomputed", device="cpu").fit(D)
    for a, b in ((DQ, Q), (None, None)):
        got, want = pre.kneighbors(a), rows.kneighbors(b)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    got = pre.radius_neighbors(DQ, radius=0.5, sort_results=True)
    want = rows.radius_neighbors(Q, radius=0.5, sort_results=True)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g, w)
    for cls in (KNeighborsClassifier, KNeighborsRegressor):
        got = cls(3, metric="precomputed", device="cpu").fit(D, Y).predict(DQ)
        np.testing.assert_array_equal(got, cls(3, device="cpu").fit(X, Y).predict(Q))
    assert pre.__sklearn_tags__().input_tags.pairwise
    with pytest.raises(ValueError, match="must be square"):
        NearestNeighbors(metric="precomputed", device="cpu").fit(DQ)
    with pytest.raises(ValueError, match="Negative values"):
        pre.kneighbors(-DQ)
    with pytest.raises(ValueError, match="features"):
        pre.kneighbors(Q)


def test_precomputed_sparse_graph():
    graph = sk.KNeighborsTransformer(n_neighbors=10, mode="distance").fit(X).transform(Q)
    train_graph = sk.KNeighborsTransformer(n_neighbors=10, mode="distance").fit_transform(X)
    pre = NearestNeighbors(n_neighbors=5, metric="precomputed", device="cpu").fit(train_graph)
    rows = NearestNeighbors(n_neighbors=5, device="cpu").fit(X)
    got, want = pre.kneighbors(graph), rows.kneighbors(Q)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    with pytest.raises(ValueError, match="12 neighbors per samples are required"):
        pre.kneighbors(graph, n_neighbors=12)
    # Only the stored entries are candidates, even within an infinite radius.
    found = pre.radius_neighbors(graph, radius=np.inf, return_distance=False)
    for q, ind in enumerate(found):
        np.testing.assert_array_equal(ind, np.sort(graph[q].indices))


@pytest.mark.parametrize("metric", ["euclidean", "chebyshev"])
def test_a_radius_per_query(metric):
    nn = NearestNeighbors(metric=metric, device="cpu").fit(X)
    radii = np.linspace(0.1, 0.9, len(Q))
    distances, indices = nn.radius_neighbors(Q, radius=radii, sort_results=True)
    for q, r in enumerate(radii):
        one_d, one_i = nn.radius_neighbors(Q[q : q + 1], radius=r, sort_results=True)
        np.testing.assert_array_equal(indices[q], one_i[0])
        np.testing.assert_array_equal(distances[q], one_d[0])
    graph = nn.radius_neighbors_graph(Q, radius=radii)
    np.testing.assert_array_equal(np.diff(graph.indptr), [len(i) for i in indices])
    with pytest.raises(ValueError, match="one radius per query"):
        nn.radius_neighbors(Q, radius=radii[:3])


@pytest.mark.parametrize("cls", [NearestNeighbors, KNeighborsClassifier, KNeighborsRegressor])
def test_fit_on_a_fitted_estimator_or_tree(cls):
    want = NearestNeighbors(n_neighbors=3, device="cpu").fit(X).kneighbors(Q)
    ours = NearestNeighbors(device="cpu").fit(X)
    for source in (ours, sk.NearestNeighbors().fit(X), sk.KDTree(X), sk.BallTree(X)):
        est = cls(n_neighbors=3, device="cpu")
        est = est.fit(source) if cls is NearestNeighbors else est.fit(source, Y)
        got = est.kneighbors(Q)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "cosine"])
def test_float64_distances_of_the_engines_neighbours(metric):
    nn = NearestNeighbors(n_neighbors=6, metric=metric, device="cpu").fit(X)
    distances, indices = nn.kneighbors(Q)
    assert distances.dtype == np.float64
    full = pairwise_distances(Q, X, metric="euclidean" if metric == "sqeuclidean" else metric)
    full = full**2 if metric == "sqeuclidean" else full
    # 1 - cos cancels: an absolute tolerance of a few ulps of 1.
    np.testing.assert_allclose(distances, np.take_along_axis(full, indices, 1), rtol=1e-12,
                               atol=1e-15 if metric != "cosine" else 1e-15 * 4)
    assert np.all(np.diff(distances, axis=1) >= 0)
    # float32 input: the engine's float32 distances.
    d32, i32 = nn.kneighbors(Q.astype(np.float32))
    assert d32.dtype == np.float32
    np.testing.assert_allclose(d32, distances, rtol=1e-5, atol=1e-6)


def test_regressor_with_tiny_offsets_and_inverse_square_weights():
    # scikit-learn's test_kneighbors_regressor: offsets of 1e-5 vanish in float32 distances.
    def inverse_square(d):
        with np.errstate(divide="ignore"):
            return 1.0 / d**2

    train = 2 * RNG.rand(40, 5) - 1
    y = np.sqrt((train**2).sum(1))
    y /= y.max()
    for weights in ("uniform", "distance", inverse_square):
        reg = KNeighborsRegressor(3, weights=weights, device="cpu").fit(train, y)
        got = reg.predict(train[:10] + 1e-5 * (2 * RNG.rand(1, 5) - 1))
        assert np.all(np.isfinite(got)) and np.all(np.abs(got - y[:10]) < 0.3)


@pytest.fixture
def gpu():
    """A GPU, else a visible skip (a failure with KMEANS_KNN_REQUIRE_GPU=1), as test_gpu.py."""
    try:
        return describe_device("cuda")
    except RuntimeError as e:
        if os.environ.get("KMEANS_KNN_REQUIRE_GPU") == "1":
            pytest.fail(f"KMEANS_KNN_REQUIRE_GPU=1, but {e}")
        pytest.skip(f"SKIPPED (no GPU): {e}")


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "chebyshev", "precomputed"])
def test_gpu_equals_cpu_for_float64_and_fallback(metric, gpu):
    train, queries = RNG.rand(3000, 24), RNG.rand(200, 24)
    y = RNG.rand(3000)
    if metric == "precomputed":
        train, queries = pairwise_distances(train), pairwise_distances(queries, train)
    results = []
    for device in ("cpu", "cuda"):
        nn = NearestNeighbors(n_neighbors=10, metric=metric, device=device).fit(train)
        reg = KNeighborsRegressor(10, weights="distance", metric=metric, device=device)
        results.append((*nn.kneighbors(queries), *nn.radius_neighbors(queries, radius=0.8),
                        reg.fit(train, y).predict(queries)))
    for a, b in zip(*results):
        if a.dtype == object:
            for x, z in zip(a, b):
                np.testing.assert_array_equal(x, z)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_tie_rules_in_the_python_vote_equal_the_engines(weights):
    # Integer grid rows: ties everywhere. The engine votes for euclidean queries; the NumPy vote
    # (X=None, leave-one-out) must pick the same classes under both rules.
    grid = (np.arange(120).reshape(40, 3) * 7 % 5).astype(np.float32)
    labels = np.arange(40) % 4
    for tie_break in ("smallest_label", "nearest"):
        clf = KNeighborsClassifier(4, weights=weights, tie_break=tie_break, device="cpu")
        clf.fit(grid, labels)
        engine = clf.predict(grid[:12] + 0.25)
        clf.weights = lambda d: _inverse(d) if weights == "distance" else np.ones_like(d)
        python = clf.predict(grid[:12] + 0.25)
        np.testing.assert_array_equal(python, engine)


def _inverse(d):
    with np.errstate(divide="ignore"):
        w = 1.0 / d.astype(np.float64)
    exact = np.isinf(w)
    return np.where(exact.any(axis=1, keepdims=True), exact, w)
