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

Where a worker shares the client's host (it reads a file the client left in the host's shared
memory, `/dev/shm`), a call's large bytes (a step's centroids out, its sums back) go through
files in a folder there instead of Dask's comm, which moved them at ~0.8 GB/s on one host; the
message carries only the file's name, and the rounds themselves go over a Unix socket in the
same folder (`_lines`) instead of Dask's comm. `KMEANS_KNN_DASK_SHARED_MEMORY=0` turns both off.
"""

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from typing import NamedTuple

import numpy as np
from distributed import get_worker
from distributed.core import clean_exception
from distributed.protocol.pickle import dumps

from ._input import engine_rows
from ._lines import Lines, open_line

# token -> {partition: engine object}, in each worker process.
_REGISTRY = {}
# token -> the path of this worker's line for it (`_lines.open_line`).
_LINES = {}
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
        _LINES.pop(token, None)


def _wanted(token):
    with _LOCK:
        return token in _REGISTRY


def _line(token, folder):
    """This worker's line for `token`'s objects, opened on the first call: a socket in the
    client's `folder` answering `_answer` calls; None where it cannot be opened."""
    with _LOCK:
        if token not in _LINES:
            try:
                _LINES[token] = open_line(folder, _answer, lambda: _wanted(token))
            except OSError:
                _LINES[token] = None
        return _LINES[token]


# Bytes of at least this size go through shared memory to and from a worker on the client's host.
_SHARED_MIN_BYTES = 64 << 10


class _Shared(NamedTuple):
    """Bytes left in a file of the client's folder in shared memory, in place of the bytes."""

    path: str
    size: int


def _write_shared(path, data):
    """`data` left in the file `path`, as `_Shared`; `data` itself where the file cannot be
    written (e.g. a small `/dev/shm` full), to go in the message instead. An existing file is
    overwritten in place, keeping its pages: a step writes the same sizes to the same files, and
    a fresh file's pages cost more than the write (0.5 against 0.1 ms a MiB)."""
    try:
        # Opened without truncating; cut to the new size once written.
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(data)
            f.truncate()
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return data
    return _Shared(path, len(data))


def _read_shared(shared):
    with open(shared.path, "rb") as f:
        data = f.read()
    if len(data) != shared.size:
        raise RuntimeError(f"{shared.path} holds {len(data)} bytes, not {shared.size}")
    return data


class _SharedFolder:
    """The client's folder in the host's shared memory for one `Resident`, with a probe file
    that a worker reads to learn that it shares the host; removed on `remove()` or when the
    `Resident` is collected. None where there is no writable `/dev/shm` or it is turned off."""

    @staticmethod
    def make():
        root = "/dev/shm"
        if os.environ.get("KMEANS_KNN_DASK_SHARED_MEMORY", "1") == "0":
            return None
        if not (os.path.isdir(root) and os.access(root, os.W_OK)):
            return None
        return _SharedFolder(tempfile.mkdtemp(prefix="kmeans-knn-", dir=root))

    def __init__(self, path):
        self.path = path
        self.probe = (os.path.join(path, "probe"), uuid.uuid4().hex)
        with open(self.probe[0], "w") as f:
            f.write(self.probe[1])
        self._remove = weakref.finalize(self, shutil.rmtree, path, True)
        self._written = 0

    def put(self, data):
        """`data` in the round's next file of the folder (see `_write_shared`)."""
        self._written += 1
        return _write_shared(os.path.join(self.path, f"request-{self._written}"), data)

    def reply_path(self, worker):
        return os.path.join(self.path, f"reply-{worker}")

    def rewind(self):
        """Ends a round: the next round's requests overwrite this round's files in place (a
        round's replies are all in before the next one starts, so no worker reads them any
        more)."""
        self._written = 0

    def remove(self):
        self._remove()


def _sees(probe):
    """Whether this process reads the client's probe file (it shares the client's host)."""
    if probe is None:
        return False
    path, nonce = probe
    try:
        with open(path) as f:
            return f.read() == nonce
    except OSError:
        return False


