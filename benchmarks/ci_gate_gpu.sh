#!/usr/bin/env bash
# The baseline-free gates on a healthy GPU machine, N runs each (issue 20's target: 10 of 10):
# python -m bandwidth.ceiling --expect-links on the GPUs, and measure.py --min-percent-of-ceiling
# (on one GPU every GPU row is a one-device row, busbw 0 by definition, so the share of the ceiling
# is gated on 2 CPU devices of the same machine; the GPU row shows that and the busy-GPU check).
# P: the share of the ceiling gated, default 15 (what the device mode on 2 CPU devices reaches of the
# settled host-memory copy ceiling of the 16-core H100 host is in BENCHMARKS.md).
# Usage: LOGS=folder bash benchmarks/ci_gate_gpu.sh [N] [P]
set -u
N=${1:-10}
P=${2:-15}
OUT=${LOGS:-/tmp/ci_gate_logs}; mkdir -p "$OUT"
pass_links=0; pass_ceiling=0
for i in $(seq 1 "$N"); do
  python3 -m bandwidth.ceiling --expect-links --skip nccl,latency,p2p-disabled,cpu \
    --junit "$OUT/links-$i.xml" > "$OUT/links-$i.txt" 2>&1 && pass_links=$((pass_links + 1))
  tail -n 8 "$OUT/links-$i.txt" | grep -E "GPU|PASSED|FAILED"
done
for i in $(seq 1 "$N"); do
  python3 bandwidth/measure.py --kv-store device --cpus 2 --network resnet --num-layers 50 \
    --num-batches 10 --min-percent-of-ceiling "$P" > "$OUT/ceiling-$i.txt" 2>&1 \
    && pass_ceiling=$((pass_ceiling + 1))
  grep -E "^device|PASSED|FAILED" "$OUT/ceiling-$i.txt" | tail -n 2
done
python3 bandwidth/measure.py --kv-store device --gpus 0 --network resnet --num-layers 50 \
  --min-percent-of-ceiling "$P" --junit "$OUT/gpu-row.xml" > "$OUT/gpu-row.txt" 2>&1
echo "gpu row exit $?"; grep -E "busy|note|PASSED|FAILED|one device" "$OUT/gpu-row.txt"
echo "expect-links passed $pass_links of $N; min-percent-of-ceiling $P passed $pass_ceiling of $N"
