#!/usr/bin/env bash
# Whole CPU k-means jobs, ours against scikit-learn and faiss-cpu (bench/whole_cpu.py), at the
# CPU's own SIMD level and again with AVX2 kernels on both sides (ours: KMEANS_KNN_CPU_SIMD=avx2;
# OpenBLAS: OPENBLAS_CORETYPE=Haswell). Makes its own virtual environment in target/bench-venv.
#   bash bench/whole_cpu.sh [--cases A,B,C] [--reps N] [--threads T]   (extra args go to the script)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/bench-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q numpy scikit-learn threadpoolctl faiss-cpu
fi
cargo build -q --release -p kmeans-knn --bin kmeans-knn
out=target/whole-cpu
mkdir -p "$out"
"$venv/bin/python" bench/whole_cpu.py --bin target/release/kmeans-knn --dir "$out" \
  --json "$out/native.jsonl" "$@"
"$venv/bin/python" bench/whole_cpu.py --bin target/release/kmeans-knn --dir "$out" \
  --simd avx2 --openblas-coretype Haswell --json "$out/avx2.jsonl" "$@"