def _make(token, part, block, make, probe=None):
    """On the worker that holds `block`: makes the engine object; returns where it lives,
    whether it shares the client's host memory (reads `probe`) and, if so, its line's path."""
    block = engine_rows(block)
    _put(token, part, make(block))
    sees = _sees(probe)
    line = _line(token, os.path.dirname(probe[0])) if sees else None
    return get_worker().address, sees, line


def _call(token, part, method, *args):
    return getattr(_get(token, part), method)(*args)


def _read_args(args, read):
    """`args` with every `_Shared` read back into bytes (`read` caches by file)."""
    return tuple(read(a) if isinstance(a, _Shared) else a for a in args)


def _answer(token, method, calls, combine, reply_to=None):
    """`_call` for this worker's partitions (`calls`: partition -> args): their results by
    partition, or with `combine` the one result `combine(results in partition order)`; with the
    seconds the calls took. Arguments given as `_Shared` are read from their files; with
    `reply_to` (a path on the client's host), large bytes results are left in files there and
    returned as `_Shared`."""
    start = time.perf_counter()
    cache = {}

    def read(shared):
        if shared.path not in cache:
            cache[shared.path] = _read_shared(shared)
        return cache[shared.path]

    results = {
        part: _call(token, part, method, *_read_args(args, read)) for part, args in calls.items()
    }
    if combine is not None:
        ordered = [results[part] for part in sorted(results)]
        results = ordered[0] if len(ordered) == 1 else combine(ordered)
        if reply_to is not None:
            results = _share(results, reply_to)
    elif reply_to is not None:
        results = {part: _share(r, f"{reply_to}-{part}") for part, r in results.items()}
    return results, time.perf_counter() - start


async def _call_many(*args, dask_worker=None):
    """`_answer(*args)` in the worker's thread pool, reached through Dask's comm."""
    return await asyncio.get_running_loop().run_in_executor(dask_worker.executor, _answer, *args)


def _share(result, path):
    """Large bytes `result` left in the file `path`, as `_Shared` (see `_write_shared`); any
    other result as it is."""
    if isinstance(result, bytes) and len(result) >= _SHARED_MIN_BYTES:
        return _write_shared(path, result)
    return result


def _unshared_reply(reply):
    """A worker's reply (`_call_many`'s) with its `_Shared` results read back into bytes."""
    results, seconds = reply
    if isinstance(results, _Shared):
        results = _read_shared(results)
    elif isinstance(results, dict):
        results = {
            part: _read_shared(r) if isinstance(r, _Shared) else r for part, r in results.items()
        }
    return results, seconds


async def _direct(client, address, function, *args):
    """`function(*args)` (given `dask_worker`) run by the worker at `address`, called straight
    from the client over a pooled connection; raises what the function raised."""
    response = await client.rpc(address).run(function=dumps(function), args=dumps(args))
    if response["status"] != "OK":
        _, error, traceback = clean_exception(**response)
        raise error.with_traceback(traceback)
    return response["result"]


