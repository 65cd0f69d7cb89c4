#!/usr/bin/env bash
# Runs the kmeans-knn GPU bundle on a machine with an NVIDIA GPU (written by `cargo xtask gpu-bundle`).
#   bash run.sh [PART]     PART: all (the default), or one part, each within ten minutes on one
#                          H100 or 4 × H200 (a GPU machine's call may be limited to that):
#     tests      every test binary but the sweeps (GPU required), the PTX fallback, cold start,
#                driver entry points
#     sweeps     the test binaries that sweep shapes and paths against the CPU for minutes (knn,
#                lp, radius)
#     sanitize   compute-sanitizer memcheck + racecheck over the `sanitize_` tests (on one GPU
#                over ten minutes: run its halves, `memcheck` and `racecheck`, one at a time)
#     python     the Python tests (and the Dask tests with a worker per GPU, on two GPUs or more)
#     bench      gpu-bench, the PyTorch baseline, the Python benchmark (and the GPU-set and Dask
#                benchmarks on two GPUs or more)
#   Within a part: SANITIZE=0, PYTEST=0, BENCH=0, COLD_START=0, ENTRY_POINTS=0, DASK=0 skip pieces
#   (DASK_BENCH_ARGS: dask_bench.py's; GPUS_CASES: gpu-bench's cases over all GPUs, default
#   E,E4,F); TEST_THREADS: threads of each test binary (default 4).
# Results also go to $OUT when it is set (the device tool's output folder).
set -u
cd "$(dirname "$0")"
part=${1:-all}
case $part in
  all) ;;
  tests) SANITIZE=0 PYTEST=0 BENCH=0 SWEEPS=0 ;;
  sweeps) SANITIZE=0 PYTEST=0 BENCH=0 COLD_START=0 ENTRY_POINTS=0 SWEEPS=only ;;
  sanitize) TESTS=0 PYTEST=0 BENCH=0 COLD_START=0 ENTRY_POINTS=0 ;;
  memcheck | racecheck) TESTS=0 PYTEST=0 BENCH=0 COLD_START=0 ENTRY_POINTS=0 SANITIZE_TOOLS=$part ;;
  python) TESTS=0 SANITIZE=0 BENCH=0 COLD_START=0 ENTRY_POINTS=0 ;;
  bench) TESTS=0 SANITIZE=0 PYTEST=0 COLD_START=0 ENTRY_POINTS=0 ;;
  *) echo "run.sh: unknown part '$part' (all, tests, sweeps, sanitize, memcheck, racecheck, python or bench)" >&2; exit 2 ;;
