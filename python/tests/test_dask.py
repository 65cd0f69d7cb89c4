"""kmeans_knn.dask on a local cluster of worker processes: every result equals the
single-process estimator's on the concatenated rows, bit for bit, for every partitioning.

With KMEANS_KNN_DASK_GPUS=1 the cluster is `local_gpu_cluster()` (one worker per GPU, at least
two GPUs) and the fits must run on the GPUs; otherwise three CPU worker processes (device "auto"
there: a GPU when the machine has one)."""

import contextlib
import functools
import gc
import os
import pickle

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import kmeans_knn  # noqa: E402
from kmeans_knn import dask as kd  # noqa: E402

GPUS = os.environ.get("KMEANS_KNN_DASK_GPUS") == "1"


@pytest.fixture(scope="module")
def client():
    if GPUS:
        if len(kd.visible_gpus()) < 2:
            pytest.fail("KMEANS_KNN_DASK_GPUS=1 needs at least two GPUs")
        cluster = kd.local_gpu_cluster()
    else:
        cluster = distributed.LocalCluster(
            n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None
        )
    with cluster, distributed.Client(cluster) as c:
        yield c


def partitionings(n):
    """One partition, uneven partitions, a partition of one row, many small ones."""
    return [(n,), (n // 3, 1, n - n // 3 - 1), (1, n - 1), (37,) * (n // 37) + (n % 37,)]


def data(n=740, d=5, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(6, d))
    return (centres[rng.integers(6, size=n)] + rng.normal(size=(n, d))).astype(np.float32)


def assert_same_fit(dask_km, ref, X_rows):
    assert np.array_equal(dask_km.cluster_centers_, ref.cluster_centers_)
    assert np.array_equal(dask_km.labels_.compute(), ref.labels_)
    assert dask_km.inertia_ == ref.inertia_
    assert dask_km.n_iter_ == ref.n_iter_
    assert dask_km.labels_.chunks[0] == X_rows
    if GPUS:
        assert "cuda" in dask_km.device_, dask_km.device_


@pytest.mark.parametrize(
    "params",
    [
        dict(n_clusters=6),
        dict(n_clusters=9, init="k-means||", metric="manhattan"),
        dict(n_clusters=5, init="random", n_init=3, max_iter=15),
        dict(n_clusters=12, init="random-labels", tol=0.0, max_iter=8),
        dict(n_clusters=6, metric="cosine"),
        dict(n_clusters=7, init="k-means||", metric="cosine", n_init=2),
    ],
    ids=[
        "k-means++",
        "k-means||-l1",
        "random-n_init3",
        "random-labels",
        "cosine",
        "cosine-k-means||",
    ],
)
def test_kmeans_equals_single_process_for_every_partitioning(client, params):
    X = data()
    ref = kmeans_knn.KMeans(random_state=7, device="cpu", **params).fit(X)
    for rows in partitionings(len(X)):
        km = kd.KMeans(random_state=7, **params).fit(da.from_array(X, chunks=(rows, 2)))
        assert_same_fit(km, ref, rows)


def test_empty_clusters_move_to_the_farthest_rows(client):
    # Two duplicated values and a centroid far away: it loses every row and takes the farthest
    # one, ties to the lowest row of the whole data set, whichever partition holds it.
    X = np.repeat(np.array([[0.0], [1.0]], dtype=np.float32), 150, axis=0)
    init = np.array([[0.0], [0.5], [100.0]], dtype=np.float32)
    ref = kmeans_knn.KMeans(3, init=init, device="cpu").fit(X)
    for rows in partitionings(len(X)):
        km = kd.KMeans(3, init=init).fit(da.from_array(X, chunks=(rows, 1)))
        assert_same_fit(km, ref, rows)


def test_dataframe_input_and_predict_transform_score(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X = data(n=300, d=3, seed=1)
    frame = dd.from_pandas(pd.DataFrame(X, columns=list("abc")), npartitions=4)
    km = kd.KMeans(4, random_state=1).fit(frame)
    ref = kmeans_knn.KMeans(4, random_state=1, device="cpu").fit(X)
    assert np.array_equal(km.cluster_centers_, ref.cluster_centers_)
    dX = da.from_array(X, chunks=70)
    assert np.array_equal(km.predict(dX).compute(), ref.predict(X))
    assert np.array_equal(km.predict(X), ref.predict(X))
    assert np.array_equal(km.transform(dX).compute(), ref.transform(X))
    assert km.score(dX) == pytest.approx(ref.score(X), rel=1e-12)
    assert np.array_equal(km.fit_predict(dX).compute(), ref.labels_)
    cosine = kd.KMeans(4, metric="cosine", random_state=1).fit(dX)
    ref = kmeans_knn.KMeans(4, metric="cosine", random_state=1, device="cpu").fit(X)
    assert np.array_equal(cosine.cluster_centers_, ref.cluster_centers_)
    assert cosine.score(dX) == pytest.approx(ref.score(X), rel=1e-12)


def resident_objects(client):
    """Engine objects resident on the workers, in all (after collecting the estimators of
    earlier tests, whose finalizers free theirs)."""
    gc.collect()

    def count():
        from kmeans_knn.dask import _resident

        return sum(len(parts) for parts in _resident._REGISTRY.values())

    return sum(client.run(count).values())


def test_kmeans_errors_and_release(client):
    X = da.from_array(data(n=20), chunks=7)
    before = resident_objects(client)
    with pytest.raises(ValueError, match="should be >= n_clusters"):
        kd.KMeans(21).fit(X)
    bad = data(n=20)
    bad[13, 2] = np.nan
    with pytest.raises(ValueError, match="row 13, column 2"):
        kd.KMeans(2).fit(da.from_array(bad, chunks=7))
    km = kd.KMeans(2, random_state=0).fit(X)
    # Neither the failed fit's partitions nor the fitted one's stay behind.
    assert resident_objects(client) == before
    with pytest.raises(ValueError, match="expecting 5 features"):
        km.predict(da.from_array(np.zeros((3, 4), np.float32)))
    # Sample weights are not taken across workers (yet): refused before any fit. A row of norm
    # 0 under cosine is named by its row in the whole data set.
    with pytest.raises(NotImplementedError, match="sample_weight"):
        kd.KMeans(2).fit(X, sample_weight=np.ones(20))
    zero = data(n=20)
    zero[11] = 0.0
    with pytest.raises(ValueError, match="row 11"):
        kd.KMeans(2, metric="cosine").fit(da.from_array(zero, chunks=7))
    assert resident_objects(client) == before


def partial_reply(sums, weights, changed, inertia):
    """A step's partial reply as the engine encodes it (`Reply::to_bytes`: tag 4, then each
    vector as a u64 length and its little-endian values, then the two numbers)."""
    sums, weights = np.asarray(sums, "<i8"), np.asarray(weights, "<u8")
    vector = lambda v: np.uint64(len(v)).astype("<u8").tobytes() + v.tobytes()  # noqa: E731
    numbers = np.array([changed], "<u8").tobytes() + np.array([inertia], "<i8").tobytes()
    return b"\x04" + vector(sums) + vector(weights) + numbers


def test_add_partials_adds_a_workers_step_replies_exactly():
    from kmeans_knn import _engine

    a = partial_reply([2**62, -5, 7, 0], [3, 1], 4, -9)
    b = partial_reply([1, 5, -(2**40), 11], [0, 2], 1, 2**62)
    c = partial_reply([-1, 0, 0, 1], [1, 1], 0, 2**62 + 100)
    # Integers, added exactly; the inertia wraps as the kernels' adds do.
    assert _engine.add_partials([a, b, c]) == partial_reply(
        [2**62, 0, 7 - 2**40, 12], [4, 4], 5, 91 - 2**63
    )
    assert _engine.add_partials([a]) == a
    with pytest.raises(RuntimeError, match="no step's partial reply"):
        _engine.add_partials([])
    with pytest.raises(RuntimeError, match="reply 1 is not"):
        _engine.add_partials([a, partial_reply([1, 2], [1], 0, 0)])
    with pytest.raises(RuntimeError, match="malformed"):
        _engine.add_partials([a[:-1]])
    # As a worker's replies arrive on the client: added one by one into the same sum.
    total = _engine.PartialSum()
    for reply in (c, a, b):
        total.add(reply)
    with pytest.raises(RuntimeError, match="not a step's partial reply"):
        total.add(b"\x00")


def test_a_step_moves_the_centroids_once_out_and_the_sums_once_back_per_worker(client):
    # Six partitions on the cluster's workers (three CPU workers, or one a GPU): each worker
    # gets the k × d float32 centroids once and sends back its partitions' sums added up,
    # k × d int64 and k uint64 units, once.
    most = min(6, len(client.scheduler_info()["workers"]))
    X = data(n=600, d=5)
    k, d = 6, X.shape[1]
    km = kd.KMeans(k, random_state=3).fit(da.from_array(X, chunks=(100, d)))
    request, reply = 1 + 8 + 4 * k * d, 1 + 8 + 8 * k * d + 8 + 8 * k + 16
    steps = [r for r in km._timings if r.label == "Step"]
    assert steps
    for r in steps:
        workers, rest = divmod(r.received, reply)
        assert rest == 0 and 1 <= workers <= most, r
        assert r.sent == workers * request, r
        assert 0 < r.busiest <= r.end - r.start, r


def shared_folders():
    return {n for n in os.listdir("/dev/shm") if n.startswith("kmeans-knn-")}


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_large_messages_go_through_shared_memory_on_the_clients_host(client, monkeypatch):
    # k × d = 128 × 128: a step's centroids (64 KiB) and sums (128 KiB) are large enough to go
    # through files in /dev/shm to and from workers on this host; the fit is the same either way,
    # and the folder goes with the fit.
    from kmeans_knn.dask import _resident

    X, k = data(n=400, d=128, seed=4), 128
    params = dict(random_state=1, max_iter=3, n_init=1)
    ref = kmeans_knn.KMeans(k, device="cpu", **params).fit(X)
    before = shared_folders()
    written, read = [], []
    put, read_shared = _resident._SharedFolder.put, _resident._read_shared
    monkeypatch.setattr(
        _resident._SharedFolder, "put", lambda self, b: written.append(len(b)) or put(self, b)
    )
    monkeypatch.setattr(_resident, "_read_shared", lambda s: read.append(s.size) or read_shared(s))
    km = kd.KMeans(k, **params).fit(da.from_array(X, chunks=(150, 128)))
    assert_same_fit(km, ref, (150, 150, 100))
    steps = [r for r in km._timings if r.label == "Step"]
    assert steps
    # The centroids once a step, whatever the workers; a reply of sums from every worker.
    assert written.count(9 + 4 * k * 128) == len(steps)
    assert read.count(33 + 8 * k * 128 + 8 * k) >= len(steps)
    assert shared_folders() <= before
    monkeypatch.setenv("KMEANS_KNN_DASK_SHARED_MEMORY", "0")
    written.clear()
    read.clear()
    km = kd.KMeans(k, **params).fit(da.from_array(X, chunks=(150, 128)))
    assert_same_fit(km, ref, (150, 150, 100))
    assert written == [] and read == []


def test_bytes_that_cannot_be_left_in_shared_memory_go_in_the_message(tmp_path):
    from kmeans_knn.dask import _resident

    data = b"x" * 100
    assert _resident._write_shared(str(tmp_path / "missing" / "file"), data) is data
    shared = _resident._write_shared(str(tmp_path / "file"), data)
    assert shared == _resident._Shared(str(tmp_path / "file"), 100)
    assert _resident._read_shared(shared) == data


def test_shared_files_are_overwritten_in_place(tmp_path):
    # A step writes its centroids and sums to the same files every time: the file keeps its
    # pages (the same inode), and shorter bytes leave no tail of the longer ones behind.
    from kmeans_knn.dask import _resident

    path = str(tmp_path / "reply")
    long, short = bytes(range(200)) * 2, memoryview(b"y" * 150)
    assert _resident._write_shared(path, long) == _resident._Shared(path, 400)
    inode = os.stat(path).st_ino
    assert _resident._write_shared(path, short) == _resident._Shared(path, 150)
    assert os.stat(path).st_ino == inode
    assert _resident._read_shared(_resident._Shared(path, 150)) == b"y" * 150
    with pytest.raises(RuntimeError, match="holds 150 bytes, not 400"):
        _resident._read_shared(_resident._Shared(path, 400))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_fits_rounds_go_over_lines_to_workers_on_the_clients_host(client, monkeypatch):
    # Not one round of the fit goes through Dask's comm while every worker shares this host
    # (the lines carry them); with shared memory off, every round does. The same fit either way.
    from kmeans_knn.dask import _resident

    X = data(n=500, d=4, seed=6)
    ref = kmeans_knn.KMeans(5, random_state=2, device="cpu").fit(X)
    direct = []
    through_dask = _resident._direct_each
    monkeypatch.setattr(
        _resident, "_direct_each", lambda *a: direct.append(a[1]) or through_dask(*a)
    )
    km = kd.KMeans(5, random_state=2).fit(da.from_array(X, chunks=(120, 4)))
    assert_same_fit(km, ref, (120, 120, 120, 120, 20))
    assert direct == []
    monkeypatch.setenv("KMEANS_KNN_DASK_SHARED_MEMORY", "0")
    km = kd.KMeans(5, random_state=2).fit(da.from_array(X, chunks=(120, 4)))
    assert_same_fit(km, ref, (120, 120, 120, 120, 20))
    assert len(direct) == len(km._timings)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_workers_error_over_a_line_is_raised_and_the_lines_stay_in_step(client):
    from kmeans_knn.dask import _resident
    from kmeans_knn.dask.cluster import _new_shard

    X = da.from_array(data(n=90), chunks=30)
    make = functools.partial(_new_shard, device="cpu")
    columns = (b"\x00\x00",)  # Request::Columns { unit_rows: false }
    blocks = client.compute(list(X.to_delayed().ravel()))
    with _resident.Resident(client, blocks, [30] * 3, make) as r:
        assert r.lines.reach(set(r.workers))
        with pytest.raises(RuntimeError, match="malformed shard message"):
            r.map("handle", [(b"\xff",), columns, columns])
        over_lines = r.map("handle", [columns] * 3)
        r.lines.close()
        assert not r.lines.reach(set(r.workers))
        assert r.map("handle", [columns] * 3) == over_lines
        assert len({reply[:1] for reply in over_lines}) == 1


def test_lines_answer_raise_and_break_clearly(tmp_path):
    import socket
    import time

    from kmeans_knn.dask import _lines

    def answer(x):
        if x < 0:
            raise ValueError(f"{x} is negative")
        return 2 * x

    lines = _lines.Lines({"a": _lines.open_line(str(tmp_path), answer, lambda: True)})
    assert lines.round({"a": (3,)}, lambda r: r + 1) == {"a": 7}
    with pytest.raises(ValueError, match="-1 is negative"):
        lines.round({"a": (-1,)}, lambda r: r)
    assert lines.round({"a": (5,)}, lambda r: r) == {"a": 10}
    # A worker that goes away mid-round: a clear error, and no round goes over lines again.
    path = str(tmp_path / "gone")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    lines = _lines.Lines({"tcp://gone:1": path})
    server.accept()[0].close()
    server.close()
    with pytest.raises(RuntimeError, match="line to the worker at tcp://gone:1 broke"):
        lines.round({"tcp://gone:1": (1,)}, lambda r: r)
    assert not lines.reach({"tcp://gone:1"})
    # A line no client connects to closes once it is no longer wanted.
    unwanted = _lines.open_line(str(tmp_path), answer, lambda: False)
    deadline = time.monotonic() + 10
    while _lines.Lines({"b": unwanted}).reach({"b"}):
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "manhattan"])
def test_kneighbors_equals_single_process_for_every_partitioning(client, metric):
    # Integer values: many distance ties, which go to the lowest training index.
    X = np.random.default_rng(2).integers(0, 4, size=(300, 3)).astype(np.float32)
    queries = np.random.default_rng(3).integers(0, 4, size=(40, 3)).astype(np.float32)
    ref = kmeans_knn.NearestNeighbors(n_neighbors=7, metric=metric, device="cpu").fit(X)
    want = ref.kneighbors(queries)
    want_self = ref.kneighbors()
    for rows in partitionings(len(X)):
        nn = kd.NearestNeighbors(n_neighbors=7, metric=metric)
        nn.fit(da.from_array(X, chunks=(rows, 3)))
        for got in (nn.kneighbors(queries), nn.kneighbors(da.from_array(queries, chunks=13))):
            distances, indices = (np.asarray(a) for a in got)
            assert np.array_equal(distances, want[0]) and np.array_equal(indices, want[1])
        distances, indices = (a.compute() for a in nn.kneighbors())
        assert np.array_equal(distances, want_self[0]) and np.array_equal(indices, want_self[1])


def test_kneighbors_errors_and_pickling(client):
    X = da.from_array(data(n=30), chunks=9)
    nn = kd.NearestNeighbors(n_neighbors=3).fit(X)
    with pytest.raises(ValueError, match="n_neighbors <= n_samples_fit"):
        nn.kneighbors(np.zeros((2, 5), np.float32), n_neighbors=31)
    with pytest.raises(ValueError, match="n_neighbors < n_samples_fit"):
        nn.kneighbors(n_neighbors=30)
    copy = pickle.loads(pickle.dumps(nn))
    queries = data(n=4, seed=5)
    for a, b in zip(copy.kneighbors(queries), nn.kneighbors(queries)):
        assert np.array_equal(a, b)


def test_local_gpu_cluster_pins_one_gpu_per_worker(monkeypatch):
    if not GPUS:
        monkeypatch.setattr(kd.gpu._engine, "gpu_count", lambda: 0)
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            kd.local_gpu_cluster()
    devices = kd.visible_gpus() if GPUS else ["3", "5"]
    # Made-up devices may not exist here: Dask's GPU monitoring (NVML, where installed) would
    # look them up as the workers start, and fail. The nannies hand the workers this config.
    monitoring = (
        contextlib.nullcontext()
        if GPUS
        else dask.config.set({"distributed.diagnostics.nvml": False})
    )
    with monitoring, kd.local_gpu_cluster(devices) as cluster, distributed.Client(cluster) as c:
        seen = c.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"])
        assert sorted(seen.values()) == sorted(devices)
