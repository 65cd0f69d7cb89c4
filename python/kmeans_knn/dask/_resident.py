"""Engine objects that Dask workers keep resident between tasks.

A fit or an index puts one engine object per partition on the worker that holds the partition
(its rows uploaded once to that worker's GPU, or kept for its CPU), in a per-process registry
keyed by a token; later calls go to that worker and find the object there. The client side,
`Resident`, remembers where each object lives. Calls that make results to keep on the workers
are tasks (`submit`); the calls of a fit's steps, whose small results come straight back, go
out of band (`Client.run`: one message to each worker, a few milliseconds, where a round of
tasks costs several times that), and run in the worker's thread pool.
"""

import asyncio
import threading
import time
import uuid
from typing import NamedTuple

import numpy as np
from distributed import get_worker

# token -> {partition: engine object}, in each worker process.
_REGISTRY = {}
_LOCK = threading.Lock()


def _put(token, part, obj):
    with _LOCK:
        _REGISTRY.setdefault(token, {})[part] = obj


def _get(token, part):
    with _LOCK:
        try:
            return _REGISTRY[token][part]
        except KeyError:
            raise RuntimeError(
                f"partition {part} is no longer resident on its worker (was it restarted?)"
            ) from None


def _drop(token):
    with _LOCK:
        _REGISTRY.pop(token, None)


def _make(token, part, block, make):
    """On the worker that holds `block`: makes the engine object; returns where it lives."""
    block = np.ascontiguousarray(block, dtype=np.float32)
    _put(token, part, make(block))
    return get_worker().address


def _call(token, part, method, *args):
    return getattr(_get(token, part), method)(*args)


async def _call_many(token, method, parts, calls, dask_worker):
    """`_call` for this worker's partitions (`parts[address]`), in its thread pool; with the
    seconds the calls took."""
    mine = parts[dask_worker.address]

    def work():
        start = time.perf_counter()
        results = {part: _call(token, part, method, *calls[part]) for part in mine}
        return results, time.perf_counter() - start

    return await asyncio.get_running_loop().run_in_executor(dask_worker.executor, work)


class Round(NamedTuple):
    """One `Resident.map`: its label, when it started and ended on the client
    (`time.perf_counter()`), and the seconds the busiest worker spent in its calls."""

    label: str
    start: float
    end: float
    busiest: float


class Resident:
    """Engine objects, one per partition of a row-chunked Dask array, resident on its workers.

    `make(block, first_row)` builds the object on the worker (a picklable callable). Use as a
    context manager, or call `release()`, to free them. `timings` holds a `Round` for every
    `map`.
    """

    def __init__(self, client, blocks, rows, make):
        self.client = client
        self.token = f"kmeans-knn-{uuid.uuid4().hex}"
        self.timings = []
        self.rows = list(rows)
        self.starts = np.concatenate([[0], np.cumsum(self.rows)]).astype(np.int64)
        made = [
            client.submit(
                _make, self.token, i, block, _Bound(make, int(self.starts[i])), pure=False
            )
            for i, block in enumerate(blocks)
        ]
        try:
            self.workers = client.gather(made)
        except BaseException:
            client.run(_drop, self.token)
            raise

    def submit(self, part, method, *args):
        """A future of `obj.method(*args)` on partition `part`'s object, run where it lives."""
        return self.client.submit(
            _call,
            self.token,
            part,
            method,
            *args,
            workers=[self.workers[part]],
            allow_other_workers=False,
            pure=False,
        )

    def map(self, method, args_per_part, label=None):
        """`obj.method(*args)` on every partition (`args_per_part[i]` for partition i), one
        out-of-band call per worker; the results in partition order. The round's timing is
        recorded under `label`."""
        parts = {}
        for part, worker in enumerate(self.workers):
            parts.setdefault(worker, []).append(part)
        calls = dict(enumerate(args_per_part))
        start = time.perf_counter()
        replies = self.client.run(_call_many, self.token, method, parts, calls, workers=list(parts))
        results, busiest = {}, 0.0
        for reply, seconds in replies.values():
            results.update(reply)
            busiest = max(busiest, seconds)
        self.timings.append(Round(label, start, time.perf_counter(), busiest))
        return [results[part] for part in range(len(self.workers))]

    def release(self):
        """Frees the objects on every worker that holds one (nothing to do once the client has
        closed: the workers are its cluster's, or no longer reachable)."""
        workers = sorted(set(self.workers))
        if workers and self.client.status == "running":
            self.client.run(_drop, self.token, workers=workers)
        self.workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class _Bound:
    """`make(block, first_row)` with the partition's first row filled in (picklable)."""

    def __init__(self, make, first_row):
        self.make, self.first_row = make, first_row

    def __call__(self, block):
        return self.make(block, self.first_row)
