"""The model's error, stated: calibrate on at most 4 lab hosts, then predict and measure held-out
configurations on a lab of 29 hosts, and print predicted, measured and error for each.

    flock /tmp/heavy.lock python benchmarks/predict_check.py --runs calibrate,10x2
    flock /tmp/heavy.lock python benchmarks/predict_check.py --runs 20x4,nccl
    flock /tmp/heavy.lock python benchmarks/predict_check.py --runs 50x5
    python benchmarks/predict_check.py --report --save   # no lab: the table; --save writes the
                                                          # parameters and the error to the tool

Each invocation brings its lab up (--name, default h7chk) and down, so that one lock hold is one
invocation; measurements accumulate in --results (JSON). The calibration runs only on hosts 1-4;
held-out runs use round-robin placement over hosts 5.. of the lab. Root, Linux (bandwidth.netlab).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bandwidth.predict import calibrate, labrun  # noqa: E402
from bandwidth.predict import params as paramfile  # noqa: E402
from bandwidth.predict.model import gbps_per_worker, predict  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "predict_check.json"
CALIBRATION_RATE = 250_000_000
# key: (workers, servers, mode, network, rate bits, messages in flight per server or None, hosts)
HELD_OUT = {
    "10x2": [(10, 2, "dist_sync", "mobilenetv2", 250e6, None, 12),
             (10, 2, "dist_sync", "mobilenetv2", 250e6, 1, 12)],
    "20x4": [(20, 4, "dist_sync", "mobilenet", 250e6, None, 22),
             (20, 4, "dist_sync", "mobilenet", 100e6, 1, 22)],
    "nccl": [(10, 0, "dist_nccl", "mobilenetv2", 250e6, None, 10),
             (20, 0, "dist_nccl", "mobilenet", 100e6, None, 20)],
    "50x5": [(50, 5, "dist_sync", "mobilenetv2", 250e6, None, 25)],
    "50x5one": [(50, 5, "dist_sync", "mobilenetv2", 250e6, 1, 25)],
}
LAB_HOSTS = 29


def label(cfg) -> str:
    w, s, mode, network, rate, flight, hosts = cfg
    shape = f"{w}x{s}" if s else f"{w}"
    return (f"{mode} {shape} {network} {rate / 1e6:g} Mbit/s, in flight "
            f"{'all' if flight is None else flight}, {hosts} hosts")


def measure(names: list[str], lab_name: str, progress=print) -> None:
    from bandwidth.netlab.cli import down, up
    from bandwidth.netlab.lab import reshape

    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"calibration": None,
                                                                        "runs": {}}
    lab = up(lab_name, LAB_HOSTS, "250mbit", {}, "198.19.77.0/24")
    try:
        for name in names:
            if name == "calibrate":
                lab = reshape(lab, CALIBRATION_RATE)
                fitted, runs = calibrate.calibrate(lab, CALIBRATION_RATE, progress)
                doc["calibration"] = {"params": fitted.to_dict(), "runs": {
                    n: dataclasses.asdict(r) for n, r in runs}}
                continue
            for cfg in HELD_OUT[name]:
                w, s, mode, network, rate, flight, hosts = cfg
                lab = reshape(lab, int(rate))
                extra = () if flight is None else ("--max-in-flight", str(flight))
                run = labrun.run(lab, [(4 + i, None) for i in range(1, hosts + 1)], w, s, mode,
                                 network, extra)
                progress(f"# {label(cfg)}: {run.seconds:.4f} s per step, load {run.load}")
                doc["runs"][label(cfg)] = {"config": list(cfg), **dataclasses.asdict(run)}
            RESULTS.write_text(json.dumps(doc, indent=1))
    finally:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=1))
        down(lab_name)


def report(save: bool) -> int:
    doc = json.loads(RESULTS.read_text())
    params = paramfile.load_dict(doc["calibration"]["params"])
    print(f"# parameters: {json.dumps(params.to_dict())}")
    print(f"{'configuration':<72} {'predicted s':>11} {'measured s':>10} {'error':>7}  binds")
    errors = []
    for name, run in doc["runs"].items():
        w, s, mode, network, rate, flight, hosts = run["config"]
        measured = labrun.Measured(**{k: (tuple(v) if isinstance(v, list) else v)
                                      for k, v in run.items() if k != "config"})
        job = calibrate.job_of(measured, mode, network, rate, flight)
        found = predict(job, params)
        error = 100 * (found.seconds - measured.seconds) / measured.seconds
        errors.append(abs(error))
        print(f"{name:<72} {found.seconds:11.4f} {measured.seconds:10.4f} {error:+6.1f}%  "
              f"{found.binding} (GB/s per worker {gbps_per_worker(job, found.seconds):.4f}; "
              f"load {measured.load[0]:.2f})")
    check = {"median_pct": statistics.median(errors), "worst_pct": max(errors),
             "runs": len(errors), "date": doc.get("date", "")}
    print(f"# |error|: median {check['median_pct']:.1f} %, worst {check['worst_pct']:.1f} % "
          f"over {len(errors)} held-out runs (targets: 10 %, 20 %)")
    if save:
        paramfile.save(dataclasses.replace(params, source=doc["calibration"].get(
            "source", params.source), check=check), paramfile.DEFAULT_FILE)
        print(f"# wrote {paramfile.DEFAULT_FILE}")
    return 0


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")        # so that the lab comes down (finally)


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="", help="comma list of: calibrate, " + ", ".join(HELD_OUT))
    p.add_argument("--name", default="h7chk", help="the lab's name (default h7chk)")
    p.add_argument("--report", action="store_true", help="print the table from --results")
    p.add_argument("--save", action="store_true", help="with --report: write the parameters "
                   "and the error to " + str(paramfile.DEFAULT_FILE))
    args = p.parse_args()
    names = [n for n in args.runs.split(",") if n]
    unknown = [n for n in names if n != "calibrate" and n not in HELD_OUT]
    if unknown:
        print(f"predict_check: unknown run {unknown[0]!r}", file=sys.stderr)
        return 2
    if names:
        measure(names, args.name)
    if args.report:
        return report(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
