"""Whole k-means jobs on the CPU, ours against scikit-learn (and faiss-cpu where installed), on the
same data in the same run, with the same thread count.

For each case (shapes of A-D, uniform [0, 1) float32 from numpy default_rng(case index), saved as
NPY once):
  ours     `kmeans-knn kmeans X.npy --k K --device cpu --labels-out L.npy --json` in a fresh
           process: wall clock from start to exit (file in -> labels out) and the fit alone (the
           JSON "seconds"). Default init (k-means++), to convergence; and 20 iterations
           (`--max-iter 20 --tol 0`).
  sklearn  KMeans(K, init="k-means++", n_init=1, random_state=0).fit(np.load(X)): the same two
           runs (default tol; max_iter=20, tol=0), wall clock of load + fit, in this process
           under threadpool_limits(T).
  faiss    faiss.Kmeans(d, K, niter=20, max_points_per_centroid=n) (its init is random points:
           the 20-iteration row only), load + train.
Iterations and inertia are printed beside each time. Medians of --reps runs (no warm-up: every
run of ours is a fresh process, as a user runs it).

--simd LEVEL runs ours with KMEANS_KNN_CPU_SIMD=LEVEL and, with --openblas-coretype CORE,
scikit-learn's BLAS with OPENBLAS_CORETYPE=CORE (e.g. avx2 and Haswell: an AVX2-only CPU's
kernels on an AVX-512 machine). Both must be set before numpy loads, so this script re-executes
itself with them.

usage: python3 bench/whole_cpu.py --bin target/release/kmeans-knn [--cases A,B,C,D] [--reps N]
           [--threads T] [--simd LEVEL] [--openblas-coretype CORE] [--json OUT] [--dir DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CASES = {
    "A": (63_504, 75, 80),
    "B": (1_000_000, 9, 16),
    "C": (1_048_576, 3, 255),
    "D": (200_000, 128, 1024),
}
RUNS = {"to convergence": {}, "20 iterations": {"max_iter": 20, "tol": 0.0}}


def median(v):
    return sorted(v)[len(v) // 2]


def ours(args, path, k, run):
    out = os.path.join(os.path.dirname(path), "labels.npy")
    cmd = [args.bin, "kmeans", path, "--k", str(k), "--device", "cpu", "--seed", "0",
           "--labels-out", out, "--json"]
    if run:
        cmd += ["--max-iter", str(run["max_iter"]), "--tol", str(run["tol"])]
    walls, fits, last = [], [], None
    for _ in range(args.reps):
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        walls.append(time.perf_counter() - t)
        if proc.returncode != 0:
            sys.exit(f"ours failed: {' '.join(cmd)}\n{proc.stderr}")
        last = json.loads(proc.stdout)
        fits.append(last["seconds"])
    return {"wall_s": median(walls), "fit_s": median(fits), "iters": last["iterations"],
            "inertia": last["inertia"], "device": last["device"]}


def sklearn_run(args, path, k, run):
    import numpy as np
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    walls, last = [], None
    with threadpool_limits(args.threads):
        for _ in range(args.reps):
            t = time.perf_counter()
            x = np.load(path)
            last = KMeans(k, init="k-means++", n_init=1, random_state=0, **run).fit(x)
            walls.append(time.perf_counter() - t)
    return {"wall_s": median(walls), "iters": int(last.n_iter_), "inertia": float(last.inertia_)}


def faiss_run(args, path, k):
    try:
        import faiss
    except ImportError:
        return None
    import numpy as np

    faiss.omp_set_num_threads(args.threads)
    walls, last = [], None
    for _ in range(args.reps):
        t = time.perf_counter()
        x = np.load(path)
        km = faiss.Kmeans(x.shape[1], k, niter=20, seed=0, max_points_per_centroid=x.shape[0],
                          min_points_per_centroid=1, verbose=False)
        km.train(x)
        walls.append(time.perf_counter() - t)
        last = km
    return {"wall_s": median(walls), "iters": 20, "inertia": float(last.obj[-1])}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--cases", default="A,B,C,D")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--simd")
    p.add_argument("--openblas-coretype")
    p.add_argument("--json")
    p.add_argument("--dir")
    args = p.parse_args()

    want = {"RAYON_NUM_THREADS": str(args.threads), "OMP_NUM_THREADS": str(args.threads)}
    if args.simd:
        want["KMEANS_KNN_CPU_SIMD"] = args.simd
    if args.openblas_coretype:
        want["OPENBLAS_CORETYPE"] = args.openblas_coretype
    if any(os.environ.get(key) != value for key, value in want.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **want})

    import numpy as np
    import sklearn

    info = subprocess.run([args.bin, "info", "--json"], capture_output=True, text=True)
    simd = json.loads(info.stdout).get("cpu_simd", "?") if info.returncode == 0 else "?"
    print(f"threads {args.threads}; ours: CPU SIMD {simd}; scikit-learn {sklearn.__version__}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(detected)')}")
    print(f"{'case':4} {'run':15} {'ours wall s':>11} {'ours fit s':>10} {'iters':>5} "
          f"{'inertia':>12} | {'sklearn s':>9} {'iters':>5} {'inertia':>12} | {'faiss s':>8} "
          f"{'ratio':>6}")
    rows = []
    workdir = args.dir or tempfile.mkdtemp(prefix="whole-cpu-")
    for i, name in enumerate(args.cases.split(",")):
        n, d, k = CASES[name]
        path = os.path.join(workdir, f"{name}.npy")
        if not os.path.exists(path):
            np.save(path, np.random.default_rng(i).random((n, d), dtype=np.float32))
        for run_name, run in RUNS.items():
            o = ours(args, path, k, run)
            s = sklearn_run(args, path, k, run)
            f = faiss_run(args, path, k) if run else None
            ratio = s["wall_s"] / o["wall_s"]
            print(f"{name:4} {run_name:15} {o['wall_s']:11.3f} {o['fit_s']:10.3f} {o['iters']:5} "
                  f"{o['inertia']:12.6g} | {s['wall_s']:9.3f} {s['iters']:5} {s['inertia']:12.6g} | "
                  f"{f['wall_s'] if f else float('nan'):8.3f} {ratio:5.2f}x", flush=True)
            rows.append({"case": name, "run": run_name, "n": n, "d": d, "k": k,
                         "threads": args.threads, "simd": simd,
                         "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
                         "ours": o, "sklearn": s, "faiss": f})
    if args.json:
        with open(args.json, "w") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
