"""kmeans_knn.dask.KMeans on a local Dask cluster: what a Lloyd step costs beyond its compute,
and N workers (GPUs) against one.

Data: uniform [0, 1) float32, --rows × --dims, made on the workers, one partition per worker;
k = --k, init = the first k rows, n_init = 1, tol = 0 (so a fit runs exactly --iters steps).

Per Lloyd step, medians over every step of --reps fits, measured inside the fits (the fit's
rounds of requests are timed on the client, and each worker times its engine calls):
- step: from sending a step's request to sending the next request.
- engine: the time the busiest worker spent in the engine (its partitions' assignment and
  exact sums, on its GPU or CPU, and adding them up when it holds several); eng.least: the
  least busy worker's.
- messaging: the step's round trip to the workers beyond that (moving the messages, decoding,
  the worker's event loop and thread pool).
- client: from the step's replies to the next request (the merge and finish of the k × d sums,
  Python ↔ engine glue).
- sent KiB / recv KiB: the payload bytes of a step's messages, to all workers and from them.
and, alone, the parts of messaging that do not depend on the engine, both as a fit calls the
workers (directly from the client, "direct") and through the scheduler (Client.run, "sched."):
- rtt: a round trip to every worker with a tiny payload.
- transfer: the same round trip carrying one step's messages (k × d float32 centroids out;
  k × d int64 sums and k uint64 counts back from each worker) minus the tiny one.
"fit s" is the whole fit's wall time (setup, upload to the devices, the steps, the labels).
--workers takes a list (e.g. 4,2,1; a cuda run uses the first N visible GPUs; one count N > 1
alone means N,1); the speed-up of each count over one worker is reported when 1 is in it.

usage: python3 dask_bench.py [--device cpu|cuda] [--workers N[,N...]] [--rows N] [--dims N]
                             [--k N] [--iters N] [--reps N] [--threads N] [--out FILE]
JSON goes to --out, else to $OUT/dask-bench-<device>.json when OUT is set.
"""

import argparse
import json
import os
import statistics
import time

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster, wait

from kmeans_knn import dask as kd
from kmeans_knn.dask import _resident


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--device", default="cpu", help="cpu (CPU worker processes) or cuda (a worker per GPU)"
    )
    ap.add_argument(
        "--workers",
        type=lambda v: [int(w) for w in v.split(",")],
        default=[2, 1],
        help="worker counts to measure, comma-separated (default 2,1; one count N > 1 alone: N,1)",
    )
    ap.add_argument("--rows", type=int, default=40_000_000)
    ap.add_argument("--dims", type=int, default=128)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=10, help="Lloyd steps per fit")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, help="threads per worker (default: cores / workers)")
    ap.add_argument("--out")
    return ap.parse_args()


