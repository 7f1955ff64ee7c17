"""The ceiling's small-message figures against the reference tools' methods, in the same run.

    python3 benchmarks/reference_check.py [--rounds 5] [--json FILE]

The GPU machine has nvcc and NCCL's header but neither nccl-tests nor p2pBandwidthLatencyTest, so
``benchmarks/c_reference.cu`` does what they do, in C: NCCL collectives called from one thread
driving every GPU with a host clock around bursts of 20 (nccl-tests' default), and 100 16-byte
``cudaMemcpyPeerAsync`` behind a spin kernel released by a host flag (the P2P latency test). Each
round starts both afresh: ``python -m bandwidth.ceiling`` (collectives at 1, 4, 16 and 64 MiB, the
latency matrices), then the C programs. Figures at small sizes depend on which CPU the launching
thread lands on, so the spread over rounds is the point: the table gives each round, then the
median of the rounds and this tool's median as a share of the C median (all_reduce and broadcast
against C in place, as this tool runs them; C's out-of-place median beside, the form of the
reference document's figures). Nothing is asserted.
Needs two GPUs; exits 2 with one line when nvcc or NCCL's header is missing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES_MIB = (1, 4, 16, 64)
NAMES = ("all_reduce", "broadcast", "reduce_scatter", "all_gather")
# shared/docs/ceilings-h200x2.md: nccl-tests 2.19.6 and p2pBandwidthLatencyTest on 2 x H200
DOC = {("all_reduce", 1): 60, ("reduce_scatter", 1): 24, ("all_gather", 1): 26,
       ("broadcast", 1): 52, ("all_reduce", 16): 214, ("reduce_scatter", 16): 157,
       ("all_gather", 16): 152, ("broadcast", 16): 264, ("all_reduce", 64): 270,
       ("reduce_scatter", 64): 210, ("all_gather", 64): 212, ("broadcast", 64): 326}
DOC_LATENCY = {"disabled": "17.7-18.7", "enabled": "2.2-2.3"}


def build(tmp: str) -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.access(nvcc, os.X_OK):
        raise SystemExit("error: nvcc not found (needed to build benchmarks/c_reference.cu)")
    roots = [os.path.dirname(os.path.dirname(h)) for h in
             glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia",
                                    "nccl", "include", "nccl.h")) + ["/usr/include/nccl.h"]
             if os.path.exists(h)]
    if not roots:
        raise SystemExit("error: NCCL's header nccl.h not found")
    root = roots[0]
    lib = os.path.join(root, "lib") if root != "/usr" else "/usr/lib/x86_64-linux-gnu"
    exe = os.path.join(tmp, "cref")
    subprocess.run([nvcc, "-O2", "-o", exe, str(ROOT / "benchmarks" / "c_reference.cu"),
                    f"-I{root}/include", f"-L{lib}", "-lnccl", "-Xlinker", f"-rpath={lib}"],
                   check=True)
    return exe


def tool_round(tmp: str) -> dict:
    path = os.path.join(tmp, "ceilings.json")
    subprocess.run([sys.executable, "-m", "bandwidth.ceiling", "--gpus", "0,1",
                    "--skip", "p2p,host,cpu,topology", "-b", "1M", "-e", "64M", "-f", "4",
                    "--json", path], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   timeout=600)
    c = json.loads(Path(path).read_text())["ceilings"]
    out = {}
    for row in c["collectives"]["rows"]:
        for name in NAMES:
            out[(name, row["nbytes"] >> 20)] = row["results"][name]["busbw_gbps"]
    for m in c["p2p"]:
        if m["key"].startswith("latency"):
            kind = m["key"].split("_")[1]
            out[("latency", kind, "0->1")] = m["values"][0][1]
            out[("latency", kind, "1->0")] = m["values"][1][0]
    return out


def c_round(exe: str) -> dict:
    out = {}
    text = subprocess.run([exe, "nccl", "group"], check=True, capture_output=True, text=True,
                          timeout=300).stdout
    for line in text.splitlines():
        size = int(re.search(r"(\d+) MiB", line).group(1))
        for name, value in re.findall(r"(\w+) ([\d.]+)", line.split("busbw", 1)[1]):
            out[(name, size)] = float(value)
    for kind, args in (("disabled", []), ("enabled", ["peered"])):
        text = subprocess.run([exe, "latency", *args], check=True, capture_output=True,
                              text=True, timeout=300).stdout
        per: dict[str, list[float]] = {}
        for d, us in re.findall(r"(\d->\d) gpu ([\d.]+) us", text):
            per.setdefault(d, []).append(float(us))
        for d, values in per.items():
            out[("latency", kind, d)] = statistics.median(values)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    if args.rounds < 1:
        print("error: --rounds must be at least 1", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print("error: needs two CUDA GPUs", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            exe = build(tmp)
        except SystemExit as exc:
            print(exc, file=sys.stderr)
            return 2
        for r in range(args.rounds):
            tool, ref = tool_round(tmp), c_round(exe)
            rows.append((tool, ref))
            print(f"round {r + 1}/{args.rounds}: all_reduce 1 MiB tool "
                  f"{tool[('all_reduce', 1)]:.1f}, C {ref[('all_reduce', 1)]:.1f} GB/s",
                  file=sys.stderr, flush=True)
    keys = [(n, s) for s in SIZES_MIB for n in NAMES] + [
        ("latency", k, d) for k in ("disabled", "enabled") for d in ("0->1", "1->0")]
    print(f"# {args.rounds} rounds; busbw GB/s (latency: us); tool = python -m bandwidth.ceiling,"
          " C = benchmarks/c_reference.cu, doc = shared/docs/ceilings-h200x2.md")
    print("# all_reduce and broadcast: the tool's are in place (torch has no out-of-place "
          "broadcast), so C is timed in place for them; 'C oop' is its out-of-place median, "
          "the form of the doc's (nccl-tests') figures")
    print(f"{'figure':26s} {'tool, each round':>34s} {'C, each round':>34s} "
          f"{'tool med':>9s} {'C med':>8s} {'tool/C':>7s} {'C oop':>7s} {'doc':>10s}")
    summary = []
    for key in keys:
        same = (f"{key[0]}_inplace", key[1]) if key[0] in ("all_reduce", "broadcast") else key
        tool = [t[key] for t, _ in rows if t.get(key) is not None]
        ref = [c[same] for _, c in rows if c.get(same) is not None]
        oop = [c[key] for _, c in rows if c.get(key) is not None]
        if not tool or not ref:
            continue
        label = (f"{key[0]} {key[1]} MiB" if len(key) == 2 else f"latency {key[1]} {key[2]}")
        doc = DOC.get(key) if len(key) == 2 else DOC_LATENCY[key[1]]
        tm, cm = statistics.median(tool), statistics.median(ref)
        print(f"{label:26s} {' '.join(f'{v:6.1f}' for v in tool):>34s} "
              f"{' '.join(f'{v:6.1f}' for v in ref):>34s} {tm:9.1f} {cm:8.1f} "
              f"{100 * tm / cm:6.1f}% "
              f"{f'{statistics.median(oop):.1f}' if same != key and oop else '':>7} "
              f"{doc if doc is not None else '':>10}")
        summary.append({"figure": label, "tool": tool, "c": ref, "tool_median": tm,
                        "c_median": cm, "c_out_of_place": oop if same != key else None,
                        "doc": doc})
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"rounds": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
