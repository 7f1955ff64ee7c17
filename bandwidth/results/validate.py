"""Reading a result document from a file and checking every field the toolkit reads from it.

A baseline or a result file is input like any flag: it may be truncated, hand-edited, binary, a
file of another tool, or made to break the reader (nesting 100,000 deep, a 5000-digit number,
``NaN`` where a rate belongs). ``read_json`` and ``check_document`` turn each of these into one
ConfigError naming the file and the field, before anything is compared; a rate that could never
fail a check (NaN, 0 on a row of two or more devices) or could never pass one (negative) is
refused here, not judged later.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bandwidth.errors import ConfigError

SCHEMA_VERSION = 1      # of the result document (bandwidth.results.document describes it)

MAX_BYTES = 256 << 20           # a result document of a long sweep is a few MB


def read_json(path: str | Path) -> object:
    """The parsed JSON of ``path``; every way a file can fail to be JSON is one ConfigError."""
    from bandwidth.files import check_regular_file

    path = Path(path)
    name = repr(str(path))
    check_regular_file(path)          # a FIFO would block the read below
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(f"{name} is larger than {MAX_BYTES >> 20} MB: not a result "
                              "document")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {name}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name} is not text (byte {exc.start} is not UTF-8): not a "
                          "JSON result document") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not JSON: {exc.msg} at line {exc.lineno} column "
                          f"{exc.colno}") from None
    except RecursionError:
        raise ConfigError(f"{name} is nested too deeply to be a result document") from None
    except ValueError as exc:           # a number of thousands of digits (int's digit limit)
        raise ConfigError(f"{name} is not a result document: "
                          f"{str(exc).splitlines()[0]}") from None


class _Checker:
    """Type and range checks of one document; each failure names the field's path."""

    def __init__(self, name: str):
        self.name = name

    def fail(self, where: str, rule: str, value) -> None:
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        raise ConfigError(f"{self.name}: {where} must be {rule}; got {shown} (not a result "
                          "document this tool wrote, or edited by hand)")

    def mapping(self, obj, where: str, optional: bool = False) -> dict | None:
        if obj is None and optional:
            return None
        if not isinstance(obj, dict):
            self.fail(where, "an object", obj)
        return obj

    def text(self, obj, where: str, optional: bool = False) -> str | None:
        if obj is None and optional:
            return None
        if not isinstance(obj, str) or len(obj) > 10_000:
            self.fail(where, "a string", obj)
        return obj

    def number(self, obj, where: str, minimum: float | None = None, positive: bool = False,
               integer: bool = False, optional: bool = False) -> float | None:
        """A finite number (never a bool), at least ``minimum``, above 0 with ``positive``."""
        if obj is None and optional:
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(obj, bool) or not isinstance(obj, kinds):
            self.fail(where, "a whole number" if integer else "a number", obj)
        if not math.isfinite(obj):
            self.fail(where, "a finite number", obj)
        if positive and not obj > 0:
            self.fail(where, "above 0", obj)
        if minimum is not None and obj < minimum:
            self.fail(where, f"at least {minimum:g}", obj)
        return obj


def check_document(doc: object, name: str) -> dict:
    """``doc`` if it is a result document whose rows, samples and fingerprint can be read;
    otherwise one ConfigError naming the first bad field."""
    c = _Checker(name)
    # type() and not ==: true == 1 in Python, and a bool is no schema version.
    if not isinstance(doc, dict) or type(doc.get("schema_version")) is not int \
            or doc["schema_version"] != SCHEMA_VERSION or not isinstance(doc.get("results"), list):
        raise ConfigError(f"{name} is not a result file of this tool (schema version "
                          f"{SCHEMA_VERSION}); write one with --json or --save-baseline")
    for i, result in enumerate(doc["results"]):
        _check_result(c, result, f"results[{i}]")
    env = c.mapping(doc.get("environment"), "environment", optional=True)
    if env is not None:
        devices = env.get("devices", [])
        if not isinstance(devices, list):
            c.fail("environment.devices", "a list", devices)
        for j, device in enumerate(devices):
            c.mapping(device, f"environment.devices[{j}]")
            c.text(device.get("name"), f"environment.devices[{j}].name", optional=True)
        _check_fingerprint(c, {"device_model": None, "device_count": len(devices),
                               "driver": env.get("driver"), "links": env.get("links"),
                               "peer_access": env.get("peer_access")}, "environment")
    fp = c.mapping(doc.get("fingerprint"), "fingerprint", optional=True)
    if fp is not None:
        _check_fingerprint(c, fp, "fingerprint")
    return doc


