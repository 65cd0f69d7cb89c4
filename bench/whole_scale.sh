#!/usr/bin/env bash
# Whole jobs past one GPU (issue #19): file in → result out, each a fresh process of the CLI,
# wall clock, on the same NPY files in one run:
#   k-means: k-means‖ then 20 Lloyd iterations (tol 0), labels written to .npy;
#   kNN: k = 100 nearest of 10^4 queries, indices written to .npy;
# each on one GPU with the rows resident (k-means: with the default precision, auto, and with
# FP32 only, `gpu:0 exact`), on the CPU, on one GPU streaming them within
# --gpu-memory, and on every GPU of the machine (when it has several). The last column says
# whether the output file is byte for byte the one-GPU resident run's.
#
#   bash bench/whole_scale.sh BIN [N] [D] [K] [BUDGET]   (defaults 4000000 128 256 512MiB)
#
# JOBS (default "kmeans knn"), INIT (default kmeans||; kmeans++ is the fit's own default) and
# REPS (default 1: every run repeated, each a fresh process) change what runs; DEVICES (default
# all of them) picks the runs by label, spaces as underscores: "gpu:0 cpu gpu:0_streamed".
# BIN is the kmeans-knn binary; python3 with numpy writes the uniform random inputs.
set -u
bin=${1:?usage: whole_scale.sh KMEANS_KNN_BIN [N] [D] [K] [BUDGET]}
n=${2:-4000000} d=${3:-128} k=${4:-256} budget=${5:-512MiB}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" "$n" "$d" <<'PY'
import sys, numpy as np
out, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(19)
np.save(f"{out}/x.npy", rng.random((n, d), dtype=np.float32))
np.save(f"{out}/q.npy", rng.random((10000, d), dtype=np.float32))
PY
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
runs=("gpu:0|--device gpu:0" "gpu:0 exact|--device gpu:0 --precision exact" "cpu|--device cpu" "gpu:0 streamed|--device gpu:0 --gpu-memory $budget")
[ "$gpus" -ge 2 ] && runs+=("gpu:all|--device gpu:all")
picked=()
for run in "${runs[@]}"; do
  label=${run%%|*}
  [ -z "${DEVICES:-}" ] && { picked+=("$run"); continue; }
  case " $DEVICES " in *" ${label// /_} "*) picked+=("$run") ;; esac
done
echo "$n × $d rows ($(du -h "$dir/x.npy" | cut -f1)), k-means k = $k (init ${INIT:-kmeans||}), kNN k = 100 of 10^4 queries; $(nproc) cores, RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-all}"
printf '%-7s %-16s %9s %9s  %-9s %s\n' job device "wall s" "json s" same device
for job in ${JOBS:-kmeans knn}; do
  for run in "${picked[@]}"; do
  for _ in $(seq "${REPS:-1}"); do
    label=${run%%|*}
    [ "$job" = knn ] && [ "$label" = "gpu:0 exact" ] && continue  # precision is k-means's
    read -r -a flags <<<"${run#*|}"
    out="$dir/$job-${label//[ :]/_}.npy"
    if [ "$job" = kmeans ]; then
      cmd=("$bin" kmeans "$dir/x.npy" --k "$k" --init "${INIT:-kmeans||}" --max-iter 20 --tol 0 --labels-out "$out")
    else
      cmd=("$bin" knn --train "$dir/x.npy" --query "$dir/q.npy" --k 100 --indices-out "$out")
    fi
    start=$(date +%s.%N)
    json=$("${cmd[@]}" "${flags[@]}" --json --quiet) || { echo "$job $label failed"; continue; }
    end=$(date +%s.%N)
    ref="$dir/$job-gpu_0.npy"
    same=$([ -f "$ref" ] && cmp -s "$out" "$ref" && echo yes || echo no)
    python3 -c 'import json, sys; j = json.loads(sys.argv[4]); print("%-7s %-16s %9.2f %9.2f  %-9s %s" % (sys.argv[1], sys.argv[2], float(sys.argv[3]), j["seconds"], sys.argv[5], j["device"]))' \
      "$job" "$label" "$(python3 -c "print($end - $start)")" "$json" "$same"
  done
  done
done
