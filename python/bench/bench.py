"""The Python estimators on the cases of docs/BENCHMARKS.md: their overhead over the engine, and
the same job in scikit-learn and faiss-cpu (CPU) or PyTorch (GPU).

Each case starts from float32 NumPy arrays (uniform [0, 1)) and ends with NumPy results:
- k-means: fit(x) with init = the first k rows, n_init = 1, tol = 0, max_iter = --iters;
  per-iteration figures divide by the iterations each library ran.
- kNN: kneighbors(queries) on an index fitted once (squared L2; scikit-learn brute force).
"engine ms" is kmeans_knn.last_engine_seconds(): the library call inside the estimator, GIL
released; "overhead" is the estimator's wall time minus that (target: ≤ 5 % or ≤ 1 ms).
Wall-clock medians of --reps runs after one warm-up run.

usage: python3 bench.py [--device cpu|cuda] [--cases A,B,S] [--reps N] [--iters N]
                        [--threads N] [--out FILE]
JSON goes to --out, else to $OUT/python-bench-<device>.json when OUT is set.
"""

import argparse
import json
import os
import time

KMEANS_CASES = {
    "A": (63_504, 75, 80),
    "B": (1_000_000, 9, 16),
    "C": (1_048_576, 3, 255),
    "D": (200_000, 128, 1024),
    "E": (10_000_000, 128, 1024),
}
KNN_CASES = {
    "S": (1200, 32_768, 256, 25),
    "S512": (1200, 32_768, 256, 512),
    "F": (10_000, 1_000_000, 128, 100),
}
DEFAULT_CASES = {"cpu": "A,B,C,D,S", "cuda": "A,B,C,D,E,S,S512,F"}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--cases", help="comma-separated (default: A,B,C,D,S on cpu; all on cuda)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5, help="k-means iterations per fit")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads, every side")
    ap.add_argument("--out")
    return ap.parse_args()


ARGS = parse_args()
# Thread pools read these when they start, so before NumPy, faiss or the engine is imported.
for var in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
import sklearn.cluster  # noqa: E402
import sklearn.neighbors  # noqa: E402

import kmeans_knn  # noqa: E402

try:
    import faiss
except ImportError:
    faiss = None
if ARGS.device.startswith("cuda"):
    import sys

    import torch

    # torch_baseline.py is in bench/ in the repository, in the bundle's top folder on the GPU
    # machine.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(here, ".."), os.path.join(here, "..", "..", "bench")]
    import torch_baseline

    torch.backends.cuda.matmul.allow_tf32 = False
    # On the GPU, the sweep of k too (S1 … S2048).
    KNN_CASES.update(torch_baseline.KNN_CASES)


def median_run(f, reps):
    """Medians of f()'s wall time and of the engine time it reports, after one warm-up run."""
    f()
    walls, engines = [], []
    for _ in range(reps):
        start = time.perf_counter()
        engine = f()
        walls.append(time.perf_counter() - start)
        engines.append(engine)
    return 1e3 * float(np.median(walls)), 1e3 * float(np.median(engines)), \
        1e3 * float(np.median(np.subtract(walls, engines)))


def wall_ms(f, reps):
    return median_run(lambda: (f(), 0.0)[1], reps)[0]


def ours_kmeans(x, k, device):
    est = kmeans_knn.KMeans(k, init=x[:k], n_init=1, max_iter=ARGS.iters, tol=0, device=device)

    def fit():
        est.fit(x)
        return kmeans_knn.last_engine_seconds()

    wall, engine, overhead = median_run(fit, ARGS.reps)
    return dict(ours_ms=wall, engine_ms=engine, overhead_ms=overhead, ours_iters=est.n_iter_,
                ours_device=est.device_)


def ours_knn(q, x, k, device):
    est = kmeans_knn.NearestNeighbors(n_neighbors=k, metric="sqeuclidean", device=device).fit(x)

    def search():
        est.kneighbors(q)
        return kmeans_knn.last_engine_seconds()

    wall, engine, overhead = median_run(search, ARGS.reps)
    return dict(ours_ms=wall, engine_ms=engine, overhead_ms=overhead)


def cpu_baselines_kmeans(x, k):
    sk = sklearn.cluster.KMeans(k, init=x[:k], n_init=1, max_iter=ARGS.iters, tol=0,
                                algorithm="lloyd")
    row = dict(sklearn_ms=wall_ms(lambda: sk.fit(x), ARGS.reps))
    row["sklearn_iters"] = sk.n_iter_
    if faiss is not None:
        n, d = x.shape

        def train():
            km = faiss.Kmeans(d, k, niter=ARGS.iters, max_points_per_centroid=n)
            km.train(x, init_centroids=x[:k])

        row["faiss_ms"], row["faiss_iters"] = wall_ms(train, ARGS.reps), ARGS.iters
    return row


