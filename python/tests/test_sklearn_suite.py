"""scikit-learn's own tests of KMeans, MiniBatchKMeans and the k-neighbour estimators
(``sklearn/cluster/tests/test_k_means.py`` and ``sklearn/neighbors/tests/test_neighbors.py``,
shipped in its wheel) run against kmeans_knn's classes with the imports swapped
(``sklearn_suite/swap_plugin.py``). The tests listed in ``sklearn_out_of_scope.py`` are skipped
or expected to fail, each with its reason; any other failure fails this test.

Set KMEANS_KNN_SKLEARN_SUITE=0 to leave it out (it takes a few minutes).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MODULES = ["sklearn.cluster.tests.test_k_means", "sklearn.neighbors.tests.test_neighbors"]


@pytest.mark.skipif(
    os.environ.get("KMEANS_KNN_SKLEARN_SUITE") == "0", reason="KMEANS_KNN_SKLEARN_SUITE=0"
)
@pytest.mark.parametrize("module", MODULES)
def test_scikit_learn_suite_with_the_import_swapped(module, tmp_path):
    env = dict(os.environ)
    paths = [str(HERE), str(HERE / "sklearn_suite"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "swap_plugin", "-p", "no:cacheprovider",
         "-q", "-rf", "--pyargs", module],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-60:])
    assert run.returncode == 0, f"scikit-learn's {module} failed outside the listed tests:\n{tail}"
