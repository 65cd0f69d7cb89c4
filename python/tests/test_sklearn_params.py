"""scikit-learn's parameters with their meaning, its exceptions, and its dtypes."""

import numpy as np
import pytest
import sklearn.neighbors
from sklearn.exceptions import ConvergenceWarning
from sklearn.neighbors._base import KNeighborsMixin
from sklearn.utils._param_validation import InvalidParameterError

import kmeans_knn
from kmeans_knn import KMeans, KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors

NEIGHBOURS = [NearestNeighbors, KNeighborsClassifier, KNeighborsRegressor]


def data(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, 3, n)


def fit(cls, X, y, **params):
    est = cls(device="cpu", **params)
    return est.fit(X) if cls is NearestNeighbors else est.fit(X, y)


def test_version():
    assert isinstance(kmeans_knn.__version__, str) and kmeans_knn.__version__.count(".") == 2


@pytest.mark.parametrize("cls", NEIGHBOURS)
@pytest.mark.parametrize("n_neighbors", [0, -1, 2.5, "3"])
def test_bad_n_neighbors_is_scikit_learns_error(cls, n_neighbors):
    X, y = data()
    with pytest.raises(InvalidParameterError, match="n_neighbors"):
        fit(cls, X, y, n_neighbors=n_neighbors)


@pytest.mark.parametrize("cls", NEIGHBOURS)
def test_metric_names_and_minkowski(cls):
    X, y = data()
    Q = X[:7] + 0.1
    for metric, p, same_as in [
        ("minkowski", 2, "euclidean"),
        ("minkowski", 1, "manhattan"),
        ("l2", 2, "euclidean"),
        ("cityblock", 2, "manhattan"),
        ("l1", 2, "manhattan"),
    ]:
        a = fit(cls, X, y, metric=metric, p=p)
        b = fit(cls, X, y, metric=same_as)
        assert a.effective_metric_ == same_as
        for x, z in zip(a.kneighbors(Q), b.kneighbors(Q)):
            np.testing.assert_array_equal(x, z)
    a = fit(cls, X, y, metric="minkowski", p=None, metric_params={"p": 1})
    assert a.effective_metric_ == "manhattan"
    # Any p ≥ 1 and chebyshev run on the engine, with scikit-learn's answers; scipy's other
    # metrics and 0 < p < 1 on the CPU fallback.
    for metric, p, engine in (("minkowski", 3, "minkowski:3.0"), ("chebyshev", None, "chebyshev")):
        ref = sklearn.neighbors.NearestNeighbors(n_neighbors=5, metric=metric, p=p or 2).fit(X)
        got = fit(cls, X, y, metric=metric, p=p or 2, n_neighbors=5)
        assert got._engine_metric == engine
        for x, z in zip(got.kneighbors(Q), ref.kneighbors(Q)):
            np.testing.assert_allclose(x, z, rtol=1e-12)
    assert fit(cls, X, y, metric="minkowski", p=np.inf)._engine_metric == "chebyshev"
    assert fit(cls, X, y, metric="braycurtis")._engine_metric is None
    with pytest.warns(UserWarning, match="0 < p < 1"):
        fit(cls, X, y, metric="minkowski", p=0.5)
    with pytest.raises(ValueError, match='algorithm="kd_tree" does not support 0 < p < 1'):
        fit(cls, X, y, metric="minkowski", p=0.5, algorithm="kd_tree")
    assert fit(cls, X, y, metric="chebyshev").effective_metric_ == "chebyshev"
    with pytest.raises(InvalidParameterError, match="'metric' parameter"):
        fit(cls, X, y, metric="chebychev")


@pytest.mark.parametrize("cls", NEIGHBOURS)
def test_algorithm_is_accepted_and_trees_warn(cls):
    X, y = data()
    want = fit(cls, X, y).kneighbors(X[:5])
    for algorithm in ("auto", "brute"):
        got = fit(cls, X, y, algorithm=algorithm, leaf_size=10).kneighbors(X[:5])
        np.testing.assert_array_equal(got[1], want[1])
    for algorithm in ("kd_tree", "ball_tree"):
        with pytest.warns(UserWarning, match="exact brute-force"):
            est = fit(cls, X, y, algorithm=algorithm)
        np.testing.assert_array_equal(est.kneighbors(X[:5])[1], want[1])
    with pytest.raises(InvalidParameterError, match="algorithm"):
        fit(cls, X, y, algorithm="annoy")


