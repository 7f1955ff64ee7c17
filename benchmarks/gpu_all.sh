#!/usr/bin/env bash
# Every GPU test and benchmark in one call (for the GPU machine, any GPU count). Text goes to
# $OUT/gpu.log, figures to a few files under $OUT (the device tool brings back at most 8).
#   OUT=/tmp/results COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_all.sh
# The reference tools (nccl-tests, p2pBandwidthLatencyTest) are built from PEERS_SRC: a copy of
# shared/peers (default: ./peers, else ../shared/peers), since the device tool carries no shared/.
# CPU_TESTS=1 also runs the CPU-device tests (CI runs them; they are not needed for the figures).
# PARTS picks what runs (default "tests bench extra"): on several GPUs the whole script can take
# longer than one 10-minute device call, so it can be split, e.g. PARTS="tests bench", then
# PARTS=extra on the same machine. BENCH_ARGS adds options of gpu_bench.py (e.g. "--max-mb 2000").
# PARTS=real (two or more GPUs; not in the default): benchmarks/real_step.py's real DDP and FSDP2
# steps of GPT-2 and ResNet-50 against --framework torch with and without --host-ms, over each
# NCCL transport in REAL_TRANSPORTS (default: NCCL's choice only; "p2p shm" adds
# NCCL_P2P_DISABLE=1 and then NCCL_SHM_DISABLE=1 too), about 2.5 minutes a transport.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PEERS_SRC=${PEERS_SRC:-$PWD/peers}
[ -f "$PEERS_SRC/build.sh" ] || PEERS_SRC=$PWD/../shared/peers
GPUS=$(nvidia-smi -L | wc -l)
PARTS=${PARTS:-tests bench extra}
part() { [[ " $PARTS " == *" $1 "* ]]; }
R200=(--network resnet --num-layers 200 --num-batches 10)
log="$OUT/gpu.log"
{
  echo "== commit ${COMMIT:-$(git rev-parse --verify -q HEAD || echo unknown)}, $(date -u +%FT%TZ), $GPUS GPU(s)"
  nvidia-smi; nvidia-smi topo -m
  echo "== building the reference tools from $PEERS_SRC (in the background) and the GPU tests"
  [ -f /tmp/peers/env.sh ] || (PEERS_BIN=/tmp/peers bash "$PEERS_SRC/build.sh" > "$OUT/build.log" 2>&1; echo "build exit $?" >> "$OUT/build.log") &
  build=$!
  if [ "${CPU_TESTS:-0}" = 1 ]; then
    python3 -m pytest -q -p no:cacheprovider -m "not gpu" -n 8 tests
  fi
  part tests && python3 -m pytest -q -p no:cacheprovider -m gpu tests
  wait "$build"; [ -f "$OUT/build.log" ] && tail -3 "$OUT/build.log"
  [ -f /tmp/peers/env.sh ] && source /tmp/peers/env.sh
  if part bench; then
    echo "== benchmarks/gpu_bench.py (5 runs of each configuration, against the reference tools)"
    python3 benchmarks/gpu_bench.py --rounds 5 --peers /tmp/peers --json "$OUT/gpu_bench.json" \
      --log-tools "$OUT/tools.log" ${BENCH_ARGS:-}
  fi
  if part bench; then
    echo "== benchmarks/gpu_step_ms.py (forward/backward ms for network_impact.py --compute-ms)"
    python3 benchmarks/gpu_step_ms.py --dtype float32 --json "$OUT/gpu_step_ms.json"
    echo "== --compute flops on one GPU: the products' rate against a large matmul's (target 70 %)"
    for dtype in float32 bfloat16; do
      python3 bandwidth/measure.py --kv-store device --gpus 0,0 --network resnet --num-layers 50 \
        --compute flops --batch-size 32 --dtype "$dtype" --num-batches 10 --no-reference
    done
    echo "== overlap on one GPU: backward, compute alone >= 2 x the exchange alone (issue 26)"
    for launch in auto graph; do
      python3 bandwidth/measure.py --kv-store device --gpus 0,0 --schedule backward --network resnet \
        --num-layers 50 --compute flops --batch-size 32 --num-batches 30 --launch "$launch" \
        --no-reference
    done
    for mode in device local; do
      python3 bandwidth/measure.py --kv-store "$mode" --gpus 0,0 --schedule backward "${R200[@]}" \
        --compute-ms 10,20 --no-reference --json "$OUT/overlap_$mode.json"
    done
    echo "== scheduled steps: a CUDA graph per part against eager (resnet-50 backward, issue 26)"
    for launch in eager graph; do
      python3 bandwidth/measure.py --kv-store device --gpus 0,0 --network resnet --num-layers 50 \
        --schedule backward --num-batches 10 --launch "$launch" --no-reference
      python3 bandwidth/measure.py --kv-store device --gpus 0,0 --network resnet --num-layers 50 \
        --schedule backward --num-batches 10 --launch "$launch" --compute flops --no-reference \
        --json "$OUT/graph_parts_$launch.json"
    done
    python3 -m pytest -q -p no:cacheprovider tests/test_compute.py
  fi
  if ! part extra; then
    :
  elif [ "$GPUS" -ge 2 ]; then
    echo "== python -m bandwidth.ceiling"
    python3 -m bandwidth.ceiling -b 1M -e 1G -f 2 --json "$OUT/ceilings.json"
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
  else
    echo "== one GPU: --gpus 0,0 through measure.py (MXNet's lines), auto, graph and eager"
    for launch in auto graph eager; do
      python3 bandwidth/measure.py --kv-store device --gpus 0,0 --launch "$launch" "${R200[@]}"
    done
  fi
  if part extra; then
    echo "== schedules (issue 26): backward on device --gpus 0,0 and on local, against flat eager"
    python3 bandwidth/measure.py --kv-store device --gpus 0,0 --launch eager --schedule flat,backward \
      "${R200[@]}"
    python3 bandwidth/measure.py --kv-store local --gpus 0 --launch eager --schedule flat,backward \
      "${R200[@]}"
    if [ "$GPUS" -ge 2 ]; then
      python3 bandwidth/measure.py --kv-store nccl --launch eager --schedule flat,backward,ddp,fsdp \
        --bucket-mb 1,25,100 "${R200[@]}"
      echo "== overlap on two GPUs: nccl ddp and device backward, resnet-50 float32 batch 32"
      R50C=(--network resnet --num-layers 50 --no-reference --compute flops --batch-size 32
            --num-batches 30)
      python3 bandwidth/measure.py --kv-store nccl --gpus 0,1 --schedule ddp "${R50C[@]}"
      python3 bandwidth/measure.py --kv-store device --gpus 0,1 --schedule backward "${R50C[@]}"
    fi
    echo "== the CPU target on this host: products against a 2048^2 product, 16 threads"
    for batch in 32 8; do
      CUDA_VISIBLE_DEVICES= python3 bandwidth/measure.py --kv-store local --cpus 1 \
        --cpu-threads 16 --schedule backward --network resnet --num-layers 50 --no-reference \
        --compute flops --batch-size "$batch" --num-batches 3
    done
  fi
  if part real && [ "$GPUS" -ge 2 ]; then
    echo "== issue 39: real DDP and FSDP2 (benchmarks/real_step.py) against --framework torch"
    for transport in nvlink ${REAL_TRANSPORTS:-}; do
      case $transport in
        p2p) env=(NCCL_P2P_DISABLE=1) ;;
        shm) env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1) ;;
        *) env=() ;;
      esac
      for model in gpt2 resnet50; do
        echo "=== $transport ${env[*]}: $model"
        real="$OUT/real_${model}_$transport.json"
        env "${env[@]}" python3 benchmarks/real_step.py --model "$model" --json "$real" || continue
        read -r F B HF HB ARGS < <(python3 - "$real" "$model" <<'PY'
import json, sys
sys.path.insert(0, "benchmarks")
from real_step import MODELS
d = json.load(open(sys.argv[1]))
print(f"{d['forward_ms']:.3f} {d['backward_ms']:.3f} {d['host_forward_ms']:.3f} "
      f"{d['host_backward_ms']:.3f} {MODELS[sys.argv[2]]['measure']}")
PY
)
        for host in "--host-ms $HF,$HB" ""; do
          # shellcheck disable=SC2086
          env "${env[@]}" python3 bandwidth/measure.py --kv-store nccl --gpus 0,1 $ARGS \
            --schedule ddp,fsdp --framework torch --compute-ms "$F,$B" $host --no-reference \
            --num-batches 12
        done
      done
    done
  fi
} 2>&1 | tee "$log"
