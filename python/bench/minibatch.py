"""Mini-batch k-means against full Lloyd: the wall time each method needs to reach an inertia
within --within (default 1, 2 and 5 %) of full Lloyd's converged inertia, on uniform [0, 1) float32 data
(seed 1) of shape --n × --d with --k clusters (default: the E shape, 10^7 × 128, k = 1024).

Methods (each a whole fit from a float32 NumPy array: initialisation, steps or iterations, and
the final labels of every row; on the GPU the data upload too):
  lloyd-<device>       ours, KMeans (k-means++, tol 0) with max_iter 1, 2, 3, 5, 8, 13, ...
  minibatch-<device>   ours, MiniBatchKMeans: the defaults (stops on the smoothed inertia), then
                       max_no_improvement=None with max_iter 1, 2, 3, 5, 8, ... epochs
  sklearn-minibatch    scikit-learn's MiniBatchKMeans (CPU), the same settings
(the mini-batch methods once per --batch-size). A setting's time is the median of --reps fits.
Each method stops at the first setting within the tightest target; the time to a target is
that of the first setting within it (a whole fit, not a point on one fit's way).
The reference is ours, KMeans to convergence (max_iter 300, tol 1e-4) on the first --devices
device, unless --reference gives the inertia. Every inertia is recomputed the same way (nearest
centre by our predict, squared distances summed in float64), so all are on one scale.

usage: python3 minibatch.py [--n N] [--d D] [--k K] [--batch-size 1024,8192] [--reps R]
                            [--devices cuda,cpu] [--methods lloyd,minibatch,sklearn]
                            [--within 0.01,0.02,0.05] [--max-epochs 21] [--max-lloyd 300]
                            [--threads N] [--reference INERTIA] [--out FILE]
JSON goes to --out, else to $OUT/minibatch-bench.json when OUT is set.
"""

import argparse
import json
import os
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--batch-size", default="1024", help="one or more, comma-separated")
    ap.add_argument("--reps", type=int, default=1, help="fits per setting (median time)")
    ap.add_argument("--devices", default="cuda,cpu", help="ours: cuda[:N] and/or cpu")
    ap.add_argument("--methods", default="lloyd,minibatch,sklearn")
    ap.add_argument("--within", default="0.01,0.02,0.05", help="targets, relative to the reference")
    ap.add_argument("--max-epochs", type=int, default=21, help="largest max_iter tried")
    ap.add_argument("--max-lloyd", type=int, default=300, help="largest Lloyd max_iter tried")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads, every side")
    ap.add_argument("--reference", type=float, help="the converged Lloyd inertia, if known")
    ap.add_argument("--seed", type=int, default=0, help="random_state of every fit")
    ap.add_argument("--out")
    return ap.parse_args()


ARGS = parse_args()
# Thread pools read these when they start, so before NumPy or the engine is imported.
for var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
import sklearn.cluster  # noqa: E402

import kmeans_knn  # noqa: E402


def fibonacci(limit):
    """1, 2, 3, 5, 8, 13, ... up to `limit`, and `limit` itself."""
    out, a, b = [], 1, 2
    while a < limit:
        out.append(a)
        a, b = b, a + b
    return out + [limit]


def inertia(x, centers, device, rows=1 << 18):
    """Σ squared distance of every row to its nearest centre (the engine's labels), in float64,
    `rows` rows at a time."""
    centers = np.ascontiguousarray(centers, dtype=np.float32)
    probe = kmeans_knn.KMeans(len(centers), device=device)
    probe.cluster_centers_, probe.n_features_in_ = centers, x.shape[1]
    total = 0.0
    for start in range(0, len(x), rows):
        part = x[start : start + rows]
        offsets = part.astype(np.float64) - centers[probe.predict(part)]
        total += float(np.einsum("ij,ij->", offsets, offsets))
    return total