def _check_result(c: _Checker, result, where: str) -> None:
    c.mapping(result, where)
    config = c.mapping(result.get("config"), f"{where}.config")
    for key in ("kv_store", "dtype", "optimizer"):
        c.text(config.get(key), f"{where}.config.{key}")
    c.text(config.get("backend", "toolkit"), f"{where}.config.backend")
    network = c.mapping(result.get("network"), f"{where}.network")
    c.text(network.get("name"), f"{where}.network.name")
    devices = result.get("devices")
    if not isinstance(devices, list) or not devices \
            or not all(isinstance(d, str) and d for d in devices):
        c.fail(f"{where}.devices", "a non-empty list of device names", devices)
    s = c.mapping(result.get("summary"), f"{where}.summary")
    c.number(s.get("nbytes"), f"{where}.summary.nbytes", positive=True, integer=True)
    c.number(s.get("bus_factor"), f"{where}.summary.bus_factor", minimum=0, optional=True)
    # busbw is 0 by definition on one device; on two or more a 0, NaN or negative figure would
    # pass (or fail) every comparison whatever was measured.
    one = len(devices) < 2
    busbw = f"{where}.summary.busbw_median"
    c.number(s.get("busbw_median"), busbw, minimum=0 if one else None, positive=not one)
    for key in ("busbw_min", "busbw_max", "algbw_median"):
        c.number(s.get(key), f"{where}.summary.{key}", minimum=0)
    c.number(s.get("seconds_median"), f"{where}.summary.seconds_median", positive=True)
    c.number(s.get("error_max"), f"{where}.summary.error_max", minimum=-1)
    iterations = result.get("iterations", [])
    if not isinstance(iterations, list):
        c.fail(f"{where}.iterations", "a list", iterations)
    for k, it in enumerate(iterations):
        c.mapping(it, f"{where}.iterations[{k}]")
        c.number(it.get("seconds"), f"{where}.iterations[{k}].seconds", positive=True)
        c.number(it.get("busbw_gbps"), f"{where}.iterations[{k}].busbw_gbps", minimum=0,
                 optional=True)
    ceiling = c.mapping(result.get("ceiling"), f"{where}.ceiling", optional=True)
    if ceiling is not None:
        c.text(ceiling.get("name"), f"{where}.ceiling.name")
        c.number(ceiling.get("gbps"), f"{where}.ceiling.gbps", positive=True)
        c.text(ceiling.get("not_a_bound"), f"{where}.ceiling.not_a_bound", optional=True)


def _check_fingerprint(c: _Checker, fp: dict, where: str) -> None:
    c.text(fp.get("device_model"), f"{where}.device_model", optional=True)
    c.number(fp.get("device_count", 0), f"{where}.device_count", minimum=0, integer=True)
    c.text(fp.get("driver"), f"{where}.driver", optional=True)
    links = c.mapping(fp.get("links"), f"{where}.links", optional=True)
    if links is not None:
        nvlinks = c.mapping(links.get("nvlinks") or {}, f"{where}.links.nvlinks")
        for pair, count in nvlinks.items():
            parts = pair.split("-")
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                c.fail(f"{where}.links.nvlinks", "keyed by GPU pairs such as '0-1'", pair)
            c.number(count, f"{where}.links.nvlinks[{pair!r}]", minimum=0, integer=True,
                     optional=True)
        pcie = c.mapping(links.get("pcie") or {}, f"{where}.links.pcie")
        for gpu, link in pcie.items():
            c.mapping(link, f"{where}.links.pcie[{gpu!r}]")
            for key in ("gen", "width"):
                c.number(link.get(key), f"{where}.links.pcie[{gpu!r}].{key}", minimum=1,
                         integer=True, optional=True)
    peers = fp.get("peer_access")
    if peers is not None and (not isinstance(peers, list) or not all(
            isinstance(row, list) and all(isinstance(v, bool) for v in row) for row in peers)):
        c.fail(f"{where}.peer_access", "a matrix of true/false", peers)
