"""CPU baselines for the criterion benches (benches/cpu_kmeans.rs, benches/cpu_knn.rs): one Lloyd
iteration of scikit-learn and of faiss-cpu on the shapes of cases A-D, and an exact kNN search of
case S, same data distribution (uniform [0, 1), float32), initial centroids = the first k rows,
same thread count. Prints the median over --reps timed runs after one warm-up; with --ours it puts
our criterion medians beside them.

What is timed (wall clock, nothing subtracted):
  sklearn  KMeans(n_clusters=k, init=first k rows, n_init=1, max_iter=1, tol=0,
           algorithm="lloyd").fit(x). This is the public API's cost of one iteration: input
           validation, centring a copy of x, squared norms, one assign+update pass and the final
           E-step that scikit-learn always reruns after its loop (labels matching the centres).
  sklearn-iter  (informative) scikit-learn's own Lloyd step alone, the private
           sklearn.cluster._k_means_lloyd.lloyd_iter_chunked_dense(update_centers=True) on
           precomputed squared norms: one assign + update, like ours.
  faiss    faiss.Kmeans(d, k, niter=1, max_points_per_centroid=n (no subsampling),
           spherical=False).train(x, init_centroids=first k rows): one exhaustive assign
           (IndexFlatL2 search, BLAS sgemm) + centroid update, plus faiss' own setup.
  kNN S    sklearn: NearestNeighbors(n_neighbors=k, algorithm="brute") fitted once,
           .kneighbors(queries) timed; faiss: IndexFlatL2 built (add) once, .search(queries, k)
           timed. Ours (cpu_knn): KnnIndex built once, .search timed.

  --seeding  (scikit-learn only) on 200,000 x 128 uniform points, k = 256: the seeding alone,
           sklearn.cluster.kmeans_plusplus(x, 256, random_state=0) (greedy, 2 + ln k trials), and a
           whole KMeans(256, n_init=1, random_state=0).fit(x) (k-means++ then Lloyd to
           convergence, tol 1e-4), beside ours (benches/cpu_kmeans.rs, group cpu_seeding).

usage: python3 bench/cpu_baseline.py [--cases A,B,C,D] [--reps N] [--threads T]
           [--ours target/criterion | gpu-bench.jsonl] [--json OUT] [--seeding]
"""
import argparse
import glob
import json
import os
import platform
import time

import numpy as np

CASES = {
    "A": (63_504, 75, 80),
    "B": (1_000_000, 9, 16),
    "C": (1_048_576, 3, 255),
    "D": (200_000, 128, 1024),
}
KNN_CASES = {"S": (1200, 32_768, 256, 25)}


def median_ms(f, reps):
    f()  # warm-up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def sklearn_fit(x, init, k):
    from sklearn.cluster import KMeans

    def run():
        KMeans(n_clusters=k, init=init, n_init=1, max_iter=1, tol=0, algorithm="lloyd").fit(x)

    return run


def sklearn_iter(x, init, k, threads):
    try:
        from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense
    except ImportError:
        return None
    n, d = x.shape
    weights = np.ones(n, dtype=x.dtype)
    centers_new = np.empty_like(init)
    weight_in_clusters = np.empty(k, dtype=x.dtype)
    labels = np.empty(n, dtype=np.int32)
    shift = np.empty(k, dtype=x.dtype)

    def run():
        lloyd_iter_chunked_dense(x, weights, init, centers_new, weight_in_clusters, labels, shift,
                                 threads, update_centers=True)

    return run


def faiss_train(x, init, k):
    import faiss

    n, d = x.shape

    def run():
        km = faiss.Kmeans(d, k, niter=1, max_points_per_centroid=n, min_points_per_centroid=1,
                          spherical=False, verbose=False)
        km.train(x, init_centroids=init)

    return run


def sklearn_knn(x, q, k):
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(x)
    return lambda: nn.kneighbors(q)


def faiss_knn(x, q, k):
    import faiss

    index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    return lambda: index.search(q, k)


def load_ours(path):
    """Medians in ms by case: criterion's estimates.json under PATH (a target/criterion folder)
    or gpu-bench --json lines."""
    ours = {}
    if os.path.isdir(path):
        pattern = os.path.join(path, "cpu_*", "*", "*", "new", "estimates.json")
        for f in glob.glob(pattern):
            case = f.split(os.sep)[-4]
            with open(f) as fh:
                ours[case] = json.load(fh)["median"]["point_estimate"] / 1e6
    else:
        with open(path) as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    ours[row["case"]] = row["median_ms"]
    return ours


