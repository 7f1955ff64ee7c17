"""``measure_ceilings(devices, options)``: every ceiling of this host, as one Ceilings tree.

    from bandwidth.hardware.devices import DeviceSet
    c = measure_ceilings(DeviceSet("cuda", (0, 1)), CeilingOptions(skip=frozenset({"nccl"})))
    c.matrix("unidirectional_enabled").values[0][1]        # GB/s
    json.dumps({"ceilings": c.to_dict()})

Order: topology, P2P=Enabled matrices (this process, after enabling peer access), P2P=Disabled
matrices (a child process that never enables it: bandwidth.ceiling.unpeered), host<->device
per GPU, host memory, collectives (one process driving every GPU; Gloo: one per device). On CPU
devices only host memory and the Gloo collectives apply; the rest is null with its reason.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from bandwidth.ceiling import collectives, host, p2p
from bandwidth.ceiling.model import (MATRICES, PARTS, Ceilings, CollectiveSweep, HostLink,
                                     HostMemory, Matrix)
from bandwidth.config.values import size_sweep
from bandwidth.errors import BandwidthError, ConfigError
from bandwidth.hardware import rawcopy
from bandwidth.hardware.devices import DeviceSet
from bandwidth.hardware.environment import describe as describe_environment
from bandwidth.hardware.topology import read_topology
from bandwidth.processes.spawn import PACKAGE_ROOT

log = logging.getLogger(__name__)

GPU_SIZES = (1 << 20, 1 << 30)        # nccl-tests -b 1M -e 1G
CPU_SIZES = (1 << 16, 1 << 22)        # 64K .. 4M: Gloo on a few cores is slow

METHODS = {
    "unidirectional": "cudaMemcpyPeerAsync of {p2p_mb:g} MB on the source GPU's stream, bursts "
                      "of {p2p_burst} back to back, median of {repeats}; diagonal: a copy within the "
                      "GPU counting read + write",
    "bidirectional": "both directions, a stream on each GPU, counting both: the burst one way "
                     "then the burst the other way, as p2pBandwidthLatencyTest queues them; "
                     "otherwise as unidirectional",
    "latency": "GPU time per 16-byte cudaMemcpyPeerAsync (copy engine) of {latency_repeat} "
               "queued behind a spin kernel, CUDA events, median of {repeats}",
}


@dataclass(frozen=True)
class CeilingOptions:
    nbytes: int = 256 * 10**6          # host<->device and host memory buffers
    # P2P matrices: p2pBandwidthLatencyTest's 40,000,000 ints per copy and 5 copies per sample.
    # Its bursts matter where the copies are staged through host memory (P2P=Disabled): the
    # longer the burst one way, the less the two directions of a bidirectional cell overlap.
    p2p_nbytes: int = 160 * 10**6
    p2p_burst: int = 5
    repeats: int = 5                   # timed samples; the median is reported
    burst: int = 10                    # back-to-back copies per sample
    latency_repeat: int = 100          # copies per latency sample (the reference's 100)
    sizes: tuple[int, ...] | None = None   # collective sweep; None: by device kind
    iters: int = 20                    # collective calls per timed burst (nccl-tests -n)
    warmup: int = 5                    # untimed collective calls per size (nccl-tests -w)
    skip: frozenset[str] = field(default_factory=frozenset)
    cpu_threads: int | None = None
    timeout_s: float = 600.0

    def __post_init__(self):
        unknown = sorted(self.skip - set(PARTS))
        if unknown:
            raise ConfigError(f"--skip {','.join(unknown)}: unknown part; the parts are "
                              f"{', '.join(PARTS)}")
        for name in ("nbytes", "p2p_nbytes", "p2p_burst", "repeats", "burst", "latency_repeat",
                     "iters"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.warmup < 0:
            raise ConfigError(f"warmup must be 0 or more; got {self.warmup}")

    def sizes_for(self, devices: DeviceSet) -> list[int]:
        if self.sizes is not None:
            return list(self.sizes)
        begin, end = GPU_SIZES if devices.is_cuda else CPU_SIZES
        return size_sweep(begin, end, 2)


def measure_ceilings(devices: DeviceSet, options: CeilingOptions = CeilingOptions(),
                     progress: Callable[[str], None] = log.info,
                     started: Callable[[Ceilings], None] | None = None) -> Ceilings:
    gpus = list(devices.ids) if devices.is_cuda else []
    sizes = options.sizes_for(devices)
    names = ([torch.cuda.get_device_name(g) for g in gpus] if gpus
             else ["host memory"] * devices.n)
    settings = {k: v for k, v in asdict(options).items() if k not in ("sizes", "skip")}
    settings.update(sizes=sizes, skip=sorted(options.skip))
    c = Ceilings(devices={"kind": devices.kind, "ids": list(devices.ids), "names": names},
                 settings=settings, p2p=[], host_links=None, host_memory=None, collectives=None,
                 topology=None, environment=describe_environment(devices))
    if started is not None:
        started(c)            # what is known before measuring: the CLI prints its preamble
    na = c.not_applicable
    skip = options.skip
    if gpus and "topology" not in skip:
        progress("reading the link topology (NVML)")
        c.topology, reason = read_topology(gpus, [rawcopy.pci_bus_id(g) for g in gpus])
        if reason:
            na["topology"] = reason
    elif not gpus:
        na["topology"] = "CPU devices: no GPU links"
    c.p2p = _peer_matrices(devices, options, c.failures, progress)
    if not gpus:
        na["host_links"] = "CPU devices: no host<->device link (replicas live in host memory)"
    elif "host" not in skip:
        c.host_links = [_host_link(g, options, progress) for g in gpus]
        if len(gpus) > 1:
            progress("host path of the local mode: all GPUs down, CPU sum, all GPUs up")
            hp = host.host_path(gpus, options.nbytes, options.repeats, options.cpu_threads)
            c.host_path = dict(asdict(hp), bound_busbw_gbps=hp.busbw_gbps(hp.bound_seconds),
                               serial_busbw_gbps=hp.busbw_gbps(hp.serial_seconds))
    if "cpu" not in skip:
        progress(f"host memory copy and add, {options.nbytes / 1e6:g} MB")
        c.host_memory = HostMemory(**host.host_memory(options.nbytes, options.repeats,
                                                      options.cpu_threads))
    if "nccl" not in skip:
        if devices.n < 2:
            na["collectives"] = "one device: nothing crosses a link (bus factor 0)"
        else:
            c.collectives = _collectives(devices, sizes, options, c.failures, progress)
            if c.collectives is None:
                na["collectives"] = "failed (see failures)"
    for part, section in (("host", "host_links"), ("cpu", "host_memory"),
                          ("nccl", "collectives"), ("topology", "topology")):
        if part in skip and section not in na:
            na[section] = f"skipped (--skip {part})"
    return c


def _peer_matrices(devices: DeviceSet, options: CeilingOptions, failures: list[str],
                   progress) -> list[Matrix]:
    gpus, skip = list(devices.ids), options.skip
    methods = {k: v.format(p2p_mb=options.p2p_nbytes / 1e6, **asdict(options))
               for k, v in METHODS.items()}

    def why_not(key: str) -> str | None:
        if not devices.is_cuda:
            return "CPU devices: no peer-to-peer link (replicas share host memory)"
        if not rawcopy.available():
            return "the CUDA runtime library torch loaded was not found (a static build?)"
        part = "latency" if key.startswith("latency") else "p2p"
        if part in skip:
            return f"skipped (--skip {part})"
        if key.endswith("disabled") and "p2p-disabled" in skip:
            return "skipped (--skip p2p-disabled)"
        return None

    found: dict[str, Matrix] = {}
    for peered in (True, False):
        keys = [k for k in MATRICES if k.endswith("enabled" if peered else "disabled")]
        todo = [k for k in keys if why_not(k) is None]
        if not todo:
            continue
        want_bw = any(not k.startswith("latency") for k in todo)
        want_lat = any(k.startswith("latency") for k in todo)
        try:
            measured = (_measure_peered(gpus, options, want_bw, want_lat, progress) if peered
                        else _measure_unpeered(gpus, options, want_bw, want_lat, progress))
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
            failures.append(f"P2P={'Enabled' if peered else 'Disabled'} matrices: {exc}")
            for k in todo:
                found[k] = Matrix.not_applicable(k, gpus, f"failed: {exc}")
            continue
        for k in todo:
            kind = k.split("_")[0]
            title, unit = MATRICES[k]
            found[k] = Matrix(k, title, unit, methods[kind], gpus, measured.get(kind),
                              notes=list(measured.get("notes", [])))
    return [found.get(k) or Matrix.not_applicable(k, gpus, why_not(k) or "not measured")
            for k in MATRICES]


def _measure_peered(gpus, options, want_bw, want_lat, progress) -> dict:
    progress(f"P2P=Enabled matrices on GPUs {','.join(map(str, gpus))}")
    missing = p2p.enable_peer_access(gpus)
    out = p2p.p2p_matrices(gpus, options.p2p_nbytes, options.repeats, options.p2p_burst,
                           options.latency_repeat, want_bw, want_lat,
                           reachable=lambda i, j: (i, j) not in missing)
    if missing:
        out.notes.append("no peer access (n/a): " + ", ".join(f"{i}->{j}" for i, j in missing))
    return asdict(out)


def _measure_unpeered(gpus, options, want_bw, want_lat, progress) -> dict:
    """Run bandwidth.ceiling.unpeered in a child process; its last stdout line is the JSON."""
    progress("P2P=Disabled matrices (a separate process, copies staged through host memory)")
    argv = [sys.executable, "-m", "bandwidth.ceiling.unpeered", "--gpus", ",".join(map(str, gpus)),
            "--nbytes", str(options.p2p_nbytes), "--repeats", str(options.repeats),
            "--burst", str(options.p2p_burst), "--latency-repeat", str(options.latency_repeat)]
    argv += ([] if want_bw else ["--no-bandwidth"]) + ([] if want_lat else ["--no-latency"])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=options.timeout_s, check=False)
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
        raise RuntimeError(f"the P2P=Disabled process exited with status {done.returncode}: "
                           f"{last.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _host_link(gpu: int, options: CeilingOptions, progress) -> HostLink:
    progress(f"host<->device copies and add on GPU {gpu}, {options.nbytes / 1e6:g} MB")
    rate = {}
    for pinned in (True, False):
        for to_device in (True, False):
            key = f"{'h2d' if to_device else 'd2h'}_{'pinned' if pinned else 'pageable'}_gbps"
            # pageable copies take ~15 ms each: shorter bursts
            rate[key] = host.host_link_gbps(gpu, options.nbytes, pinned, to_device,
                                            options.repeats, options.burst if pinned else 2)
    add = host.device_add_gbps(gpu, options.nbytes, options.repeats, options.burst)
    torch.cuda.empty_cache()
    return HostLink(gpu, device_add_gbps=add, **rate)


def _collectives(devices: DeviceSet, sizes: list[int], options: CeilingOptions,
                 failures: list[str], progress) -> CollectiveSweep | None:
    backend = "nccl" if devices.is_cuda else "gloo"
    one = collectives.one_process(devices)
    who = (f"one process driving {devices.n} GPUs" if one else f"{devices.n} processes")
    progress(f"{backend} collectives, {who}, sizes {sizes[0]} to {sizes[-1]} B")
    try:
        rows = collectives.sweep(devices, sizes, iters=options.iters, warmup=options.warmup,
                                 repeats=options.repeats, timeout_s=options.timeout_s)
    except BandwidthError as exc:
        failures.append(f"collectives: {exc}")
        return None
    timing = (f"perf_counter around {options.iters} back-to-back calls between device "
              f"synchronisations (nccl-tests' default), "
              + ("one process driving every GPU through torch.cuda.nccl (nccl-tests -g N), "
                 if one else "mean of the ranks, ")
              + f"median of {options.repeats}")
    note = None if devices.is_cuda else (
        f"Gloo stands in for NCCL (CPU devices); calls per timed burst and warm-up calls cut to "
        f"{collectives.CPU_BURST_BYTES >> 20} MiB of data each (at least 1 call), so that large "
        "sizes end in minutes")
    return CollectiveSweep(backend, devices.n, options.iters, options.warmup, options.repeats,
                           timing, note, rows)