@pytest.mark.parametrize("cls", NEIGHBOURS)
def test_kneighbors_and_graph_everywhere(cls):
    X, y = data()
    est = fit(cls, X, y, n_neighbors=4)
    assert isinstance(est, KNeighborsMixin)
    ref = sklearn.neighbors.NearestNeighbors(n_neighbors=4, algorithm="brute").fit(X)
    for Q in (X[:9] + 0.05, None):
        dist, ind = est.kneighbors(Q)
        want_dist, want_ind = ref.kneighbors(Q)
        np.testing.assert_array_equal(ind, want_ind)
        np.testing.assert_allclose(dist, want_dist, rtol=1e-6, atol=1e-5)
        for mode in ("connectivity", "distance"):
            graph = est.kneighbors_graph(Q, mode=mode)
            want = ref.kneighbors_graph(Q, mode=mode)
            np.testing.assert_array_equal(graph.indices, want.indices)
            np.testing.assert_array_equal(graph.indptr, want.indptr)
            np.testing.assert_allclose(graph.data, want.data, rtol=1e-6, atol=1e-5)
    with pytest.raises(ValueError, match="Unsupported mode"):
        est.kneighbors_graph(X, mode="weights")
    with pytest.raises(ValueError, match="n_neighbors <= n_samples_fit"):
        est.kneighbors(X, n_neighbors=61)


def test_dtype_follows_the_input():
    X, y = data()
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        assert NearestNeighbors(device="cpu").fit(Xd).kneighbors(Xd)[0].dtype == dtype
        km = KMeans(3, random_state=0, device="cpu").fit(Xd)
        assert km.cluster_centers_.dtype == dtype and km.transform(Xd).dtype == dtype
        reg = KNeighborsRegressor(device="cpu").fit(X, y.astype(dtype))
        assert reg.predict(Xd).dtype == dtype
    # Float32 arithmetic: float64 outputs are the float32 ones widened.
    a = KMeans(3, random_state=0, device="cpu").fit(X)
    b = KMeans(3, random_state=0, device="cpu").fit(X.astype(np.float32))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_.astype(np.float64))


def test_kmeans_parameters():
    X, _ = data(200)
    want = KMeans(4, random_state=1, device="cpu").fit(X)
    got = KMeans(4, random_state=1, algorithm="lloyd", verbose=0, copy_x=False, device="cpu")
    np.testing.assert_array_equal(got.fit(X).labels_, want.labels_)
    with pytest.warns(UserWarning, match="Lloyd"):
        elkan = KMeans(4, random_state=1, algorithm="elkan", device="cpu").fit(X)
    np.testing.assert_array_equal(elkan.labels_, want.labels_)
    for bad in (dict(n_clusters=0), dict(algorithm="full"), dict(max_iter=0), dict(tol=-1)):
        with pytest.raises(InvalidParameterError, match=next(iter(bad))):
            KMeans(**bad).fit(X)
    with pytest.warns(ConvergenceWarning, match="distinct clusters"):
        KMeans(3, random_state=0, device="cpu").fit(np.repeat(X[:2], 10, axis=0))

    def init(X, n_clusters, random_state):
        return X[:n_clusters]

    np.testing.assert_array_equal(
        KMeans(4, init=init, n_init=1, device="cpu").fit(X).cluster_centers_,
        KMeans(4, init=X[:4], n_init=1, device="cpu").fit(X).cluster_centers_,
    )


def test_a_missing_gpu_names_the_device_parameter():
    X, y = data()
    try:
        kmeans_knn.describe_device("cuda")
        pytest.skip("there is a GPU")
    except RuntimeError:
        pass
    for make in (
        lambda: KMeans(3, device="cuda").fit(X),
        lambda: KNeighborsClassifier(device="cuda").fit(X, y),
    ):
        with pytest.raises(RuntimeError, match="device parameter") as e:
            make()
        assert "--device" not in str(e.value)


def test_multi_output_classifier():
    X, y = data()
    Y = np.stack([y, (y + 1) % 2, np.array(["a", "b", "c"])[y]], axis=1)
    clf = KNeighborsClassifier(4, device="cpu").fit(X, Y)
    ref = sklearn.neighbors.KNeighborsClassifier(4, algorithm="brute").fit(X, Y)
    Q = X[:20] + 0.01
    np.testing.assert_array_equal(clf.predict(Q), ref.predict(Q))
    for a, b in zip(clf.predict_proba(Q), ref.predict_proba(Q)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
