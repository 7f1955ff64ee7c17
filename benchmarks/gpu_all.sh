#!/usr/bin/env bash
# Every GPU test and benchmark in one call (for the GPU machine). Text goes to $OUT/gpu.log, figures
# to $OUT/*.json (few files: the device tool brings back at most 8).
#   OUT=/tmp/results bash benchmarks/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log="$OUT/gpu.log"
{
  echo "== commit ${COMMIT:-$(git rev-parse --verify -q HEAD || echo unknown)}, $(date -u +%FT%TZ)"
  nvidia-smi; nvidia-smi topo -m
  echo "== tests"
  python3 -m pytest -q -p no:cacheprovider tests
  for kv in device nccl local; do
    echo "== measure.py --kv-store $kv, resnet-200"
    python3 bandwidth/measure.py --kv-store "$kv" --network resnet --num-layers 200 \
      --num-batches 10 --json "$OUT/measure-$kv.json"
  done
  echo "== python -m bandwidth.ceiling"
  python3 -m bandwidth.ceiling
  echo "== benchmarks/single_host.py"
  python3 benchmarks/single_host.py --out "$OUT/single_host.json"
} 2>&1 | tee "$log"
