"""P2P=Disabled matrices, in a process of their own. Started by the ceiling measurement:

    python -m bandwidth.ceiling.unpeered --gpus 0,1 --nbytes 256000000 --repeats 5 --burst 10 \
        --latency-repeat 100 [--no-bandwidth] [--no-latency]

torch enables peer access on its first cross-device copy and never disables it, so the parent,
which measured P2P=Enabled, cannot measure this. Here no torch cross-device copy is ever made,
peer access is disabled explicitly (it should not be on), and every copy is a raw
``cudaMemcpyPeerAsync``, which the driver then stages through host memory, as in
p2pBandwidthLatencyTest's P2P=Disabled runs. Prints one JSON line: the PeerMatrices fields.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

import torch

from bandwidth.ceiling.p2p import p2p_matrices
from bandwidth.hardware import rawcopy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandwidth.ceiling.unpeered")
    parser.add_argument("--gpus", required=True)
    parser.add_argument("--nbytes", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--latency-repeat", type=int, default=100)
    parser.add_argument("--no-bandwidth", action="store_true")
    parser.add_argument("--no-latency", action="store_true")
    args = parser.parse_args(argv)
    gpus = [int(g) for g in args.gpus.split(",")]
    if not torch.cuda.is_available() or not rawcopy.available():
        print("error: needs CUDA GPUs and the CUDA runtime library torch loaded", file=sys.stderr)
        return 2
    was_enabled = [f"{i}->{j}" for i in gpus for j in gpus
                   if i != j and rawcopy.disable_peer_access(i, j)]
    out = p2p_matrices(gpus, args.nbytes, args.repeats, args.burst, args.latency_repeat,
                       bandwidth=not args.no_bandwidth, latency=not args.no_latency)
    if was_enabled:
        out.notes.append(f"peer access was enabled at start for {', '.join(was_enabled)} and "
                         "was disabled")
    print(json.dumps(asdict(out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
