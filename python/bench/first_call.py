"""A Python process's first moments with kmeans_knn, each from a fresh interpreter.

- the import: `import kmeans_knn` against scikit-learn's own `KMeans` and `NearestNeighbors`
  (the package imports scikit-learn, so the difference is ours);
- `warmup(device)`: the driver's start, done ahead of time;
- the first `KMeans.fit` and the first `kneighbors` on an index against later ones in the same
  process (the first pays the driver's start unless `warmup` ran).

Median and minimum over --reps fresh processes; one JSON line per figure (with --out, also to
that file).

    python3 python/bench/first_call.py --device cuda --reps 5
"""

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
clock = time.perf_counter
what, device = sys.argv[1], sys.argv[2]
t0 = clock()
if what == "import_sklearn":
    from sklearn.cluster import KMeans
    from sklearn.neighbors import NearestNeighbors
    print(json.dumps({"seconds": clock() - t0}))
    sys.exit()
import kmeans_knn
t_import = clock() - t0
if what == "import":
    print(json.dumps({"seconds": t_import}))
    sys.exit()
import numpy as np
rng = np.random.default_rng(0)
X = rng.random((20_000, 8), dtype=np.float32)
Q = rng.random((1_200, 8), dtype=np.float32)
out = {}
if what == "warmup":
    t = clock(); kmeans_knn.warmup(device); out["warmup"] = clock() - t
fits = []
for _ in range(3):
    t = clock(); km = kmeans_knn.KMeans(n_clusters=8, random_state=0, device=device).fit(X)
    fits.append(clock() - t)
nn = kmeans_knn.NearestNeighbors(n_neighbors=25, device=device).fit(X)
searches = []
for _ in range(3):
    t = clock(); nn.kneighbors(Q); searches.append(clock() - t)
out.update(first_fit=fits[0], later_fit=min(fits[1:]), first_search=searches[0],
           later_search=min(searches[1:]), device_=km.device_)
print(json.dumps(out))
"""


def child(what, device):
    done = subprocess.run([sys.executable, "-c", CHILD, what, device], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for what in ("import_sklearn", "import", "first", "warmup"):
        runs = [child(what, a.device) for _ in range(a.reps)]
        for key in sorted(k for k in runs[0] if k != "device_"):
            values = [r[key] for r in runs]
            name = what if key == "seconds" else f"{what}.{key}"
            rows.append({"figure": name, "device": a.device, "median_s": round(statistics.median(values), 4),
                         "min_s": round(min(values), 4), "reps": a.reps, "backend": runs[0].get("device_")})
    for row in rows:
        print(json.dumps(row))
    if a.out:
        with open(a.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
