"""Stall samples and executed instructions of one kernel's SASS, split at its block barriers.

A kernel of phases separated by `BAR.SYNC` (the small step: staging, scores, bound tests, sort,
scans, sums) is latency-bound where its phases wait; this shows which. Input: the source page
of an `ncu --set full` report as CSV:

    ncu --set full -k regex:NAME --launch-skip S -c 1 -o REPORT COMMAND...
    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 ncu_phases.py sass.csv
"""

import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main(path):
    rows = list(csv.reader(open(path, errors="replace")))
    head_at = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
    head = rows[head_at]

    def column(name):
        return next((i for i, h in enumerate(head) if name.lower() in h.lower()), None)

    source = column("Source")
    stalls = column("Warp Stall Sampling (All")
    executed = column("Instructions Executed")
    phases, phase = [], {"sass": [], "stall": 0.0, "executed": 0.0}
    for row in rows[head_at + 1 :]:
        if len(row) <= source:
            continue
        text = row[source].strip()
        stall = number(row[stalls]) if stalls is not None else 0.0
        phase["sass"].append((stall, text[:60]))
        phase["stall"] += stall
        phase["executed"] += number(row[executed]) if executed is not None else 0.0
        if "BAR.SYNC" in text or "BAR.RED" in text:
            phases.append(phase)
            phase = {"sass": [], "stall": 0.0, "executed": 0.0}
    phases.append(phase)
    total_stall = max(sum(p["stall"] for p in phases), 1.0)
    total_executed = max(sum(p["executed"] for p in phases), 1.0)
    print(f"stall samples {total_stall:.0f}, warp instructions executed {total_executed:.0f}")
    for k, p in enumerate(phases):
        if not p["sass"]:
            continue
        print(
            f"phase {k}: {len(p['sass'])} SASS, stalls {100 * p['stall'] / total_stall:5.1f} %, "
            f"instructions {100 * p['executed'] / total_executed:5.1f} %"
        )
        for stall, text in sorted(p["sass"], reverse=True)[:4]:
            print(f"      {100 * stall / total_stall:5.1f} %  {text}")


if __name__ == "__main__":
    main(sys.argv[1])
