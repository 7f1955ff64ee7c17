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
import time
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
    "50x5": [(50, 5, "dist_sync", "mobilenetv2", 100e6, None, 25)],
    "50x5one": [(50, 5, "dist_sync", "mobilenetv2", 100e6, 1, 25)],
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

    doc = load_results()

    def keep(key: str, run: labrun.Measured, **more) -> None:
        section = "calibration_runs" if not more else "runs"
        doc[section][key] = {**more, **dataclasses.asdict(run)}
        RESULTS.write_text(json.dumps(doc, indent=1))

    lab = up(lab_name, LAB_HOSTS, "250mbit", {}, "198.19.77.0/24")
    try:
        for name in names:
            if name == "calibrate":
                lab = reshape(lab, CALIBRATION_RATE)
                done = {k: measured_of(v) for k, v in doc["calibration_runs"].items()}
                calibrate.calibrate(lab, CALIBRATION_RATE, progress, done, keep)
                continue
            for cfg in HELD_OUT[name]:
                w, s, mode, network, rate, flight, hosts = cfg
                lab = reshape(lab, int(rate))
                extra = () if flight is None else ("--max-in-flight", str(flight))
                run = labrun.run(lab, [(4 + i, None) for i in range(1, hosts + 1)], w, s, mode,
                                 network, extra)
                progress(f"# {label(cfg)}: {run.seconds:.4f} s per step, load {run.load}")
                keep(label(cfg), run, config=list(cfg))
    finally:
        down(lab_name)


def load_results() -> dict:
    RESULTS.parent.mkdir(exist_ok=True)
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    doc.setdefault("calibration_runs", {})
    doc.setdefault("runs", {})
    doc.setdefault("date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    return doc


def measured_of(saved: dict) -> labrun.Measured:
    fields = {f.name for f in dataclasses.fields(labrun.Measured)}
    return labrun.Measured(**{k: (tuple(v) if isinstance(v, list) else v)
                              for k, v in saved.items() if k in fields})


def fitted(doc: dict):
    """The parameters from the saved calibration runs (fitted now, with the model as it is)."""
    if "sum_bytes_per_s" not in doc:
        doc["sum_bytes_per_s"] = calibrate.summation_rate()
        RESULTS.write_text(json.dumps(doc, indent=1))
    runs = [(name, measured_of(doc["calibration_runs"][name])) for name, *_ in calibrate.RUNS
            if name in doc["calibration_runs"]]
    start = paramfile.Params(rate_bits=CALIBRATION_RATE, sum_bytes_per_s=doc["sum_bytes_per_s"],
                             source=f"netlab calibration (benchmarks/predict_check.py, "
                                    f"{doc.get('date', 'this machine')}): 4 hosts at "
                                    f"{CALIBRATION_RATE / 1e6:g} Mbit/s")
    return calibrate.fit(start, runs)


def report(save: bool) -> int:
    doc = load_results()
    params = fitted(doc)
    print(f"# parameters: {json.dumps(params.to_dict())}")
    print(f"{'configuration':<72} {'predicted s':>11} {'measured s':>10} {'error':>7}  binds")
    errors = []
    for name, run in doc["runs"].items():
        w, s, mode, network, rate, flight, hosts = run["config"]
        measured = measured_of(run)
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
        paramfile.save(dataclasses.replace(params, check=check), paramfile.DEFAULT_FILE)
        print(f"# wrote {paramfile.DEFAULT_FILE}")
    return 0


def _stop(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")        # so that the lab comes down (finally)


SEED_SCALES = ((50, 5), (100, 10), (200, 10))
SEED_RATES = (10e9, 25e9, 100e9)


def seed_table(network: str = "resnet", layers: int = 50) -> list[str]:
    """The seeds' three scales at 10, 25 and 100 Gbit/s per host: one message in flight per
    server, all of them taken message by message, and all of them taken a worker at a time (the
    default from WORKER_ORDER_FROM workers on), in markdown (round-robin on max(W, S) hosts)."""
    import networks
    from bandwidth.predict.jobs import make_job

    params = paramfile.load()
    shapes = networks.get_shapes(network, num_layers=layers)
    lines = ["| W x S | link | 1 in flight | all in flight, message by message | all in flight, "
             "a worker at a time (default) | binds (default) | servers stop binding at S |",
             "|---|---|---|---|---|---|---|"]
    from bandwidth.predict.plan import servers_stop_binding
    asks = {"one": dict(in_flight=1), "message": dict(server_takes="message"), "default": {}}
    for workers, servers in SEED_SCALES:
        for rate in SEED_RATES:
            found = {name: predict(make_job("dist_sync", shapes, workers, servers,
                                            rate_bits=rate, **ask), params)
                     for name, ask in asks.items()}
            stop = servers_stop_binding("dist_sync", shapes, workers, params=params,
                                        rate_bits=rate)
            lines.append(f"| {workers} x {servers} | {rate / 1e9:g} Gbit/s | "
                         f"{found['one'].seconds:.3f} s | {found['message'].seconds:.3f} s | "
                         f"{found['default'].seconds:.3f} s | {found['default'].binding} | "
                         f"{stop or '> ' + str(4 * workers)} |")
    return lines


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="", help="comma list of: calibrate, " + ", ".join(HELD_OUT))
    p.add_argument("--name", default="h7chk", help="the lab's name (default h7chk)")
    p.add_argument("--report", action="store_true", help="print the table from --results")
    p.add_argument("--table", action="store_true", help="print the seeds' three scales "
                   "predicted at 10, 25, 100 Gbit/s (resnet-50), one message in flight vs all")
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
        report(args.save)
    if args.table:
        print("\n".join(seed_table()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