esac
export KMEANS_KNN_REQUIRE_GPU=1
# The driver tests run the tool built with fault injection.
export KMEANS_KNN_BIN=$PWD/bin/kmeans-knn-faults
# The GPU machines have NCCL (system-wide and in PyTorch's packages): tests/nccl must load it.
export KMEANS_KNN_REQUIRE_NCCL=1
log_dir=${OUT:-.}
failed=()

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# compute-sanitizer memcheck and racecheck over the tests whose names start with `sanitize_`
# (every kernel on small shapes): every (tool, test binary) pair is its own process, all started
# now in the background so that they run beside the tests, each on a GPU of its own in turn
# where there are several; collected before the benchmarks.
gpu_count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
sanitizer_pids=()
if [ "${SANITIZE:-1}" = 1 ]; then
  runs=0
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    for t in tests/*; do
      "./$t" --list 2>/dev/null | grep -q '^sanitize_' || continue
      runs=$((runs + 1))
      pin=()
      [ "$gpu_count" -ge 2 ] && pin=(CUDA_VISIBLE_DEVICES=$((runs % gpu_count)))
      log="$log_dir/sanitize-$tool-$(basename "$t").log"
      # Racecheck loses track of launches that come from several host threads at once
      # ("Internal Sanitizer Error: failure to track a kernel launch"); blocking launches keep
      # the host threads concurrent while each launch completes before the next is tracked.
      blocking=$([ "$tool" = racecheck ] && echo 1 || echo 0)
      (env "${pin[@]}" CUDA_LAUNCH_BLOCKING=$blocking timeout "${SANITIZE_TIMEOUT:-540}" compute-sanitizer \
        --tool "$tool" --error-exitcode 99 --print-limit 20 "./$t" sanitize_ --test-threads=1 \
        >"$log" 2>&1; echo $? >"$log.rc") &
      sanitizer_pids+=($!)
    done
  done
fi

if [ "${TESTS:-1}" = 1 ]; then
  # Tests that read the source tree (modules `source_tree`) cannot run here: only the executables
  # travel. They run with `cargo test` where the sources are. The binaries that take minutes
  # (the emulator's, and the GPU-against-CPU sweeps) run beside the others.
  run_test() { # run_test BINARY: its last lines into its log, its exit status into LOG.rc
    local log="$log_dir/test-$(basename "$1").log"
    "./$1" --test-threads="${TEST_THREADS:-4}" --skip source_tree:: >"$log" 2>&1
    echo $? >"$log.rc"
  }
  # The binaries of this part: the sweeps alone (SWEEPS=only), all but them (SWEEPS=0), or all.
  binaries=()
  for t in tests/*; do
    case "${SWEEPS:-1}:$(basename "$t")" in
      only:knn | only:lp | only:radius | 1:*) binaries+=("$t") ;;
      0:knn | 0:lp | 0:radius | only:*) ;;
      *) binaries+=("$t") ;;
    esac
  done
  # Processes sharing one GPU take turns on it (time slices), and the sweeps wait on the GPU
  # thousands of times: with several GPUs each sweep gets one of its own (they build their GPU
  # sets on one ordinal); with one GPU they run one after another.
  test_pids=()
  sweep=0
  for t in "${binaries[@]}"; do
    case $(basename "$t") in
      knn | lp | radius)
        if [ "$gpu_count" -ge 2 ]; then
          sweep=$((sweep + 1))
          CUDA_VISIBLE_DEVICES=$((sweep % gpu_count)) run_test "$t" & test_pids+=($!)
        fi ;;
      kmeans | kernels_gpu-*) run_test "$t" & test_pids+=($!) ;;
    esac
  done
  if [ "$gpu_count" -lt 2 ]; then
    for t in "${binaries[@]}"; do
      case $(basename "$t") in knn | lp | radius) run_test "$t" ;; esac
    done &
    test_pids+=($!)
  fi
  for t in "${binaries[@]}"; do
    case $(basename "$t") in
      knn | lp | radius | kmeans | kernels_gpu-*) ;;
      *) run_test "$t" ;;
    esac
  done
  [ ${#test_pids[@]} -gt 0 ] && wait "${test_pids[@]}"
  for t in "${binaries[@]}"; do
    log="$log_dir/test-$(basename "$t").log"
    echo "=== test $(basename "$t") (exit $(cat "$log.rc"))"
    grep -E "FAILED|panicked|^test result" "$log" | tail -n 12
    [ "$(cat "$log.rc")" = 0 ] || failed+=("test $(basename "$t")")
  done

  # The same binary on a GPU it has no usable cubin for: the backend loads the PTX (JIT) instead,
  # when told to and when the driver rejects the cubin.
  [ "${SWEEPS:-1}" = only ] || for fallback in KMEANS_KNN_FORCE_PTX=1 KMEANS_KNN_FAULTS=wrong-cubin; do
    echo "=== test ptx_fallback with $fallback"
    env "$fallback" ./tests/ptx_fallback --test-threads=1 --nocapture 2>&1 | tail -n 25
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("test ptx_fallback ($fallback)")
  done
fi

if [ "${COLD_START:-1}" = 1 ]; then
  # A new machine or container: `info` and a first small fit, each a fresh process with an empty
  # CUDA JIT cache (a new CUDA_CACHE_PATH, or none at all), loading the cubin or the forced PTX.
  echo "=== cold start (seconds; each command from a fresh process and an empty JIT cache)"
  cold=$(mktemp -d)
  awk 'BEGIN { srand(1); for (i = 0; i < 20000; i++) { for (j = 0; j < 8; j++) printf "%s%.6f", (j ? "," : ""), rand(); print "" } }' >"$cold/points.csv"
  seconds() { # seconds COMMAND...: wall time of COMMAND, its stdout in $cold/stdout
    local start end
    start=$(date +%s.%N)
    "$@" >"$cold/stdout" 2>"$cold/stderr" || { cat "$cold/stderr" >&2; return 1; }
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
  }
  cold() { # cold FORCE CACHE COMMAND...: `seconds COMMAND` with KMEANS_KNN_FORCE_PTX=FORCE and a
    # new empty JIT cache (CACHE=empty) or none (CACHE=disabled)
    local vars=(KMEANS_KNN_FORCE_PTX="$1")
    if [ "$2" = empty ]; then vars+=(CUDA_CACHE_PATH="$(mktemp -d -p "$cold")"); else vars+=(CUDA_CACHE_DISABLE=1); fi
    shift 2
    seconds env "${vars[@]}" "$@"
  }
  printf '%-6s %-9s %7s %7s %7s  %s\n' image cache info fit total kernels | tee "$log_dir/cold-start.txt"
  for force in 0 1; do
    for cache in empty disabled; do
      t_info=$(cold $force $cache ./bin/kmeans-knn info --device gpu) || failed+=("cold-start info")
      kernels=$(sed -n 's/^  kernels *//p' "$cold/stdout")
      t_fit=$(cold $force $cache ./bin/kmeans-knn kmeans "$cold/points.csv" --k 8 --device gpu --quiet) || failed+=("cold-start fit")
      total=$(awk -v a="$t_info" -v b="$t_fit" 'BEGIN { printf "%.2f", a + b }')
      image=$([ $force = 1 ] && echo PTX || echo SASS)
      printf '%-6s %-9s %7s %7s %7s  %s\n' "$image" "$cache" "$t_info" "$t_fit" "$total" "$kernels" | tee -a "$log_dir/cold-start.txt"
    done
  done
  echo "(target: info + fit <= 1 s with the cubin and an empty cache)"
  rm -rf "$cold"
