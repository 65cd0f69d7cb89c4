"""Starting the engine: `warmup` ahead of the first call, and what it says it started."""

import os

import numpy as np
import pytest

import kmeans_knn


def test_warmup_on_the_cpu_names_the_cpu():
    assert kmeans_knn.warmup("cpu").startswith("cpu")


def test_warmup_rejects_an_unknown_device():
    with pytest.raises(ValueError, match="tpu"):
        kmeans_knn.warmup("tpu")


def test_warmup_auto_then_a_fit_on_the_device_it_started():
    started = kmeans_knn.warmup()
    X = np.random.default_rng(0).random((500, 4), dtype=np.float32)
    km = kmeans_knn.KMeans(n_clusters=3, random_state=0).fit(X)
    assert started.split(" ")[0] in ("cpu", "cuda:0")
    if started.startswith("cuda"):
        # Once the GPU is up, auto keeps it even for a small fit; the driver says what it started.
        assert km.device_ == started
        assert "the driver started" in started
    elif os.environ.get("KMEANS_KNN_REQUIRE_GPU") == "1":
        pytest.fail(f"a GPU is required, warmup started {started}")
