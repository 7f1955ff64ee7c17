"""Measure the bandwidth of exchanging a network's parameter arrays under one kvstore mode.

Usage (from the repository root, from inside bandwidth/ as with MXNet's tool, or installed)::

    python bandwidth/measure.py --kv-store device --gpus 0,1 --network resnet --num-layers 200
    python measure.py --kv-store nccl --network inception-v3 --image-shape 3,299,299
    python -m bandwidth.measure --kv-store local --cpus 4 --network mlp      # no GPU needed
    bandwidth-measure --network resnet --num-layers 200 --dry-run

Prints MXNet's lines (``num of arrays = ...``, ``iter 1, ... GB/sec per gpu, error ...``), then a
summary with the median, min and max, algbw, and a flat all-reduce of the same bytes measured in the
same run as a reference. Exit status: 0 done, 1 a worker process failed, 2 bad input or a request
this machine cannot carry out.
"""

if __package__ in (None, ""):
    # Started as a script: put the repository root, not this folder, on the import path, so that
    # the package imports the same way as when installed (and this folder's modules shadow nothing).
    import pathlib
    import sys

    _here = pathlib.Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

import logging  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

import networks  # noqa: E402
from bandwidth.config import build_parser, config_from_args  # noqa: E402
from bandwidth.environment import describe as describe_environment  # noqa: E402
from bandwidth.errors import BandwidthError  # noqa: E402
from bandwidth.report import array_table, preamble, summary_lines, write_json  # noqa: E402
from bandwidth.run import make_plan, run, size_line  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.list_networks:
        for name in networks.names():
            print(f"{name:<22} {networks.NETWORKS[name].summary}")
        return 0
    try:
        config = config_from_args(args)
        plan = make_plan(config)
        if config.dry_run:
            print(size_line(plan.shapes, config.dtype))
            print("\n".join(array_table(plan)))
            return 0
        for line in preamble(plan, describe_environment(plan.devices)):
            print(line)
        print(size_line(plan.shapes, config.dtype), flush=True)
        result = run(config, on_report=lambda report: print(report.line(), flush=True), plan=plan)
        for note in result.notes:
            print(f"# note: {note}")
        print("\n".join(summary_lines(result)))
        if config.json_path:
            write_json(result, config.json_path)
            print(f"# wrote {config.json_path}")
        return 0
    except BandwidthError as exc:
        print(f"measure.py: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except torch.OutOfMemoryError as exc:
        print(f"measure.py: error: out of device memory: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"measure.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("measure.py: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