async def _direct_each(client, function, args_per_worker, each=None, receive=None):
    """`_direct` to every worker of `args_per_worker` (address -> args) at once: the results by
    address, each made `receive(result)` when given; `each(result)` is called on each result
    as it arrives, on a thread of the event loop's pool (so `each` must be thread-safe)."""

    def received(result):
        if receive is not None:
            result = receive(result)
        if each is not None:
            each(result)
        return result

    loop = asyncio.get_running_loop()

    async def one(address):
        result = await _direct(client, address, function, *args_per_worker[address])
        if receive is None and each is None:
            return result
        # On a thread of the loop's pool: reading a reply's file and adding its sums on the
        # event loop would hold back the replies that arrive meanwhile (on 4 × H200 a step's
        # last reply took 4.0 ms from its worker's end to the fit, the first one 1.5).
        return await loop.run_in_executor(None, received, result)

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
    (`time.perf_counter()`), the seconds the busiest and the least busy worker spent in its
    calls, and the payload bytes sent to the workers and received from them."""

    label: str
    start: float
    end: float
    busiest: float
    sent: int
    received: int
    least_busy: float = 0.0


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
        self.shared = _SharedFolder.make()
        self.lines = Lines({})
        probe = None if self.shared is None else self.shared.probe
        made = [
            client.submit(
                _make, self.token, i, block, _Bound(make, int(self.starts[i])), probe, pure=False
            )
            for i, block in enumerate(blocks)
        ]
        try:
            placed = client.gather(made)
        except BaseException:
            client.run(_drop, self.token)
            self._unshare()
            raise
        self.workers = [address for address, _, _ in placed]
        # The workers that share this host's memory, each with its reply file, and their lines.
        local = sorted({address for address, sees, _ in placed if sees})
        self.reply_to = {address: self.shared.reply_path(i) for i, address in enumerate(local)}
        self.lines = Lines({address: line for address, _, line in placed if line})
        if not self.reply_to:
            self._unshare()

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
        on each worker's reply as it arrives (on a thread of the client's event loop's pool; it
        must be thread-safe, as `PartialSum.add` is). The round's timing
        and bytes are recorded under `label`."""
        calls = {}
        for part, worker in enumerate(self.workers):
            calls.setdefault(worker, {})[part] = args_per_part[part]
        start = time.perf_counter()
        files = {}
        args = {
            worker: (self.token, method, self._through_files(worker, mine, files), combine)
            + ((self.reply_to[worker],) if worker in self.reply_to else ())
            for worker, mine in calls.items()
        }
        arrived = None if each is None else (lambda result: each(result[0]))
        try:
            if self.lines.reach(args):
                replies = self.lines.round(args, _received(arrived))
            else:
                replies = self.client.sync(
                    _direct_each, self.client, _call_many, args, arrived, _unshared_reply
                )
        finally:
            if self.shared is not None:
                self.shared.rewind()
        end = time.perf_counter()
        results, busiest, least_busy = {}, 0.0, float("inf")
        for worker, (reply, seconds) in replies.items():
            results[worker] = reply
            busiest, least_busy = max(busiest, seconds), min(least_busy, seconds)
        sent = sum(_payload(mine) for mine in calls.values())  # each worker's message
        received = _payload(list(results.values()))
        self.timings.append(Round(label, start, end, busiest, sent, received, least_busy))
        if combine is not None:
            return [results[worker] for worker in calls]
        merged = {}
        for reply in results.values():
            merged.update(reply)
        return [merged[part] for part in range(len(self.workers))]

    def _through_files(self, worker, calls, files):
        """`calls` (partition -> args) for `worker`, with large bytes arguments left in shared
        memory where it shares this host: each object in one file (`files`: id -> (object,
        its `_Shared`), for this round), whichever workers read it."""
        if worker not in self.reply_to:
            return calls

        def put(a):
            if not (isinstance(a, bytes) and len(a) >= _SHARED_MIN_BYTES):
                return a
            if id(a) not in files:
                files[id(a)] = (a, self.shared.put(a))
            return files[id(a)][1]

        return {part: tuple(put(a) for a in args) for part, args in calls.items()}

    def _unshare(self):
        self.lines.close()
        if self.shared is not None:
            self.shared.remove()
        self.shared, self.reply_to = None, {}

    def release(self):
        """Frees the objects on every worker that holds one (nothing to do once the client has
        closed: the workers are its cluster's, or no longer reachable), and the files in shared
        memory."""
        workers = sorted(set(self.workers))
        if workers and self.client.status == "running":
            self.client.run(_drop, self.token, workers=workers)
        self.workers = []
        self._unshare()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _received(arrived):
    """What a round over lines does with each reply as it arrives: reads its `_Shared` results
    back, then `arrived(reply)` where given."""

    def received(reply):
        reply = _unshared_reply(reply)
        if arrived is not None:
            arrived(reply)
        return reply

    return received


class _Bound:
    """`make(block, first_row)` with the partition's first row filled in (picklable)."""

    def __init__(self, make, first_row):
        self.make, self.first_row = make, first_row

    def __call__(self, block):
        return self.make(block, self.first_row)
