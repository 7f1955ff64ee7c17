#!/usr/bin/env bash
# Every GPU test and benchmark in one call (for the GPU machine). Text goes to $OUT/gpu.log, figures
# to a few files under $OUT (the device tool brings back at most 8).
#   OUT=/tmp/results COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R200=(--network resnet --num-layers 200 --num-batches 10)
log="$OUT/gpu.log"
{
  echo "== commit ${COMMIT:-$(git rev-parse --verify -q HEAD || echo unknown)}, $(date -u +%FT%TZ)"
  nvidia-smi; nvidia-smi topo -m; mpirun --version 2>&1 | head -1
  echo "== tests (CPU-device tests in parallel, then the GPU tests one by one)"
  python3 -m pytest -q -p no:cacheprovider -m "not gpu" -n 8 tests
  python3 -m pytest -q -p no:cacheprovider -m gpu tests
  echo "== python -m bandwidth.ceiling"
  python3 -m bandwidth.ceiling -b 1M -e 1G -f 2 --json "$OUT/ceilings.json"
  echo "== measure.py --kv-store device (MXNet's lines)"
  python3 bandwidth/measure.py --kv-store device "${R200[@]}"
  echo "== sweep of the single-host modes, with a plot"
  python3 bandwidth/measure.py --kv-store device,nccl,local "${R200[@]}" \
    --json "$OUT/sweep.json" --plot "$OUT/sweep.png"
  echo "== distributed modes, one host acting as worker and servers"
  for servers in 1 4; do
    python3 launch.py -n 1 -s "$servers" python3 bandwidth/measure.py --kv-store dist_sync_device \
      --gpus 0,1 "${R200[@]}" --json "$OUT/dist_sync_device_s$servers.json"
  done
  python3 launch.py -n 1 -s 0 python3 bandwidth/measure.py --kv-store dist_nccl --gpus 0,1 \
    "${R200[@]}" --json "$OUT/dist_nccl.json"
  echo "== benchmarks/single_host.py"
  python3 benchmarks/single_host.py --rounds 3 --out "$OUT/single_host.json"
  echo "== benchmarks/reference_check.py (the ceiling's small-message figures against C)"
  python3 benchmarks/reference_check.py --rounds 3 --json "$OUT/reference_check.json"
  echo "== probe: pageable host->device copies and the CPU add rate, several ways"
  python3 benchmarks/probes/ceiling_methods.py --parts cpu,pageable
} 2>&1 | tee "$log"
