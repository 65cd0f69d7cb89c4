import os
import shutil

import pytest

# scikit-learn's array API check runs (with NumPy inputs) only with SciPy's array API support on;
# it must be set before SciPy is first imported.
os.environ.setdefault("SCIPY_ARRAY_API", "1")


@pytest.fixture(scope="session")
def cli():
    """The kmeans-knn command-line tool built by cargo (`cargo xtask test` and the GPU bundle's
    run.sh set KMEANS_KNN_CLI)."""
    path = os.environ.get("KMEANS_KNN_CLI")
    if not path:
        pytest.skip("KMEANS_KNN_CLI is not set: no command-line tool to compare with")
    if shutil.which(path) is None:
        pytest.fail(f"KMEANS_KNN_CLI={path} is not an executable")
    return path
