"""The Python estimators give the command-line tool's results bit for bit."""

import json
import subprocess

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from kmeans_knn import KMeans, KNeighborsClassifier, NearestNeighbors


@pytest.mark.parametrize(
    "init, metric, n_init, seed",
    [("k-means++", "l2", 1, 0), ("random", "l1", 3, 11), ("k-means++", "l2", 2, 2**40 + 7)],
)
def test_kmeans_equals_the_command_line(tmp_path, cli, init, metric, n_init, seed):
    X = make_blobs(3000, n_features=7, centers=9, random_state=5)[0].astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    run = subprocess.run(
        [cli, "kmeans", tmp_path / "x.npy", "--k", "9", "--init", init.replace("-", ""),
         "--metric", metric, "--n-init", str(n_init), "--seed", str(seed), "--json",
         "--labels-out", tmp_path / "labels.npy", "--centroids-out", tmp_path / "centroids.npy"],
        check=True, capture_output=True, text=True,
    )
    summary = json.loads(run.stdout)
    km = KMeans(9, init=init, metric=metric, n_init=n_init, random_state=seed).fit(X)
    assert np.array_equal(np.load(tmp_path / "labels.npy"), km.labels_)
    centroids = np.load(tmp_path / "centroids.npy")
    assert centroids.dtype == np.float32
    assert np.array_equal(centroids.view(np.uint32), km.cluster_centers_.view(np.uint32))
    assert summary["inertia"] == km.inertia_
    # The CLI counts updates; scikit-learn also counts the assignment that confirms the labels.
    assert km.n_iter_ == summary["iterations"] + (summary["stop"] == "unchanged")


def test_kneighbors_equals_the_command_line(tmp_path, cli):
    rng = np.random.default_rng(3)
    train = rng.integers(0, 5, size=(500, 6)).astype(np.float32)  # many exact ties
    queries = rng.normal(2, 1, size=(60, 6)).astype(np.float32)
    np.save(tmp_path / "train.npy", train)
    np.save(tmp_path / "query.npy", queries)
    subprocess.run(
        [cli, "knn", "--train", tmp_path / "train.npy", "--query", tmp_path / "query.npy",
         "--k", "12", "--metric", "manhattan", "--indices-out", tmp_path / "i.npy",
         "--distances-out", tmp_path / "d.npy"],
        check=True, capture_output=True,
    )
    distances, indices = NearestNeighbors(n_neighbors=12, metric="manhattan").fit(train).kneighbors(
        queries
    )
    assert np.array_equal(np.load(tmp_path / "i.npy"), indices)
    assert np.array_equal(np.load(tmp_path / "d.npy").view(np.uint32), distances.view(np.uint32))


@pytest.mark.parametrize("tie_break", ["nearest", "smallest-label"])
def test_classify_tie_rules_equal_the_command_line(tmp_path, cli, tie_break):
    rng = np.random.default_rng(4)
    features = rng.integers(0, 4, size=(400, 3)).astype(np.float32)  # tied votes at k = 4
    labels = rng.integers(0, 4, size=400)
    queries = rng.integers(0, 4, size=(80, 3)).astype(np.float32) + 0.5
    np.save(tmp_path / "train.npy", np.column_stack([features, labels]).astype(np.float32))
    np.save(tmp_path / "query.npy", queries)
    subprocess.run(
        [cli, "classify", "--train", tmp_path / "train.npy", "--query", tmp_path / "query.npy",
         "--k", "4", "--tie-break", tie_break, "--out", tmp_path / "pred.npy"],
        check=True, capture_output=True,
    )
    rule = tie_break.replace("-", "_")
    clf = KNeighborsClassifier(4, tie_break=rule).fit(features, labels)
    assert np.array_equal(np.load(tmp_path / "pred.npy").astype(np.int64), clf.predict(queries))
    other = KNeighborsClassifier(4, tie_break="nearest" if rule != "nearest" else "smallest_label")
    assert not np.array_equal(other.fit(features, labels).predict(queries), clf.predict(queries))
