"""Mini-batch k-means with scikit-learn's MiniBatchKMeans interface."""

import warnings

import numpy as np

from . import _engine
from ._validation import engine_data, engine_seed
from ._kneighbors import output_dtype
from .cluster import KMeans, _engine_weights, _explicit_centroids


class MiniBatchKMeans(KMeans):
    """Mini-batch k-means (Sculley 2010, as scikit-learn) on the GPU or the CPU, bit-identical on
    both for a given random_state. predict, transform and score are KMeans's.

    Each step draws batch_size rows at random (with replacement), assigns them to their nearest
    centroid, and moves every centroid that received rows to the mean of all the rows it has
    received so far. Labels and inertia are those of every row under the final centroids.

    Parameters
    ----------
    n_clusters : int, default 8
    init : "k-means++", "k-means||", "random" (n_clusters distinct random rows) or an array of
        shape (n_clusters, n_features); computed on init_size random rows.
    max_iter : int, default 100 — most passes over the data (epochs).
    batch_size : int, default 1024
    random_state : int, RandomState or None — an int is the engine's seed as is (the command
        line's ``--seed``); None or a RandomState draws the seed from that generator.
    tol : float, default 0.0 — stop when a step's squared centroid shift is at most tol times the
        mean per-feature variance (0: off).
    max_no_improvement : int or None, default 10 — stop after that many steps without improvement
        of the smoothed batch inertia (None: off).
    init_size : int or None — rows drawn for the initialisation (None: 3 * batch_size, at least
        3 * n_clusters).
    n_init : int or "auto", default "auto" — initialisations tried, the one with the lowest
        inertia on other random rows wins; "auto" is 3 for init="random", else 1.
    reassignment_ratio : float in [0, 1], default 0.01 — every 10 * n_clusters rows, centroids
        with fewer rows than this fraction of the largest count move to random rows of the batch.
    metric : "euclidean" (squared-L2 assignment, as scikit-learn) or "manhattan" (L1 assignment,
        mean centroids; inertia is then the sum of L1 distances).
    device : "auto", "cpu", "cuda" or "cuda:N".
    compute_labels : bool, default True — after fit (and each partial_fit), assign every row to
        the final centroids for labels_ and inertia_. False: no labels_; fit's inertia_ is then
        the smoothed batch inertia (per row) times the total weight, and partial_fit sets
        neither (as scikit-learn).
    verbose : int, default 0 — when > 0, fit prints scikit-learn's lines once it is done:
        "Minibatch step i/n: mean batch inertia: x[, ewa inertia: y]" for every step, and
        "Converged (small centers change) at step i/n" or "Converged (lack of improvement in
        inertia) at step i/n" when it stops early.

    ``fit`` (and ``fit_predict``, ``fit_transform``, ``score``) take ``sample_weight`` with
    scikit-learn's meaning: each batch draws rows with probability proportional to their weight
    and steps over them unweighted, the initialisation seeds on its rows by their weight, and
    inertia_ is the weighted sum. Weights all 1 give the unweighted model, and scaling all
    weights by a power of two changes nothing (bit for bit). ``partial_fit`` takes
    ``sample_weight`` of ones only (its weighted step is not in the engine).

    Attributes are scikit-learn's: cluster_centers_ (in X's float dtype, float32 arithmetic),
    labels_, inertia_, n_iter_ (epochs, rounded up), n_steps_, plus device_.
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means++",
        max_iter=100,
        batch_size=1024,
        random_state=None,
        tol=0.0,
        max_no_improvement=10,
        init_size=None,
        n_init="auto",
        reassignment_ratio=0.01,
        metric="euclidean",
        device="auto",
        compute_labels=True,
        verbose=0,
    ):
        self.compute_labels = compute_labels
        self.verbose = verbose
        self.n_clusters = n_clusters
        self.init = init
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.random_state = random_state
        self.tol = tol
        self.max_no_improvement = max_no_improvement
        self.init_size = init_size
        self.n_init = n_init
        self.reassignment_ratio = reassignment_ratio
        self.metric = metric
        self.device = device

    def fit(self, X, y=None, sample_weight=None):
        """Clusters X (rows drawn in proportion to sample_weight when given); returns self."""
        dtype = output_dtype(X)
        X = engine_data(self, X, reset=True)
        self._check_rows(X)
        weights = _engine_weights(sample_weight, X)
        self._seed = engine_seed(self.random_state)
        settings = self._settings(X.shape[1], X.shape[0], X)
        settings["history"] = bool(self.verbose)
        fitted = _engine.minibatch_fit(X, settings, weights)
        self._keep(fitted, dtype)
        self.n_iter_ = fitted[3]
        if self.verbose:
            _print_steps(fitted[5])
        return self

    def partial_fit(self, X, y=None, sample_weight=None):
        """One step on X (every row of it is the batch), continuing the fitted state; the first
        call initialises the centroids from X (at least n_clusters rows). sample_weight may only
        be ones. Returns self."""
        fitted = hasattr(self, "cluster_centers_")
        dtype = self.cluster_centers_.dtype if fitted else output_dtype(X)
        X = engine_data(self, X, reset=not fitted)
        weights = _engine_weights(sample_weight, X)
        if weights is not None and np.any(weights != 1):
            raise ValueError(
                "MiniBatchKMeans.partial_fit takes sample_weight of ones only (the engine's "
                "weighted step is not built); fit takes any sample_weight"
            )
        if fitted:
            state = (self._centers(), self._counts, self.n_steps_, self._since_reassign)
        else:
            self._check_rows(X)
            self._seed = engine_seed(self.random_state)
            state = None
        settings = self._settings(X.shape[1], X.shape[0], X)
        self._keep(_engine.minibatch_partial_fit(X, state, settings), dtype, partial=True)
        return self

    def _check_rows(self, X):
        if X.shape[0] < self.n_clusters:
            raise ValueError(f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}.")

    def _settings(self, n_features, n_samples=None, X=None):
        init, init_centroids, n_init = self._init_and_runs(n_features, X)
        init_size = self.init_size
        if init_size is not None and init_size < self.n_clusters:
            warnings.warn(
                f"init_size={init_size} should be larger than n_clusters={self.n_clusters}. "
                "Setting it to min(3*n_clusters, n_samples)",
                RuntimeWarning,
                stacklevel=3,
            )
            init_size = 3 * self.n_clusters
            if n_samples is not None:
                init_size = min(init_size, n_samples)
        return dict(
            k=self.n_clusters,
            init=init,
            init_centroids=init_centroids,
            n_init=n_init,
            max_iter=self.max_iter,
            batch_size=self.batch_size,
            tol=self.tol,
            max_no_improvement=self.max_no_improvement,
            init_size=init_size,
            reassignment_ratio=self.reassignment_ratio,
            seed=self._seed,
            metric=self.metric,
            device=self.device,
            compute_labels=self.compute_labels,
            history=False,
        )

    def _init_and_runs(self, n_features, X=None):
        """The engine's init name, the initial centroids (or None) and the number of runs (None:
        the engine's "auto"); a callable init is called as init(X, n_clusters, random_state)."""
        if isinstance(self.init, str):
            return self.init, None, None if self.n_init == "auto" else self.n_init
        return "centroids", _explicit_centroids(self, X, n_features, stacklevel=5), None

    def _keep(self, fitted, dtype, partial=False):
        """Stores what the engine returned: the state (centroids in `dtype`), then labels and
        inertia (with compute_labels; fit's inertia without), and device."""
        (centers, counts, n_steps, since_reassign), labels, inertia, _, device, _ = fitted
        self.cluster_centers_ = centers.astype(dtype, copy=False)
        self._counts = counts
        self.n_steps_ = n_steps
        self._since_reassign = since_reassign
        if self.compute_labels:
            # Labels are below k ≤ 2^31, so the engine's u32 reads as int32 without a copy.
            self.labels_ = labels.view(np.int32)
        if self.compute_labels or not partial:
            self.inertia_ = inertia
        self.device_ = device
        self._n_features_out = centers.shape[0]


def _print_steps(steps):
    """Prints a fit's steps as scikit-learn's verbose MiniBatchKMeans does."""
    for step, n_steps, inertia, smoothed, stop in steps:
        line = f"Minibatch step {step}/{n_steps}: mean batch inertia: {inertia}"
        print(line if smoothed is None else f"{line}, ewa inertia: {smoothed}")
        if stop == "tolerance":
            print(f"Converged (small centers change) at step {step}/{n_steps}")
        elif stop == "no_improvement":
            print(f"Converged (lack of improvement in inertia) at step {step}/{n_steps}")
