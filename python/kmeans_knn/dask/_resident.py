"""Engine objects that Dask workers keep resident between tasks.

A fit or an index puts one engine object per partition on the worker that holds the partition
(its rows uploaded once to that worker's GPU, or kept for its CPU), in a per-process registry
keyed by a token; later calls go to that worker and find the object there. The client side,
`Resident`, remembers where each object lives. Calls that make results to keep on the workers
are tasks (`submit`); the calls of a fit's steps, whose small results come straight back, go
out of band: one message from the client straight to each worker over a pooled connection (the
worker's `run` handler, as `Client.run` uses, but not relayed by the scheduler, which would
carry every byte twice and open a fresh connection to each worker every time), run in the
worker's thread pool. A worker can add up its partitions' results before it replies (`combine`),
so that it sends one reply however many partitions it holds.
"""

import asyncio
import threading
import time
import uuid
from typing import NamedTuple

import numpy as np
from distributed import get_worker
from distributed.core import clean_exception
from distributed.protocol.pickle import dumps

from ._input import engine_rows

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
    block = engine_rows(block)
    _put(token, part, make(block))
    return get_worker().address


def _call(token, part, method, *args):
    return getattr(_get(token, part), method)(*args)


async def _call_many(token, method, calls, combine, dask_worker):
    """`_call` for this worker's partitions (`calls`: partition -> args), in its thread pool:
    their results by partition, or with `combine` the one result `combine(results in partition
    order)`; with the seconds the calls took."""

    def work():
        start = time.perf_counter()
        results = {part: _call(token, part, method, *args) for part, args in calls.items()}
        if combine is not None:
            ordered = [results[part] for part in sorted(results)]
            results = ordered[0] if len(ordered) == 1 else combine(ordered)
        return results, time.perf_counter() - start

    return await asyncio.get_running_loop().run_in_executor(dask_worker.executor, work)


async def _direct(client, address, function, *args):
    """`function(*args)` (given `dask_worker`) run by the worker at `address`, called straight
    from the client over a pooled connection; raises what the function raised."""
    response = await client.rpc(address).run(function=dumps(function), args=dumps(args))
    if response["status"] != "OK":
        _, error, traceback = clean_exception(**response)
        raise error.with_traceback(traceback)
    return response["result"]


async def _direct_each(client, function, args_per_worker, each=None):
    """`_direct` to every worker of `args_per_worker` (address -> args) at once: the results by
    address; `each(result)` is called on each result as it arrives."""

    async def one(address):
        result = await _direct(client, address, function, *args_per_worker[address])
        if each is not None:
            each(result)
        return result

    addresses = list(args_per_worker)
    replies = await asyncio.gather(*(one(a) for a in addresses))
    return dict(zip(addresses, replies))


def _payload(value, seen=None):
    """Bytes of the bytes-like values in `value` (nested in tuples, lists and dicts), each
    object once, as pickle sends it: what a message carries beyond its framing."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list)):
        return 0
    return sum(_payload(v, seen) for v in value)


class Round(NamedTuple):
    """One `Resident.map`: its label, when it started and ended on the client
    (`time.perf_counter()`), the seconds the busiest worker spent in its calls, and the payload
    bytes sent to the workers and received from them."""

    label: str
    start: float
    end: float
    busiest: float
    sent: int
    received: int


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

    def map(self, method, args_per_part, label=None, combine=None, each=None):
        """`obj.method(*args)` on every partition (`args_per_part[i]` for partition i), one
        direct call per worker carrying only its partitions' arguments; the results in partition
        order. With `combine`, each worker replies with `combine(its results in partition
        order)` instead, and the list holds one such result per worker; `each(reply)` is called
        on each worker's reply as it arrives (on the client's event loop). The round's timing
        and bytes are recorded under `label`."""
        calls = {}
        for part, worker in enumerate(self.workers):
            calls.setdefault(worker, {})[part] = args_per_part[part]
        args = {
            worker: (self.token, method, mine, combine) for worker, mine in calls.items()
        }
        start = time.perf_counter()
        arrived = None if each is None else (lambda result: each(result[0]))
        replies = self.client.sync(_direct_each, self.client, _call_many, args, arrived)
        end = time.perf_counter()
        results, busiest = {}, 0.0
        for worker, (reply, seconds) in replies.items():
            results[worker] = reply
            busiest = max(busiest, seconds)
        sent = sum(_payload(mine) for mine in calls.values())  # each worker's message
        received = _payload(list(results.values()))
        self.timings.append(Round(label, start, end, busiest, sent, received))
        if combine is not None:
            return [results[worker] for worker in calls]
        merged = {}
        for reply in results.values():
            merged.update(reply)
        return [merged[part] for part in range(len(self.workers))]

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
