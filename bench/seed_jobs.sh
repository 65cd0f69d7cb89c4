#!/usr/bin/env bash
# The seeds' own jobs as a user runs them (issue #17): file in → result out, each a fresh process
# of the CLI with the default init, on the GPU and on the CPU, median wall clock of REPS runs.
#   seed 000: 5 × 5 × 3 patches of a 256 × 256 photo (63,504 × 75), k = 80 → the grid of centroids;
#   seed 003: `segment` of a 512 × 512 photo, k = 255 (L1) → the recoloured photo;
#   10^6 × 9 uniform rows (colour-quantisation sized), k = 16 → labels in .npy;
#   seed 004: the 25 nearest of 1,200 queries among 32,768 × 256 training rows → indices in .npy.
# The photo is the built-in sample (`kmeans-knn demo` writes it), resized with Pillow. The last
# column says whether the CPU's output file is byte for byte the GPU's. `auto` is the default
# device, which puts jobs too small to repay the GPU driver's start on the CPU (its row names the
# backend it took).
#
#   bash bench/seed_jobs.sh BIN [REPS]   (default 3; python3 with numpy, and Pillow to resize)
set -u
bin=$(realpath "${1:?usage: seed_jobs.sh KMEANS_KNN_BIN [REPS]}")
reps=${2:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$dir" && "$bin" demo --quiet > /dev/null) || { echo "kmeans-knn demo failed"; exit 1; }
photo=$(find "$dir" -name 'chelsea.png' | head -1)
python3 - "$dir" "$photo" <<'PY' || exit 1
import shutil, sys, numpy as np
out, photo = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(17)
np.save(f"{out}/x1m9.npy", rng.random((1_000_000, 9), dtype=np.float32))
np.save(f"{out}/train.npy", rng.random((32_768, 256), dtype=np.float32))
np.save(f"{out}/query.npy", rng.random((1_200, 256), dtype=np.float32))
try:
    from PIL import Image
except ImportError:
    print("no Pillow: the photo jobs use the sample photo at its own size (451 × 300)")
    for side in (256, 512):
        shutil.copy(photo, f"{out}/photo{side}.png")
    sys.exit(0)
img = Image.open(photo).convert("RGB")
for side in (256, 512):
    img.resize((side, side), Image.LANCZOS).save(f"{out}/photo{side}.png")
PY
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
printf '%-24s %-6s %9s %9s  %-5s %s\n' job device "wall s" "json s" same "reps (wall s)"
for job in patches segment quantise knn; do
  for device in gpu cpu auto; do
    out="$dir/$job-$device"
    case $job in
      patches) out+=.png; cmd=("$bin" patches "$dir/photo256.png" --patch 5 --k 80 -o "$out") ;;
      segment) out+=.png; cmd=("$bin" segment "$dir/photo512.png" --k 255 -o "$out") ;;
      quantise) out+=.npy; cmd=("$bin" kmeans "$dir/x1m9.npy" --k 16 --labels-out "$out") ;;
      knn) out+=.npy
        cmd=("$bin" knn --train "$dir/train.npy" --query "$dir/query.npy" --k 25 --indices-out "$out") ;;
    esac
    walls=() jsons=()
    for _ in $(seq "$reps"); do
      start=$(date +%s.%N)
      json=$("${cmd[@]}" --device "$device" --json --quiet) || { echo "$job $device failed"; continue 2; }
      end=$(date +%s.%N)
      walls+=("$(python3 -c "print(round($end - $start, 3))")")
      jsons+=("$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["seconds"])' "$json")")
    done
    ref=${out/-$device/-gpu} same=- took=
    [ "$device" != gpu ] && [ -f "$ref" ] && same=$(cmp -s "$out" "$ref" && echo yes || echo no)
    [ "$device" = auto ] && took="→ $(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["device"].split()[0])' "$json")"
    printf '%-24s %-6s %9.3f %9.3f  %-5s %s %s\n' "$job" "$device" "$(median "${walls[@]}")" \
      "$(median "${jsons[@]}")" "$same" "${walls[*]}" "$took"
  done
done
