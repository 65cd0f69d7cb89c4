#!/usr/bin/env bash
# A GPU host as a user meets it, from the GPU bundle: the kNN sweep with every path and
# PyTorch beside it, at 16 host threads and at all of them; `Auto`'s choice in fresh processes;
# the seeds' jobs as fresh processes; the cold start; Python's first moments. Every row names the
# host's cores and the rayon threads. Results go to OUT (default ./host-sweep).
#
#   bash bench/host_sweep.sh gpu-bundle [OUT]
#   CASES=S1,S,S100,S512,S1024,S2048,F REPS=30 THREADS="16 all" AUTO_RUNS=10
#   AUTO_CASES=S1,S,S100,S512,S1024,S2048 SKIP=seed,cold,python (the defaults but SKIP; "all":
#   every core)
set -u
bundle=$(realpath "${1:?usage: host_sweep.sh GPU_BUNDLE [OUT]}")
out=$(mkdir -p "${2:-host-sweep}" && realpath "${2:-host-sweep}")
cases=${CASES:-S1,S,S100,S512,S1024,S2048,F}
reps=${REPS:-30}
skip=",${SKIP:-},"
cores=$(nproc)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
bench="$bundle/bin/gpu-bench"
echo "host: $cores cores, $gpus GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
# Each process measures from an empty cache unless a step says otherwise.
export KMEANS_KNN_CACHE_DIR=off

threads_list=${THREADS:-16 all}
for threads in ${threads_list//all/$cores}; do
  echo "=== kNN sweep, every path, RAYON_NUM_THREADS=$threads of $cores cores, CUDA_VISIBLE_DEVICES=0"
  for pass in 1 2; do
    CUDA_VISIBLE_DEVICES=0 RAYON_NUM_THREADS=$threads "$bench" --cases "$cases" --reps "$reps" \
      --all-paths --json "$out/knn-paths-t$threads-$pass.jsonl" > "$out/knn-paths-t$threads-$pass.txt" 2>&1
    grep '"path":"auto"' "$out/knn-paths-t$threads-$pass.jsonl" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(r.get("case"), "auto took", r.get("auto_took"), "median_ms", r.get("median_ms"),
          "min_ms", r.get("min_ms"), "over best", r.get("auto_over_best_median"))'
  done
done

last=$threads
echo "=== PyTorch on the same cases (on device, and host to host), against Auto at $last threads"
grep -h '"path":"auto"' "$out/knn-paths-t$last-1.jsonl" > "$out/auto-t$last.jsonl"
CUDA_VISIBLE_DEVICES=0 python3 "$bundle/torch_baseline.py" --cases "$cases" --reps "$reps" \
  --ours "$out/auto-t$last.jsonl" --out "$out/torch.json" 2>&1 | tail -n 12

auto_cases=${AUTO_CASES:-S1,S,S100,S512,S1024,S2048}
echo "=== Auto's choice in ${AUTO_RUNS:-10} fresh processes (cache off), $auto_cases, $cores threads"
for i in $(seq "${AUTO_RUNS:-10}"); do
  CUDA_VISIBLE_DEVICES=0 "$bench" --cases "$auto_cases" --reps 5 --all-paths 2>/dev/null |
    grep '"path":"auto"' | python3 -c '
import json, sys
print(" ".join("%s:%s" % (r.get("case"), r.get("auto_took")) for r in map(json.loads, sys.stdin)))'
done | sort | uniq -c | tee "$out/auto-choices.txt"

if [[ $skip != *,seed,* ]]; then
  echo "=== the seeds' jobs, fresh processes (wall s), $cores threads, every GPU visible"
  # The cache on: auto reads the start cost the earlier processes measured, as a user's would.
  KMEANS_KNN_CACHE_DIR="$out/cache" bash "$bundle/seed_jobs.sh" "$bundle/bin/kmeans-knn" 3 | tee "$out/seed-jobs.txt"
fi

if [[ $skip != *,cold,* ]]; then
  echo "=== cold start: info + first fit, fresh processes, empty JIT cache, --device gpu ($gpus GPUs)"
  cold=$(mktemp -d)
  awk 'BEGIN { srand(1); for (i = 0; i < 20000; i++) { for (j = 0; j < 8; j++) printf "%s%.6f", (j ? "," : ""), rand(); print "" } }' >"$cold/points.csv"
  wall() { python3 -c 'import subprocess, sys, time
t = time.perf_counter(); r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(f"{time.perf_counter() - t:.3f}" if r.returncode == 0 else "failed")' "$@"; }
  for i in 1 2 3; do
    info=$(CUDA_CACHE_PATH="$(mktemp -d -p "$cold")" wall "$bundle/bin/kmeans-knn" info --device gpu)
    fit=$(CUDA_CACHE_PATH="$(mktemp -d -p "$cold")" wall "$bundle/bin/kmeans-knn" kmeans "$cold/points.csv" --k 8 --device gpu --quiet --labels-out "$cold/l.npy")
    echo "info $info  fit $fit  total $(python3 -c "print(f'{$info + $fit:.3f}')")"
  done | tee "$out/cold-start.txt"
  rm -rf "$cold"
fi

if [[ $skip != *,python,* ]]; then
  echo "=== Python: import, warmup, first and later calls (fresh interpreters)"
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --target "$site" "$bundle"/python/*.whl
  PYTHONPATH="$site" python3 "$(dirname "$0")/../python/bench/first_call.py" --device auto --reps 5 \
    --out "$out/first-call.jsonl"
fi
