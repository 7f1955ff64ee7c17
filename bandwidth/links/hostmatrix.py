"""The host-to-host ceiling of a distributed run, from a matrix measured beforehand.

    python launch.py -H hosts -n K python -m bandwidth.ceiling --network --json hosts.json
    python launch.py -H hosts -n 2 -s 2 python bandwidth/measure.py --kv-store dist_sync \
        --network-ceiling hosts.json

The matrix (bandwidth.ceiling.network) has one row and column per launched process, labelled
``rank@host``, with the GB/s of one pair at a time in the source->destination direction. A run
uses it by host name (the part after '@'), or by the very cell where the matrix was measured
with the job's own ranks: the parameter-server modes need every worker -> server pair,
dist_nccl every pair of workers. The ceiling is the slowest such
cell, since the step waits for the slowest transfer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from bandwidth.errors import ConfigError
from bandwidth.files import check_regular_file


@dataclass(frozen=True)
class HostMatrix:
    """The --json document of ``python -m bandwidth.ceiling --network``, checked."""

    file: str
    labels: tuple[str, ...]                          # rank@host, one per row and column
    gbps: tuple[tuple[float | None, ...], ...]       # gbps[source][destination]; None: diagonal

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(label.rpartition("@")[2] for label in self.labels)


@dataclass(frozen=True)
class HostCeiling:
    """What --network-ceiling adds to a distributed result; gbps None: n/a, with ``reason``."""

    file: str
    gbps: float | None
    pair: tuple[str, str] | None                     # (source label, destination label)
    pct: float | None
    reason: str = ""

    def to_dict(self) -> dict:
        return {"file": self.file, "gbps": self.gbps,
                "pair": None if self.pair is None else list(self.pair), "pct": self.pct,
                "reason": self.reason or None}


def load_matrix(path: str) -> HostMatrix:
    """Read and check the matrix; any problem is one ConfigError line naming the file."""
    how = ("write one with: python launch.py -H hosts -n K python -m bandwidth.ceiling "
           "--network --json FILE")
    check_regular_file(path, "--network-ceiling")
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise ConfigError(f"--network-ceiling {path}: cannot read it ({exc.strerror}); "
                          f"{how}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--network-ceiling {path}: not JSON ({exc}); {how}") from None
    except RecursionError:
        raise ConfigError(f"--network-ceiling {path}: nested too deeply to be a host-to-host "
                          f"matrix; {how}") from None
    except ValueError as exc:           # a number of thousands of digits (int's digit limit)
        raise ConfigError(f"--network-ceiling {path}: not a host-to-host matrix "
                          f"({str(exc).splitlines()[0]}); {how}") from None
    matrix = doc.get("network", doc) if isinstance(doc, dict) else None
    labels = matrix.get("hosts") if isinstance(matrix, dict) else None
    rows = matrix.get("gbps") if isinstance(matrix, dict) else None
    ok = (isinstance(labels, list) and len(labels) >= 2 and isinstance(rows, list)
          and all(isinstance(label, str) and "@" in label for label in labels)
          and len(rows) == len(labels)
          and all(isinstance(row, list) and len(row) == len(labels) for row in rows)
          and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                and math.isfinite(v) and v > 0) for row in rows for v in row))
    if not ok:
        raise ConfigError(f'--network-ceiling {path}: not a host-to-host matrix ({{"network": '
                          f'{{"hosts": ["rank@host", ...], "gbps": [[...], ...]}}}} with at '
                          f"least two hosts and positive GB/s); {how}")
    return HostMatrix(path, tuple(labels), tuple(tuple(row) for row in rows))


def needed_pairs(worker_hosts: list[str], server_hosts: list[str]) -> list[tuple[str, str]]:
    """The ``rank@host`` pairs a run sends over (ranks as launch.py numbers them: the workers,
    then the servers): worker -> server with servers, else worker -> other worker (the
    all-reduce passes between workers; one worker alone sends nothing)."""
    workers = [f"{rank}@{host}" for rank, host in enumerate(worker_hosts)]
    if server_hosts:
        servers = [f"{len(workers) + i}@{host}" for i, host in enumerate(server_hosts)]
        return [(w, s) for w in workers for s in servers]
    return [(a, b) for a in workers for b in workers if a != b]


def slowest_cell(matrix: HostMatrix, pairs: list[tuple[str, str]]):
    """``(gbps, (source label, destination label), reason)``: the slowest cell over the pairs,
    or ``(None, None, reason)`` when there are none or a pair has no cell. A pair whose two
    labels are both in the matrix (measured with the same launch layout) takes that very cell;
    any other the slowest cell between the two hosts, as the matrix may come from a launch
    with other ranks."""
    if not pairs:
        return None, None, "one worker and no servers: this run sends nothing between hosts"
    index = {label: i for i, label in enumerate(matrix.labels)}
    best = None
    for src, dst in pairs:
        if src in index and dst in index:
            cells = [(matrix.gbps[index[src]][index[dst]], (src, dst))]
        else:
            src_host, dst_host = src.rpartition("@")[2], dst.rpartition("@")[2]
            cells = [(v, (matrix.labels[i], matrix.labels[j]))
                     for i, row in enumerate(matrix.gbps) for j, v in enumerate(row)
                     if v is not None and i != j
                     and matrix.hosts[i] == src_host and matrix.hosts[j] == dst_host]
        cells = [cell for cell in cells if cell[0] is not None]
        if not cells:
            return None, None, (f"the matrix has no cell from {src.rpartition('@')[2]} to "
                                f"{dst.rpartition('@')[2]} (its processes: "
                                f"{', '.join(matrix.labels)})")
        cell = min(cells)
        best = cell if best is None or cell[0] < best[0] else best
    return best[0], best[1], ""


def host_ceiling(matrix: HostMatrix, worker_hosts: list[str], server_hosts: list[str],
                 worker_gbps: list[float]) -> HostCeiling:
    """The run against the slowest needed cell. ``worker_gbps``: each worker's network rate in
    bytes each way per second (WorkerTraffic.network_gbps)."""
    gbps, pair, reason = slowest_cell(matrix, needed_pairs(worker_hosts, server_hosts))
    if gbps is None:
        return HostCeiling(matrix.file, None, None, None, reason)
    # A cell is one direction of one pair, alone on the wire. A worker pushes and pulls the
    # same bytes, each direction on its own side of a full-duplex link, so the comparable rate
    # is the bytes sent (= received) per second, not their sum. The slowest worker is compared,
    # as the step (and the summary's lines) wait for it.
    pct = 100 * min(worker_gbps) / gbps if worker_gbps else None
    return HostCeiling(matrix.file, gbps, pair, pct)


def ceiling_line(ceiling: HostCeiling, servers: bool) -> str:
    """The summary line that replaces the ``bandwidth.ceiling --network`` hint."""
    head = f"#   host-to-host ceiling ({ceiling.file}): "
    if ceiling.gbps is None:
        return head + f"n/a ({ceiling.reason})"
    which = "worker->server" if servers else "worker->worker"
    text = (f"{ceiling.gbps:.2f} GB/s, the slowest {which} pair of the matrix "
            f"({ceiling.pair[0]} -> {ceiling.pair[1]})")
    if ceiling.pct is not None:
        text += f"; this run reaches {ceiling.pct:.1f} %"
    return head + text