fi

if [ "${ENTRY_POINTS:-1}" = 1 ]; then
  # Every libcuda symbol our executables resolve must be in the library's list of entry points
  # (which `driver::check` looks up before the first call, and which all exist in CUDA 12.0).
  # Lookups made by NCCL's library name it as the binding file, and are counted apart. NVML
  # and NCCL also look up cuGetProcAddress and cuGetExportTable through dlsym, which LD_DEBUG
  # reports as ours (the binding file is libcuda itself); our code calls neither, so they are
  # listed apart too.
  echo "=== driver entry points resolved by the GPU tests"
  ld=$(mktemp -d)
  for t in kmeans knn faults concurrency; do
    # Their `sanitize_` tests launch every kernel on small shapes (the whole binaries take minutes).
    LD_DEBUG=bindings LD_DEBUG_OUTPUT="$ld/$t" "./tests/$t" sanitize_ --test-threads=1 >/dev/null 2>&1
  done
  LD_DEBUG=bindings LD_DEBUG_OUTPUT="$ld/info" ./bin/kmeans-knn info >/dev/null 2>&1
  ./bin/kmeans-knn info --json >"$ld/info.json"
  python3 - "$ld" <<'PY' || failed+=("driver entry points")
import glob, json, re, sys
d = sys.argv[1]
listed = {e["name"] for e in json.load(open(f"{d}/info.json"))["driver_entry_points"]}
foreign = {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable"}
used, by_libraries = set(), set()
for f in glob.glob(f"{d}/*.*"):
    for line in open(f, errors="replace"):
        m = re.search(r"binding file (\S+) \[\d+\] to \S*libcuda\.so\S* \[\d+\]: normal symbol `(cu\w+)'", line)
        if m:
            file, symbol = m.groups()
            (by_libraries if "nccl" in file or symbol in foreign else used).add(symbol)
print(f"{len(used)} libcuda symbols resolved by our executables, {len(listed)} listed")
print("resolved by NCCL or NVML (not checked):", " ".join(sorted(by_libraries)) or "none")
print("resolved:", " ".join(sorted(used)))
missing = sorted(used - listed)
if missing or not used:
    sys.exit(f"resolved but not listed: {missing}")
PY
fi


# The Python package, installed offline into a temporary folder.
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target "$site" python/*.whl || failed+=("python wheel install")
# dask, distributed and their dependencies, for kmeans_knn.dask (wheels made for CPython 3.12).
if [ -d python/wheels ]; then
  python3 -m pip install -q --no-index --no-deps --target "$site" python/wheels/*.whl || failed+=("dask wheels install")
else
  DASK=0
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

if [ "${PYTEST:-1}" = 1 ]; then
  echo "=== python tests (GPU required: GPU results must equal CPU results bit for bit)"
  PYTHONPATH="$site" KMEANS_KNN_CLI="$PWD/bin/kmeans-knn" python3 -m pytest -p no:cacheprovider \
    -rfEsxX python/tests >"$log_dir/pytest.txt" 2>&1
  status=$?
  tail -n 30 "$log_dir/pytest.txt"
  [ $status -eq 0 ] || failed+=("python tests")
fi

if [ "${PYTEST:-1}" = 1 ] && [ "${DASK:-1}" = 1 ] && [ "$gpus" -ge 2 ]; then
  echo "=== dask tests with one worker per GPU ($gpus GPUs): every fit and search equals the single-process CPU one"
  KMEANS_KNN_DASK_GPUS=1 PYTHONPATH="$site" python3 -m pytest -p no:cacheprovider -rfEsxX \
    python/tests/test_dask.py >"$log_dir/pytest-dask-gpus.txt" 2>&1
  status=$?
  tail -n 15 "$log_dir/pytest-dask-gpus.txt"
  [ $status -eq 0 ] || failed+=("dask tests on $gpus GPUs")
fi

if [ ${#sanitizer_pids[@]} -gt 0 ]; then
  echo "=== compute-sanitizer (waiting for ${#sanitizer_pids[@]} runs)"
  wait "${sanitizer_pids[@]}"
  for rc in "$log_dir"/sanitize-*.log.rc; do
    log=${rc%.rc}
    echo "--- $(basename "$log" .log) (exit $(cat "$rc"))"
    tail -n 3 "$log"
    [ "$(cat "$rc")" = 0 ] || failed+=("$(basename "$log" .log)")
  done
fi

if [ "${BENCH:-1}" = 1 ] && [ -x bin/gpu-bench ]; then
  echo "=== gpu-bench"
  ./bin/gpu-bench --json "$log_dir/gpu-bench.jsonl" ${BENCH_ARGS:---precision tf32} 2>&1 | tee "$log_dir/gpu-bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("gpu-bench")
  echo "=== PyTorch baseline (same iteration, exact FP32)"
  python3 torch_baseline.py --ours "$log_dir/gpu-bench.jsonl" --out "$log_dir/results.json" ${TORCH_ARGS:-} 2>&1 | tee "$log_dir/torch-baseline.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("torch baseline")
  echo "=== Python estimators: overhead over the engine, against PyTorch (from NumPy to NumPy)"
  OUT="$log_dir" PYTHONPATH="$site" python3 python/bench.py --device cuda ${PY_BENCH_ARGS:-} 2>&1 | tee "$log_dir/python-bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("python bench")
  if [ "$gpus" -ge 2 ]; then
    echo "=== several GPUs in one process: a Lloyd step and a kNN search, the set against one GPU"
    ./bin/gpu-bench --gpus gpu:all --cases ${GPUS_CASES:-E,E4,F} --reps 3 --json "$log_dir/gpu-set.jsonl" 2>&1 | tee "$log_dir/gpu-set.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("gpu-bench --gpus")
  fi
  if [ "${DASK:-1}" = 1 ] && [ "$gpus" -ge 2 ]; then
    echo "=== kmeans_knn.dask: a Lloyd step's overhead, all GPUs as workers, half of them, ..., one"
    counts=$gpus; w=$gpus; while [ "$w" -gt 1 ]; do w=$((w / 2)); counts="$counts,$w"; done
    OUT="$log_dir" PYTHONPATH="$site" python3 python/dask_bench.py --device cuda --workers "$counts" ${DASK_BENCH_ARGS:-} 2>&1 | tee "$log_dir/dask-bench.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("dask bench")
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "ALL PASSED"