def cluster(args, workers):
    threads = args.threads or max(1, (os.cpu_count() or 1) // workers)
    if args.device == "cuda":
        return kd.local_gpu_cluster(kd.visible_gpus()[:workers], threads_per_worker=threads)
    env = {"RAYON_NUM_THREADS": str(threads)}
    return LocalCluster(
        n_workers=workers,
        threads_per_worker=threads,
        processes=True,
        dashboard_address=":0",
        env=env,
    )


def make_block(rows, dims, seed):
    return np.random.default_rng(seed).random((rows, dims), dtype=np.float32)


def partitioned_data(client, rows, dims):
    """One partition per worker, made there."""
    workers = sorted(client.scheduler_info()["workers"])
    sizes = [rows // len(workers) + (i < rows % len(workers)) for i in range(len(workers))]
    futures = [
        client.submit(make_block, r, dims, i, workers=[w], pure=False)
        for i, (r, w) in enumerate(zip(sizes, workers))
    ]
    wait(futures)
    parts = [da.from_delayed(f, (r, dims), dtype=np.float32) for f, r in zip(futures, sizes)]
    return da.concatenate(parts)


def per_step(fit, iters, reps):
    """Medians over the steps of `reps` fits of `iters` steps: (step, engine, messaging,
    client) seconds, (sent, received) bytes and the least busy worker's engine seconds; and the
    fits' median wall seconds."""
    fit(2)  # warm-up: imports, CUDA contexts, kernels
    steps, walls = [], []
    for _ in range(reps):
        start = time.perf_counter()
        rounds = fit(iters)
        walls.append(time.perf_counter() - start)
        for r, after in zip(rounds, rounds[1:]):
            if r.label == "Step":
                trip, client = r.end - r.start, after.start - r.end
                split = (trip + client, r.busiest, trip - r.busiest, client)
                steps.append(split + (r.sent, r.received, r.least_busy))
    per = tuple(statistics.median(s[i] for s in steps) for i in range(7))
    return per, statistics.median(walls)


def round_trip(call, send_bytes, reply_bytes, reps=30):
    """Median seconds of `call(function, payload, size)` (a call to every worker) sending and
    returning that many bytes."""
    payload = bytes(send_bytes)
    for _ in range(3):
        call(_reply, payload, reply_bytes)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call(_reply, payload, reply_bytes)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _reply(payload, size):
    return bytes(size)


def measure(args, workers):
    device = "cpu" if args.device == "cpu" else "auto"
    with cluster(args, workers) as c, Client(c) as client:
        X = partitioned_data(client, args.rows, args.dims)
        init = X[: args.k].compute()
        devices = []

        def fit(steps):
            params = dict(init=init, n_init=1, max_iter=steps, tol=0.0, device=device)
            km = kd.KMeans(args.k, **params).fit(X)
            devices.append(km.device_)
            return km._timings

        (step, engine, messaging, glue, sent, received, calmest), fit_s = per_step(
            fit, args.iters, args.reps
        )
        addresses = sorted(client.scheduler_info()["workers"])

        def direct(function, *a):
            client.sync(_resident._direct_each, client, function, {w: a for w in addresses})

        def scheduled(function, *a):
            client.run(function, *a)

        values = args.k * args.dims
        out, back = 4 * values, 8 * values + 8 * args.k
        trips = {}
        for name, call in (("direct", direct), ("scheduler", scheduled)):
            tiny = round_trip(call, 8, 8)
            trips[f"{name}_rtt_ms"] = 1e3 * tiny
            trips[f"{name}_transfer_ms"] = 1e3 * (round_trip(call, out, back) - tiny)
    return {
        "workers": workers,
        "device": devices[-1],
        "fit_s": fit_s,
        "step_ms": 1e3 * step,
        "engine_ms": 1e3 * engine,
        "engine_least_ms": 1e3 * calmest,
        "messaging_ms": 1e3 * messaging,
        "client_ms": 1e3 * glue,
        "sent_kib": sent / 1024,
        "received_kib": received / 1024,
        **trips,
    }


def main():
    args = parse_args()
    if len(args.workers) == 1 and args.workers[0] > 1:
        args.workers.append(1)
    shape = f"{args.rows} × {args.dims}, k = {args.k}, {args.iters} steps"
    results = [measure(args, workers) for workers in args.workers]
    print(f"kmeans_knn.dask.KMeans, {shape}, --device {args.device}")
    columns = ("workers", "step ms", "engine", "eng.least", "messaging", "client", "sent KiB")
    columns += ("recv KiB",)
    columns += ("rtt", "transfer", "sched.rtt", "sched.tr.", "fit s")
    print(" ".join(f"{c:>9}" for c in columns) + "  device")
    keys = ("step_ms", "engine_ms", "engine_least_ms", "messaging_ms", "client_ms", "sent_kib")
    keys += ("received_kib",)
    keys += ("direct_rtt_ms", "direct_transfer_ms", "scheduler_rtt_ms")
    keys += ("scheduler_transfer_ms", "fit_s")
    for r in results:
        print(f"{r['workers']:>9} " + " ".join(f"{r[k]:>9.2f}" for k in keys) + f"  {r['device']}")
    report = {"shape": vars(args), "results": results}
    one = [r for r in results if r["workers"] == 1]
    if one:
        report["speedup_per_step"] = {}
        for r in results:
            if r["workers"] > 1:
                speedup = one[0]["step_ms"] / r["step_ms"]
                report["speedup_per_step"][r["workers"]] = speedup
                print(f"speed-up per step, {r['workers']} workers over 1: {speedup:.2f}×")
    out = args.out
    if out is None and os.environ.get("OUT"):
        out = os.path.join(os.environ["OUT"], f"dask-bench-{args.device}.json")
    if out:
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