def timed(make, x, reps=1):
    """The median wall time of `reps` fits, and the last fitted estimator."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        est = make().fit(x)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), est


def settings(name, device, b):
    """(label, estimator factory) pairs in the order tried."""
    k, seed = ARGS.k, ARGS.seed
    if name == "lloyd":
        return [
            (f"max_iter={m}", lambda m=m: kmeans_knn.KMeans(
                k, n_init=1, max_iter=m, tol=0, random_state=seed, device=device))
            for m in fibonacci(ARGS.max_lloyd)
        ]
    if name == "minibatch":
        cls = lambda **kw: kmeans_knn.MiniBatchKMeans(  # noqa: E731
            k, batch_size=b, random_state=seed, device=device, **kw)
    else:
        cls = lambda **kw: sklearn.cluster.MiniBatchKMeans(  # noqa: E731
            k, batch_size=b, random_state=seed, n_init=1, **kw)
    out = [("defaults", lambda: cls())]
    return out + [
        (f"max_iter={e} no early stop", lambda e=e: cls(max_iter=e, max_no_improvement=None))
        for e in fibonacci(ARGS.max_epochs)
    ]


def main():
    devices = ARGS.devices.split(",")
    batches = [int(b) for b in ARGS.batch_size.split(",")]
    methods = []  # (label, name, device, batch size)
    for m in ARGS.methods.split(","):
        if m == "lloyd":
            methods += [(f"lloyd-{device}", m, device, None) for device in devices]
            continue
        for b in batches:
            if m == "sklearn":
                methods.append((f"sklearn-minibatch b={b}", m, "cpu", b))
            else:
                methods += [(f"{m}-{device} b={b}", m, device, b) for device in devices]
    x = np.random.default_rng(1).random((ARGS.n, ARGS.d), dtype=np.float32)
    score_device = devices[0]
    within = sorted(float(w) for w in ARGS.within.split(","))
    meta = dict(n=ARGS.n, d=ARGS.d, k=ARGS.k, batch_sizes=batches, reps=ARGS.reps, within=within,
                threads=ARGS.threads, seed=ARGS.seed, sklearn=sklearn.__version__,
                devices={d: kmeans_knn.describe_device(d) for d in devices})
    for device in devices:  # start every backend (CUDA context, kernels) before timing
        kmeans_knn.KMeans(2, device=device).fit(x[:64])
    if ARGS.reference is None:
        secs, ref = timed(lambda: kmeans_knn.KMeans(ARGS.k, random_state=ARGS.seed,
                                                    device=devices[0]), x)
        meta.update(reference=inertia(x, ref.cluster_centers_, score_device),
                    reference_iters=ref.n_iter_, reference_seconds=secs)
    else:
        meta["reference"] = ARGS.reference
    print(json.dumps(meta), flush=True)
    rows = []
    for method, name, device, b in methods:
        tried = []
        for label, make in settings(name, device, b):
            secs, est = timed(make, x, ARGS.reps)
            value = inertia(x, est.cluster_centers_, score_device)
            tried.append(dict(setting=label, seconds=secs, ratio=value / meta["reference"],
                              steps=getattr(est, "n_steps_", None), iters=est.n_iter_))
            print(json.dumps(dict(method=method, **tried[-1])), flush=True)
            if value <= (1 + within[0]) * meta["reference"]:
                break
        first = {w: next((t for t in tried if t["ratio"] <= 1 + w), None) for w in within}
        best = min(tried, key=lambda t: t["ratio"])
        rows.append(dict(method=method, best_ratio=best["ratio"], best_setting=best["setting"],
                         best_seconds=best["seconds"], tried=tried,
                         to_target={str(w): t and dict(seconds=t["seconds"], setting=t["setting"])
                                    for w, t in first.items()}))
    report(meta, rows)


def report(meta, rows):
    print(f"\n{ARGS.n} × {ARGS.d}, k = {ARGS.k}, {ARGS.threads} threads, median of {ARGS.reps}; "
          f"reference inertia {meta['reference']:.6e}")
    heads = "".join(f"{f'within {100 * w:g} %':>36}" for w in meta["within"])
    print(f"{'method':<28}{heads}   best ratio (setting, time)")
    for r in rows:
        cells = ""
        for t in r["to_target"].values():
            cell = f"{t['seconds']:.2f} s ({t['setting']})" if t else "not reached"
            cells += f"{cell:>36}"
        print(f"{r['method']:<28}{cells}   {r['best_ratio']:.4f} ({r['best_setting']}, "
              f"{r['best_seconds']:.2f} s)")
    out = ARGS.out or (os.path.join(os.environ["OUT"], "minibatch-bench.json")
                       if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
