#!/bin/bash
# Run as: flock /tmp/bandwidth-bench.lock bash benchmarks/results/2026-11-24-cpu2-competing-process-tiny-vs-mlp.sh
# tiny and mlp, one thread on core 1, alone and sharing core 1 with a busy loop: median vs mean throughput
cd "$(dirname "$0")/../.." && T=$(mktemp -d) && trap "rm -rf $T" EXIT
echo "# $(date -u +%F' '%T) UTC loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for wl in tiny mlp; do
  if [ $wl = tiny ]; then W="--network mlp --image-shape 1,28,28 --num-classes 10 --num-batches 20"; else W="--network mlp --num-batches 10"; fi
  for comp in alone busy; do
    for k in 1 2 3; do
      [ $comp = busy ] && { taskset -c 1 python3 -c "while True: pass" & B=$!; sleep 0.3; }
      taskset -c 1 python3 bandwidth/measure.py --kv-store local --cpus 2 --no-reference $W --cpu-threads 1 --repeat auto --time-budget 3 --json $T/tc.json >/dev/null 2>&1
      [ $comp = busy ] && { kill $B; wait $B 2>/dev/null; }
      python3 -c "
import json,statistics as st
r=json.load(open('$T/tc.json'))['results'][0]; s=r['summary']; it=r['iterations']
tot=sum(i['seconds'] for i in it)
print('$wl $comp try $k: median %.3f GB/s, throughput (bytes over total time) %.3f GB/s, iterations %d' % (s['busbw_median'], s['nbytes']*s['bus_factor']*len(it)/tot/1e9, len(it)))"
    done
  done
done
echo "# loadavg at the end $(cut -d' ' -f1-3 /proc/loadavg)"
