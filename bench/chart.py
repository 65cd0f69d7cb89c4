"""Speed-up chart for docs/BENCHMARKS.md from the results.json that torch_baseline.py --out
writes on the GPU machine (gpu-bundle/run.sh puts it in $OUT).

usage: python3 bench/chart.py results.json docs/speedups.png   (needs matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


# The targets: speed-up over PyTorch, and time / floor (A-C 4×, D-E 1.5×).
SPEEDUP_TARGET = {"A": 10, "B": 10, "C": 10, "S": 4, "F": 3}
FLOOR_TARGET = {"A": 4, "B": 4, "C": 4, "D": 1.5, "E": 1.5}


def mark_targets(ax, bars, names, targets):
    """A short black dash over each bar at its target, if it has one."""
    for bar, name in zip(bars, names):
        if name in targets:
            x = bar.get_x()
            ax.plot([x, x + bar.get_width()], [targets[name]] * 2, color="black", lw=2)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        r = json.load(f)
    rows = [x for x in r["kmeans"] + r["knn"] if x.get("ours_ms")]
    names = [x["case"] for x in rows]
    speedup = [x["torch_ms"] / x["ours_ms"] for x in rows]
    # Times the floor for the k-means cases (the kNN cases have no floor in the table).
    vs_floor = [x["ours_ms"] / x["floor_ms"] if "floor_ms" in x else None for x in rows]

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    bars = a.bar(names, speedup, color=["#2b6cb0" if s >= 1 else "#c53030" for s in speedup])
    a.axhline(1, color="black", lw=0.8)
    a.set_yscale("log")
    a.set_ylabel("speed-up over PyTorch (×, log scale)")
    a.set_title("kmeans-knn vs PyTorch, same GPU, exact FP32")
    mark_targets(a, bars, names, SPEEDUP_TARGET)
    for bar, s in zip(bars, speedup):
        a.annotate(f"{s:.2g}×", (bar.get_x() + bar.get_width() / 2, s), ha="center",
                   va="bottom", fontsize=8)
    fl = [(n, v) for n, v in zip(names, vs_floor) if v is not None]
    bars = b.bar([n for n, _ in fl], [v for _, v in fl], color="#2f855a")
    b.axhline(1, color="black", lw=0.8)
    b.set_ylabel("time / hardware floor (lower is better)")
    b.set_title("k-means step vs max(FLOP floor, byte floor)")
    mark_targets(b, bars, [n for n, _ in fl], FLOOR_TARGET)
    for bar, (_, v) in zip(bars, fl):
        b.annotate(f"{v:.2g}", (bar.get_x() + bar.get_width() / 2, v), ha="center",
                   va="bottom", fontsize=8)
    fig.suptitle(f"{r.get('gpu', 'GPU')}: FP32 {r['fp32_flops'] / 1e12:.1f} TFLOP/s, "
                 f"copy {r['bandwidth'] / 1e12:.2f} TB/s measured by PyTorch on this GPU; "
                 "black dashes: the targets of the speed issue", fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main()
