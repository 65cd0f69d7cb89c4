"""Where a kNN call's time goes: a CUPTI timeline (through torch.profiler) of `kneighbors`
calls on the GPU, per call split into GPU busy time (kernels and copies, their union) and the
gaps between them, with the kernels that took longest — and, over many calls, whether the slow
calls were slow on the GPU or in the gaps (the host's part of the call).

usage: python3 timeline.py [--case S2048] [--calls 30] [--threads N] [--out FILE]

The case's shape is BENCHMARKS.md's (S: 1,200 queries against 32,768 × 256; F: 10⁴ × 10⁶ × 128),
uniform [0, 1) float32, on an index fitted once with device="cuda", `n_jobs` = --threads.
One JSON line per call goes to --out (default $OUT/timeline-<case>-t<threads>.jsonl when OUT is
set); a summary is printed.
"""

import argparse
import json
import os
import sys
import time

# The cases' shapes are torch_baseline.py's: in bench/ in the repository, in the bundle's top
# folder on the GPU machine.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_HERE, ".."), os.path.join(_HERE, "..", "..", "bench")]
from torch_baseline import KNN_CASES as CASES  # noqa: E402

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def union_us(spans):
    """Total length of the union of (start, end) spans."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def calls_of(trace):
    """Per call: its wall span (the `call` range) and the GPU activities that began in it."""
    events = trace["traceEvents"]
    ranges = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "call" and "dur" in e
    )
    gpu = [e for e in events if e.get("cat") in GPU_CATEGORIES and "dur" in e]
    out = []
    for start, end in ranges:
        inside = [e for e in gpu if start <= e["ts"] < end]
        out.append((start, end, inside))
    return out


def summarise(start, end, inside):
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in inside]
    busy = union_us(spans)
    kernels = {}
    for e in inside:
        key = e["name"] if e["cat"] == "kernel" else e["cat"] + ":" + e["name"]
        kernels[key] = kernels.get(key, 0.0) + e["dur"]
    ordered = sorted(spans)
    gaps = [b[0] - a[1] for a, b in zip(ordered, ordered[1:]) if b[0] > a[1]]
    first = ordered[0][0] - start if ordered else None
    last = end - max(e for _, e in ordered) if ordered else None
    return {
        "wall_us": end - start,
        "gpu_busy_us": busy,
        "gpu_span_us": (max(e for _, e in ordered) - ordered[0][0]) if ordered else 0.0,
        "before_first_us": first,
        "after_last_us": last,
        "largest_gap_us": max(gaps, default=0.0),
        "gaps_us": sum(gaps),
        "activities": len(inside),
        "top": sorted(kernels.items(), key=lambda kv: -kv[1])[:6],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--case", default="S2048", choices=sorted(CASES))
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out")
    args = ap.parse_args()

    import numpy as np
    import torch
    from kmeans_knn import NearestNeighbors

    m, n, d, k = CASES[args.case]
    rng = np.random.default_rng(0)
    x = rng.random((n, d), dtype=np.float32)
    q = rng.random((m, d), dtype=np.float32)
    torch.cuda.init()  # CUPTI sees the process's kernels once torch's profiler owns it
    nn = NearestNeighbors(n_neighbors=k, device="cuda", n_jobs=args.threads).fit(x)
    for _ in range(3):
        nn.kneighbors(q)
    walls = []
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.calls):
            with torch.profiler.record_function("call"):
                t = time.perf_counter()
                nn.kneighbors(q)
                walls.append((time.perf_counter() - t) * 1e3)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"trace-{os.getpid()}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.remove(path)

    rows = [summarise(*c) for c in calls_of(trace)]
    out = args.out or (
        os.path.join(os.environ["OUT"], f"timeline-{args.case}-t{args.threads}.jsonl")
        if os.environ.get("OUT") else None
    )
    if out:
        with open(out, "w") as f:
            for i, r in enumerate(rows):
                f.write(json.dumps({"case": args.case, "threads": args.threads,
                                    "cores": os.cpu_count(), "call": i, **r}) + "\n")
    print(f"{args.case}: {m} × {n} × {d}, k = {k}, n_jobs {args.threads} of {os.cpu_count()} "
          f"cores, {len(rows)} calls profiled (wall ms median {sorted(walls)[len(walls) // 2]:.3f})")
    print("call  wall_ms  gpu_busy  gpu_span  before_1st  after_last  gaps  largest_gap")
    for i, r in enumerate(rows):
        print(f"{i:4d} {r['wall_us'] / 1e3:8.3f} {r['gpu_busy_us'] / 1e3:9.3f} "
              f"{r['gpu_span_us'] / 1e3:9.3f} {(r['before_first_us'] or 0) / 1e3:11.3f} "
              f"{(r['after_last_us'] or 0) / 1e3:11.3f} {r['gaps_us'] / 1e3:5.3f} "
              f"{r['largest_gap_us'] / 1e3:12.3f}")
    fastest = min(rows, key=lambda r: r["wall_us"]) if rows else None
    slowest = max(rows, key=lambda r: r["wall_us"]) if rows else None
    for name, r in (("fastest", fastest), ("slowest", slowest)):
        if r:
            print(f"{name} call's GPU time by activity (µs):")
            for key, us in r["top"]:
                print(f"  {us:9.1f}  {key[:100]}")


if __name__ == "__main__":
    main()
