"""Stall samples and executed instructions of one kernel's SASS, split at its block barriers.

A kernel of phases separated by `BAR.SYNC` (the small step: staging, scores, bound tests, sort,
scans, sums) is latency-bound where its phases wait; this shows which. With `--by-count` the
split is instead wherever the execution count changes, so each run of straight-line code is a
region (a sweep's per-tile code runs blocks × warps × tiles times, its per-step code more), with
the region's top stall reasons. Input: the source page of an `ncu --set full` report as CSV:

    ncu --set full -k regex:NAME --launch-skip S -c 1 -o REPORT COMMAND...
    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 ncu_phases.py [--by-count] sass.csv
"""

import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main(path, by_count=False):
    rows = list(csv.reader(open(path, errors="replace")))
    head_at = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
    head = rows[head_at]

    def column(name):
        return next((i for i, h in enumerate(head) if name.lower() in h.lower()), None)

    source = column("Source")
    stalls = column("Warp Stall Sampling (All")
    executed = column("Instructions Executed")
    reasons = [
        (i, h[len("stall_") :])
        for i, h in enumerate(head)
        if h.startswith("stall_") and "Not Issued" not in h
    ]

    def fresh():
        return {"sass": [], "stall": 0.0, "executed": 0.0, "count": None, "reasons": {}}

    phases, phase = [], fresh()
    for row in rows[head_at + 1 :]:
        if len(row) <= source:
            continue
        text = row[source].strip()
        stall = number(row[stalls]) if stalls is not None else 0.0
        count = number(row[executed]) if executed is not None else 0.0
        if by_count and phase["sass"] and count != phase["count"]:
            phases.append(phase)
            phase = fresh()
        phase["count"] = count
        phase["sass"].append((stall, text[:60]))
        phase["stall"] += stall
        phase["executed"] += count
        for i, name in reasons:
            phase["reasons"][name] = phase["reasons"].get(name, 0.0) + number(row[i])
        if not by_count and ("BAR.SYNC" in text or "BAR.RED" in text):
            phases.append(phase)
            phase = fresh()
    phases.append(phase)
    total_stall = max(sum(p["stall"] for p in phases), 1.0)
    total_executed = max(sum(p["executed"] for p in phases), 1.0)
    print(f"stall samples {total_stall:.0f}, warp instructions executed {total_executed:.0f}")
    line = 0
    for k, p in enumerate(phases):
        first, line = line, line + len(p["sass"])
        if not p["sass"] or (by_count and p["stall"] < 0.004 * total_stall):
            continue
        label = f"SASS {first}-{line - 1}, run {p['count']:.0f} times" if by_count else f"phase {k}"
        print(
            f"{label}: {len(p['sass'])} SASS, stalls {100 * p['stall'] / total_stall:5.1f} %, "
            f"instructions {100 * p['executed'] / total_executed:5.1f} %"
        )
        top = sorted(p["reasons"].items(), key=lambda r: -r[1])[:4]
        if p["stall"] > 0 and top:
            print("      reasons: " + ", ".join(f"{n} {100 * v / p['stall']:.0f} %" for n, v in top))
        for stall, text in sorted(p["sass"], reverse=True)[:4]:
            print(f"      {100 * stall / total_stall:5.1f} %  {text}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[-1], by_count="--by-count" in args)
