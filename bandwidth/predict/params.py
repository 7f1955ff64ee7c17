"""The model's parameters, each measured by the tool itself (``bandwidth.predict.calibrate``), and
the file they are kept in.

    {"schema": "bandwidth.predict.params/1",
     "rate_bits": 250e6,            # the nominal link rate they were measured at (each way)
     "eff_one": 0.93,               # payload rate / nominal rate, one connection each way
     "eff_several": 0.92,           # the same with several connections out of one host
     "fanin": {"2": 0.9, ...},      # remote senders into one host's link -> its efficiency
     "message_s": 0.0004,           # seconds a process spends per message it sends or receives
     "step_s": 0.003,               # seconds per step beyond the transfers (a round trip)
     "one_serial": 0.6,             # one message in flight: share of a server link's shorter
                                    # direction that does not overlap the longer
     "sum_bytes_per_s": 2e9,        # a server's summation rate (bytes of pushes added per second)
     "source": "...",               # where and when they were measured
     "check": {"median_pct": 6.1, "worst_pct": 14.0, "runs": 12} | null}   # predict_check.py

Efficiencies are fractions of the nominal rate, so parameters measured at one rate are used at
another (docs/formulas.md, "A model of a step").
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bandwidth.errors import ConfigError

SCHEMA = "bandwidth.predict.params/1"
# Shipped with the tool: the parameters measured on the netlab of the 2-core CI machine, and the
# error predict_check.py found for them (overwritten by ``benchmarks/predict_check.py --save``).
DEFAULT_FILE = Path(__file__).with_name("lab_params.json")
TCP_PAYLOAD = 1448 / 1514           # the best a TCP stream over Ethernet carries of the rate


@dataclass(frozen=True)
class Params:
    rate_bits: float = 1e9
    eff_one: float = TCP_PAYLOAD
    eff_several: float = TCP_PAYLOAD
    fanin: dict = field(default_factory=dict)      # int senders -> efficiency
    message_s: float = 0.0
    step_s: float = 0.0
    one_serial: float = 1.0          # uncalibrated: in, then out
    sum_bytes_per_s: float = math.inf
    source: str = "not calibrated: TCP's payload share of the rate, no per-message cost"
    check: dict | None = None

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["fanin"] = {str(k): v for k, v in sorted(self.fanin.items())}
        if math.isinf(self.sum_bytes_per_s):
            doc["sum_bytes_per_s"] = None
        return {"schema": SCHEMA, **doc}


def fanin_efficiency(params: Params, senders: int) -> float:
    """Efficiency of one host's link into which ``senders`` remote processes send at once:
    piecewise linear in log2(senders) through (1, eff_one) and the measured points; beyond the
    last point, the last segment's slope goes on where it falls (flat where it rose), but never
    below half the last point."""
    points = sorted({1: params.eff_one, **params.fanin}.items())
    if senders <= 1 or len(points) == 1:
        return params.eff_one if senders <= 1 else points[-1][1]
    x = math.log2(senders)
    for (k0, e0), (k1, e1) in zip(points, points[1:]):
        if senders <= k1:
            x0, x1 = math.log2(k0), math.log2(k1)
            return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
    (k0, e0), (k1, e1) = points[-2], points[-1]
    slope = min(0.0, (e1 - e0) / (math.log2(k1) - math.log2(k0)))   # incast never helps
    return max(e1 / 2, e1 + slope * (x - math.log2(k1)))


def outbound_efficiency(params: Params, destinations: int) -> float:
    return params.eff_one if destinations <= 1 else params.eff_several


def save(params: Params, path) -> None:
    Path(path).write_text(json.dumps(params.to_dict(), indent=1) + "\n")


def load(path=None) -> Params:
    """The parameters in ``path`` (default: the shipped lab file; missing: the uncalibrated
    defaults). Any problem with a named file is one ConfigError line."""
    target = Path(path) if path else DEFAULT_FILE
    if not target.exists():
        if path:
            raise ConfigError(f"--params {path}: no such file; write one with python -m "
                              "bandwidth.predict --calibrate ... --save FILE")
        return Params()
    try:
        return load_dict(json.loads(target.read_text()), str(target))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--params {target}: not a parameter file of python -m "
                          f"bandwidth.predict ({exc})") from None


def load_dict(doc: dict, where: str = "parameters") -> Params:
    try:
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema is not {SCHEMA}")
        sum_rate = doc.get("sum_bytes_per_s")
        return Params(rate_bits=float(doc["rate_bits"]), eff_one=_fraction(doc["eff_one"]),
                      eff_several=_fraction(doc["eff_several"]),
                      fanin={int(k): _fraction(v) for k, v in doc.get("fanin", {}).items()},
                      message_s=float(doc.get("message_s", 0.0)),
                      step_s=float(doc.get("step_s", 0.0)),
                      one_serial=_fraction(doc.get("one_serial", 1.0)),
                      sum_bytes_per_s=math.inf if sum_rate is None else float(sum_rate),
                      source=str(doc.get("source", where)), check=doc.get("check"))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: not a parameter file of python -m bandwidth.predict "
                          f"({exc})") from None


def _fraction(value) -> float:
    number = float(value)
    if not 0 < number <= 1:
        raise ValueError(f"an efficiency of {number} is not in (0, 1]")
    return number