def seeding(args):
    import sklearn
    from sklearn.cluster import KMeans, kmeans_plusplus
    from threadpoolctl import threadpool_limits

    n, d, k = 200_000, 128, 256
    x = np.random.default_rng(1).random((n, d), dtype=np.float32)
    print(f"scikit-learn {sklearn.__version__}, threads: {args.threads}; {n} x {d}, k = {k}")
    with threadpool_limits(limits=args.threads):
        pp = median_ms(lambda: kmeans_plusplus(x, k, random_state=0), args.reps)
        t = time.perf_counter()
        model = KMeans(k, n_init=1, random_state=0).fit(x)
        fit = (time.perf_counter() - t) * 1e3
    print(f"kmeans_plusplus {pp:.0f} ms; KMeans.fit {fit:.0f} ms ({model.n_iter_} iterations, "
          f"inertia {model.inertia_:.6e}, init {100 * pp / fit:.1f} % of it)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", default="A,B,C,D,S")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--ours", help="target/criterion folder or gpu-bench --device cpu --json file")
    p.add_argument("--json", help="write the results here (JSON lines)")
    p.add_argument("--seeding", action="store_true", help="k-means++ seeding and a whole fit")
    args = p.parse_args()
    if args.seeding:
        return seeding(args)

    import faiss
    import sklearn
    from threadpoolctl import threadpool_info, threadpool_limits

    faiss.omp_set_num_threads(args.threads)
    ours = load_ours(args.ours) if args.ours else {}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"threads: {args.threads}")
    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, faiss {faiss.__version__}")
    # Import faiss and sklearn first so that threadpoolctl sees their BLAS and OpenMP libraries.
    for pool in threadpool_info():
        print(f"  {pool['user_api']:6} {pool['internal_api']:9} {pool.get('architecture', '-'):14}"
              f" threads={pool['num_threads']}  {os.path.basename(pool['filepath'])}")
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS"):
        if var in os.environ:
            print(f"  {var}={os.environ[var]}")

    header = (f"{'case':<4} {'n':>9} {'d':>4} {'k':>5} {'sklearn ms':>11} {'faiss ms':>9} "
              f"{'sk-iter ms':>10} {'ours ms':>8} {'ours/best':>9}")
    print(header)
    out = open(args.json, "w") if args.json else None
    rng = np.random.default_rng(1)
    for name in [c for c in args.cases.split(",") if c in CASES]:
        n, d, k = CASES[name]
        x = rng.random((n, d), dtype=np.float32)
        init = np.ascontiguousarray(x[:k])
        with threadpool_limits(limits=args.threads):
            sk = median_ms(sklearn_fit(x, init, k), args.reps)
            it = sklearn_iter(x, init, k, args.threads)
            sk_iter = median_ms(it, args.reps) if it else float("nan")
            fa = median_ms(faiss_train(x, init, k), args.reps)
        mine = ours.get(name, float("nan"))
        ratio = mine / min(sk, fa)
        print(f"{name:<4} {n:>9} {d:>4} {k:>5} {sk:>11.1f} {fa:>9.1f} {sk_iter:>10.1f} "
              f"{mine:>8.1f} {ratio:>9.2f}", flush=True)
        if out:
            out.write(json.dumps({"case": name, "n": n, "d": d, "k": k, "threads": args.threads,
                                  "sklearn_ms": sk, "sklearn_iter_ms": sk_iter, "faiss_ms": fa,
                                  "ours_ms": mine}) + "\n")
    knn = [c for c in args.cases.split(",") if c in KNN_CASES]
    if knn:
        print(f"{'knn':<4} {'m':>6} {'n':>7} {'d':>4} {'k':>4} {'sklearn ms':>11} {'faiss ms':>9} "
              f"{'ours ms':>8} {'ours/best':>9}")
    for name in knn:
        m, n, d, k = KNN_CASES[name]
        x = rng.random((n, d), dtype=np.float32)
        q = rng.random((m, d), dtype=np.float32)
        with threadpool_limits(limits=args.threads):
            sk = median_ms(sklearn_knn(x, q, k), args.reps)
            fa = median_ms(faiss_knn(x, q, k), args.reps)
        mine = ours.get(name, float("nan"))
        print(f"{name:<4} {m:>6} {n:>7} {d:>4} {k:>4} {sk:>11.1f} {fa:>9.1f} {mine:>8.1f} "
              f"{mine / min(sk, fa):>9.2f}", flush=True)
        if out:
            out.write(json.dumps({"case": name, "m": m, "n": n, "d": d, "k": k,
                                  "threads": args.threads, "sklearn_ms": sk, "faiss_ms": fa,
                                  "ours_ms": mine}) + "\n")
    if out:
        out.close()


if __name__ == "__main__":
    main()