def cpu_baselines_knn(q, x, k):
    sk = sklearn.neighbors.NearestNeighbors(n_neighbors=k, algorithm="brute").fit(x)
    row = dict(sklearn_ms=wall_ms(lambda: sk.kneighbors(q), ARGS.reps))
    if faiss is not None:
        index = faiss.IndexFlatL2(x.shape[1])
        index.add(x)
        row["faiss_ms"] = wall_ms(lambda: index.search(q, k), ARGS.reps)
    return row


def torch_kmeans(x, k):
    """As a PyTorch user would: upload, --iters Lloyd iterations (TF32 off), download."""
    def fit():
        xt = torch.from_numpy(x).cuda()
        x2 = (xt * xt).sum(1)
        c = xt[:k].clone()
        chunk = max(1, min(len(x), (2 << 30) // (4 * k)))
        for _ in range(ARGS.iters):
            c = torch_baseline.lloyd_iteration(xt, x2, c, chunk)
        c.cpu().numpy()
        torch.cuda.synchronize()

    return dict(torch_ms=wall_ms(fit, ARGS.reps), torch_iters=ARGS.iters)


def torch_knn(q, x, k):
    """Training rows resident on the GPU (as our fitted index); queries up, results down."""
    xt = torch.from_numpy(x).cuda()
    x2 = (xt * xt).sum(1)
    chunk = max(1, min(len(q), (2 << 30) // (4 * len(x))))

    def search():
        found = torch_baseline.knn_search(torch.from_numpy(q).cuda(), xt, x2, k, chunk)
        [t.cpu().numpy() for t in found]
        torch.cuda.synchronize()

    return dict(torch_ms=wall_ms(search, ARGS.reps))


def main():
    cuda = ARGS.device.startswith("cuda")
    cases = (ARGS.cases or DEFAULT_CASES["cuda" if cuda else "cpu"]).split(",")
    rng = np.random.default_rng(0)
    meta = dict(device=kmeans_knn.describe_device(ARGS.device), threads=ARGS.threads,
                iters=ARGS.iters, reps=ARGS.reps, numpy=np.__version__,
                sklearn=sklearn.__version__, faiss=getattr(faiss, "__version__", None),
                torch=torch.__version__ if cuda else None)
    print(json.dumps(meta))
    rows = []
    for name in cases:
        if name in KMEANS_CASES:
            n, d, k = KMEANS_CASES[name]
            x = rng.random((n, d), dtype=np.float32)
            row = dict(case=name, n=n, d=d, k=k, **ours_kmeans(x, k, ARGS.device))
            row.update(torch_kmeans(x, k) if cuda else cpu_baselines_kmeans(x, k))
        elif name in KNN_CASES:
            m, n, d, k = KNN_CASES[name]
            x = rng.random((n, d), dtype=np.float32)
            q = rng.random((m, d), dtype=np.float32)
            row = dict(case=name, m=m, n=n, d=d, k=k, **ours_knn(q, x, k, ARGS.device))
            row.update(torch_knn(q, x, k) if cuda else cpu_baselines_knn(q, x, k))
        else:
            raise SystemExit(f"unknown case {name}")
        row["overhead_pct"] = 100 * row["overhead_ms"] / row["engine_ms"]
        rows.append(row)
        print(json.dumps(row))
    report(rows)
    out = ARGS.out or (os.environ.get("OUT") and
                       os.path.join(os.environ["OUT"], f"python-bench-{ARGS.device}.json"))
    if out:
        with open(out, "w") as f:
            json.dump(dict(meta, rows=rows), f, indent=1)


def report(rows):
    """A Markdown table: totals, and per-iteration times for k-means."""
    others = [c for c in ("sklearn", "faiss", "torch") if any(f"{c}_ms" in r for r in rows)]
    print("| case | ours ms | engine ms | overhead ms (%) | " +
          " | ".join(f"{c} ms" for c in others) + " | per iteration: ours | " +
          " | ".join(others) + " |")
    print("|---" * (4 + 2 * len(others) + 1) + "|")
    for r in rows:
        cells = [r["case"], f"{r['ours_ms']:.2f}", f"{r['engine_ms']:.2f}",
                 f"{r['overhead_ms']:.3f} ({r['overhead_pct']:.2f} %)"]
        cells += [f"{r[c + '_ms']:.2f}" if c + "_ms" in r else "" for c in others]
        if "ours_iters" in r:
            cells.append(f"{r['ours_ms'] / r['ours_iters']:.2f}")
            cells += [f"{r[c + '_ms'] / r[c + '_iters']:.2f}" if c + "_ms" in r else ""
                      for c in others]
        else:
            cells += [""] * (1 + len(others))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
