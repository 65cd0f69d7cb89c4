"""Input conversion shared by the estimators.

scikit-learn's own checks handle the shape, sparse, complex and feature-count cases (with its
messages, which its estimator checks expect); the values are converted to C-contiguous float32,
which the engine borrows without a copy (an array already in that form is passed through as is).
Finiteness is left to the engine, which names the first bad value's row and column.
"""

import numbers

import numpy as np
from sklearn.utils import check_array, check_random_state
from sklearn.utils.validation import validate_data

ENGINE_ARRAY = dict(
    dtype=np.float32,
    order="C",
    accept_sparse=False,
    ensure_all_finite=False,
    ensure_min_samples=0,
)


def engine_data(estimator, X, *, reset):
    """X for the engine, recording (reset=True) or checking n_features_in_ on `estimator`."""
    return validate_data(estimator, X, reset=reset, **ENGINE_ARRAY)


def engine_array(X):
    """X for the engine, for functions that have no estimator."""
    return check_array(X, **ENGINE_ARRAY)


def engine_seed(random_state):
    """The engine's u64 seed for a scikit-learn `random_state`.

    An int is the seed itself, so ``random_state=7`` gives the same model as the command line's
    ``--seed 7``. None (NumPy's global generator) or a RandomState instance gives a 63-bit draw
    from that generator, so a seeded NumPy generator still makes the fit reproducible.
    """
    if isinstance(random_state, numbers.Integral):
        if not 0 <= random_state < 2**64:
            raise ValueError(f"random_state must be in [0, 2**64), got {random_state}")
        return int(random_state)
    return int(check_random_state(random_state).randint(np.iinfo(np.int64).max, dtype=np.int64))


class ResidentModel:
    """Keeps the engine object (training rows resident on their device) out of pickles and
    copies: it is rebuilt from the fitted arrays by `_build_engine_model` on first use."""

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_engine_model", None)
        return state

    def _model(self):
        model = self.__dict__.get("_engine_model")
        if model is None:
            model = self._engine_model = self._build_engine_model()
        return model
