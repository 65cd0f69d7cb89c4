"""Dask inputs as the engine takes them: float32 rows, partitioned by rows only."""

import numbers

import dask.array as da
import numpy as np


def row_blocks(X):
    """X — a Dask array, a Dask DataFrame of numeric columns, or an array-like — as a 2-D
    float32 Dask array with one column chunk and known row chunks, and its non-empty row
    partitions: (array, list of block Delayeds, list of row counts)."""
    if hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    elif not isinstance(X, da.Array):
        X = da.from_array(np.asarray(X), chunks=-1)
    if X.ndim != 2:
        raise ValueError(f"Expected a 2-D array, got {X.ndim} dimension(s)")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_):
        raise TypeError(f"numeric data is needed, got dtype {X.dtype}")
    if any(isinstance(c, numbers.Number) and np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    X = X.astype(np.float32)
    blocks = X.to_delayed(optimize_graph=False).ravel().tolist()
    parts = [(b, r) for b, r in zip(blocks, X.chunks[0]) if r > 0]
    if not parts or X.shape[1] == 0:
        raise ValueError(
            f"Found array with shape {X.shape}; at least one row and one column are needed"
        )
    return X, [b for b, _ in parts], [int(r) for _, r in parts]


def engine_rows(block):
    """`block` as the engine reads rows: float32, C-contiguous and aligned (a block that came
    over the wire may sit at any byte offset of its message)."""
    return np.require(block, dtype=np.float32, requirements=["C", "A"])
