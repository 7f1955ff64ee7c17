"""The GPUs of this host checked in rounds (``--gpus-check``): bandwidth.links.gpurounds' rules,
driven by real copies.

    python -m bandwidth.ceiling --gpus-check --json G.json      # exit 1 naming what is slow
    python -m bandwidth.hostgate G.json --junit gpus.xml         # the same verdict, for CI
    python -m bandwidth.ceiling --gpus-check --no-peer 0-1       # what a lost NVLink path reads

First each GPU's host link alone: pinned host->device and device->host copies (``host``'s
``host_link_gbps``, ``--mb``, ``--burst``). Then rounds of disjoint GPU pairs, every pair of a
round at once and each pair both ways at once: ``cudaMemcpyPeerAsync`` of ``--p2p-mb`` on a
stream of the source GPU (as ``p2p`` copies), ``--p2p-burst`` back to back, CUDA events around
each direction's burst, every stream held behind a spin kernel until the host has queued the
whole round (``timing``'s gate); a warm-up and ``--repeats`` samples, the median per direction.
NVML's figures (``expect``) are each pair's reference where there is no median (two GPUs).

``--no-peer 0-1`` leaves peer access off for that pair, so the driver stages its copies through
host memory: the pair then reads at the host-staging rate, as a pair that lost its NVLink path
(what ``NCCL_P2P_DISABLE=1`` makes NCCL do), which the check must name. Without a GPU the check
is waived in one line: CPU devices have no GPU links.
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from bandwidth.ceiling import host
from bandwidth.ceiling.expect import expectations
from bandwidth.ceiling.timing import MAX_GATE_SECONDS, cycles_per_second
from bandwidth.config.values import parse_gpus
from bandwidth.errors import ConfigError
from bandwidth.files import write_atomic
from bandwidth.hardware import rawcopy
from bandwidth.hardware.devices import visible_gpus
from bandwidth.hardware.topology import read_topology
from bandwidth.links.gpudoc import gpu_document, load_gpu_rounds, named_lines
from bandwidth.links.gpurounds import GpuRounds, HostLink, pair_key
from bandwidth.textformat import render as render_table


def label(gpu: int) -> str:
    return f"GPU {gpu}"


def parse_no_peer(text: str | None, gpus: list[int]) -> list[tuple[int, int]]:
    """``--no-peer 0-1,2-3`` or ``all``: pairs of the checked GPUs, each once, sorted."""
    if not text:
        return []
    if text.strip() == "all":
        return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    out = set()
    for part in text.split(","):
        ends = part.strip().split("-")
        if len(ends) != 2 or not all(e.strip().isdigit() for e in ends) \
                or int(ends[0]) == int(ends[1]) or not {int(e) for e in ends} <= set(gpus):
            raise ConfigError(f"--no-peer takes pairs of two different checked GPUs, such as "
                              f"0-1,2-3, or 'all'; got {part.strip()!r} (GPUs checked: "
                              f"{','.join(map(str, gpus))})")
        a, b = sorted(int(e) for e in ends)
        out.add((a, b))
    return sorted(out)


def expected_figures(topology: dict | None, gpus: list[int], unpeered: set) -> tuple:
    """From NVML's topology: ({pair of labels: GB/s}, {pair: basis}, {label: (GB/s, basis)}).
    A pair without NVLink is expected at the slower GPU's PCIe figure; a pair the platform gives
    no peer access (``unpeered``, not ``--no-peer``) gets no figure."""
    if not topology:
        return {}, {}, {}
    pairs, basis, hosts = {}, {}, {}
    for e in expectations(topology):
        first = e.name.split()[1]
        if "<->" in first:
            a, b = (label(int(x)) for x in first.split("<->"))
            pairs[pair_key(a, b)], basis[pair_key(a, b)] = e.expected_gbps, e.basis
        else:
            hosts[label(int(first))] = (e.expected_gbps, e.basis)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            key = pair_key(label(a), label(b))
            if key in pairs or (a, b) in unpeered:
                continue
            figures = [hosts.get(label(g), (None, ""))[0] for g in (a, b)]
            if None not in figures:
                pairs[key], basis[key] = min(figures), "no NVLink: the slower GPU's PCIe"
    return {k: v for k, v in pairs.items() if v}, basis, hosts


class PairCopies:
    """A source and a destination buffer and a stream on every GPU; ``measure(pairs)`` copies
    both ways of every pair at once and returns {(src, dst): GB/s}."""

    def __init__(self, gpus: list[int], nbytes: int, repeats: int, burst: int):
        self.nbytes, self.repeats, self.burst = nbytes, repeats, burst
        self.src = {g: torch.ones(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in gpus}
        self.dst = {g: torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in gpus}
        self.stream = {g: torch.cuda.Stream(device=g) for g in gpus}
        self.gate_seconds = 2e-3

    def measure(self, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
        copies = {(s, d): rawcopy.PeerCopy(self.dst[d], self.src[s], self.stream[s])
                  for a, b in pairs for s, d in ((a, b), (b, a))}
        seconds = {k: [] for k in copies}
        with rawcopy.keep_device(torch.cuda.current_device()):   # a copy sets its own device
            for i in range(self.repeats + 1):            # the first sample is a warm-up
                for k, value in self._sample(copies).items():
                    if i:
                        seconds[k].append(value)
        return {k: self.nbytes * self.burst / statistics.median(v) / 1e9
                for k, v in seconds.items()}

    def _sample(self, copies: dict) -> dict[tuple[int, int], float]:
        """GPU seconds of each direction's burst, every stream released at once by its gate."""
        gpus = sorted({g for k in copies for g in k})
        while True:
            for g in gpus:
                torch.cuda.synchronize(g)
            events = {}
            for s, d in copies:
                stream = self.stream[s]
                with torch.cuda.device(s), torch.cuda.stream(stream):
                    torch.cuda._sleep(int(self.gate_seconds * cycles_per_second(s)))
                start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record(stream)
                events[(s, d)] = (start, stop)
            begin = time.perf_counter()
            for _ in range(self.burst):
                for copy in copies.values():
                    copy()
            for (s, _), (_, stop) in events.items():
                stop.record(self.stream[s])
            queued = time.perf_counter() - begin
            for _, stop in events.values():
                stop.synchronize()
            if queued < 0.8 * self.gate_seconds or self.gate_seconds >= MAX_GATE_SECONDS:
                return {k: start.elapsed_time(stop) / 1e3 for k, (start, stop) in events.items()}
            self.gate_seconds = min(2 * max(self.gate_seconds, queued), MAX_GATE_SECONDS)


def set_peer_access(gpus: list[int], no_peer: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """Peer access on for every pair that has it, off for ``no_peer``; the pairs (a < b) that the
    platform gives none. No torch cross-device copy is made in this process, so it stays so."""
    unpeered = set()
    off = {frozenset(p) for p in no_peer}
    for i in gpus:
        for j in gpus:
            if i == j:
                continue
            if frozenset((i, j)) in off:
                rawcopy.disable_peer_access(i, j)
            elif torch.cuda.can_device_access_peer(i, j):
                rawcopy.enable_peer_access(i, j)
            else:
                unpeered.add((min(i, j), max(i, j)))
    return unpeered


def run_rounds(check: GpuRounds, measure, gpus: list[int]) -> list[float]:
    """Drive the planner: each round's pairs of CUDA ids to ``measure``, its rates recorded."""
    ids = {label(g): g for g in gpus}
    seconds = []
    while (pairs := check.next_round()):
        started = time.perf_counter()
        rates = measure([(ids[a], ids[b]) for a, b in pairs])
        check.record({(label(s), label(d)): gbps for (s, d), gbps in rates.items()})
        seconds.append(time.perf_counter() - started)
    return seconds


def measure_gpus(gpus: list[int], options, no_peer, min_percent: float, expect_percent: float,
                 progress=lambda message: None) -> dict:
    """The whole check on real GPUs: its document (bandwidth.links.gpudoc)."""
    if not rawcopy.available():
        raise ConfigError("the GPU check copies with cudaMemcpyPeerAsync: the CUDA runtime "
                          "library torch loaded was not found")
    progress("reading the link topology (NVML)")
    topology, reason = read_topology(gpus, [rawcopy.pci_bus_id(g) for g in gpus])
    rates = []
    for g in gpus:                     # first, so that every GPU has its context for the next
        progress(f"host link of GPU {g}: pinned copies of {options.nbytes / 1e6:g} MB each way")
        rates.append([host.host_link_gbps(g, options.nbytes, True, to_device, options.repeats,
                                          options.burst) for to_device in (True, False)])
    torch.cuda.empty_cache()
    unpeered = set_peer_access(gpus, no_peer) if len(gpus) > 1 else set()
    pairs, basis, hosts = expected_figures(topology.to_dict() if topology else None, gpus,
                                           unpeered)
    links = [HostLink(label(g), h2d, d2h, *hosts.get(label(g), (None, "")))
             for g, (h2d, d2h) in zip(gpus, rates)]
    check = GpuRounds([label(g) for g in gpus], links, pairs, min_percent, expect_percent)
    copies = PairCopies(gpus, options.p2p_nbytes, options.repeats, options.p2p_burst) \
        if len(gpus) > 1 else None
    progress(f"{check.screen_rounds} rounds of GPU pairs, both ways at once")
    seconds = run_rounds(check, copies.measure, gpus) if copies else []
    doc = gpu_document(
        check, devices=gpus, names=[torch.cuda.get_device_name(g) for g in gpus],
        expected_basis=basis, round_seconds=seconds,
        no_peer=[(label(a), label(b)) for a, b in no_peer], nbytes=options.p2p_nbytes,
        repeats=options.repeats,
        method=f"cudaMemcpyPeerAsync of {options.p2p_nbytes / 1e6:g} MB, {options.p2p_burst} "
               f"back to back each way at once, CUDA events, median of {options.repeats}; host "
               f"links: pinned copy_ of {options.nbytes / 1e6:g} MB, bursts of {options.burst}")
    doc["topology_note"] = reason
    doc["no_peer_access"] = [[label(a), label(b)] for a, b in sorted(unpeered)]
    return doc


def _pair_table(doc: dict) -> list[str]:
    """Each measured pair: the median of each direction, NVML's figure."""
    rates: dict[tuple[str, str], tuple[list, list]] = {}
    for m in doc["measurements"]:
        a, b = m["pair"]
        key = pair_key(a, b)
        ab, ba = m["gbps"] if key == (a, b) else m["gbps"][::-1]
        rates.setdefault(key, ([], []))[0].append(ab)
        rates[key][1].append(ba)
    expected = {tuple(e["pair"]): e["gbps"] for e in doc["expected_pairs"]}
    cells = [[f"{a}<->{b}", f"{statistics.median(ab):.2f}", f"{statistics.median(ba):.2f}",
              str(len(ab)), f"{expected[(a, b)]:.1f}" if (a, b) in expected else "-"]
             for (a, b), (ab, ba) in sorted(rates.items())]
    return render_table(["pair", "first->second GB/s", "second->first GB/s", "times",
                         "NVML GB/s"], cells, right={1, 2, 3, 4}) if cells else []


def render(doc: dict) -> list[str]:
    """The host links, the pairs, the rounds, the verdict's names, the verdict line."""
    v = doc["verdict"]
    names = sorted(set(doc["names"]))
    lines = [f"GPU check in rounds: {len(doc['gpus'])} GPUs ({', '.join(names)}), rule "
             f"{doc['rule']}, {doc['rounds']} rounds, {v['pairs_measured']} of "
             f"{v['pairs_total']} pairs measured, {doc['seconds']:.2f} s of rounds"]
    cells = [[h["gpu"], f"{h['h2d_gbps']:.2f}", f"{h['d2h_gbps']:.2f}",
              "-" if h["expected_gbps"] is None else f"{h['expected_gbps']:.1f}"]
             for h in doc["host_links"]]
    lines += render_table(["host link", "host->device GB/s", "device->host GB/s", "NVML GB/s"],
                          cells, right={1, 2, 3})
    lines += _pair_table(doc)
    for k, (pairs, seconds) in enumerate(zip(doc["round_pairs"], doc["round_seconds"])):
        lines.append(f"round {k + 1:>2}: {pairs:>2} pairs, {seconds:7.3f} s")
    lines += named_lines(load_gpu_rounds("the GPU check", {"gpu_rounds": doc}).verdict())
    notes = v["notes"] + ([f"--no-peer: peer access off for "
                           f"{', '.join('<->'.join(p) for p in doc['no_peer'])}"]
                          if doc["no_peer"] else [])
    notes += [f"no peer access on this platform: {', '.join('<->'.join(p) for p in pairs)}"
              for pairs in [doc.get("no_peer_access")] if pairs]
    lines += [f"# note: {n}" for n in notes] + [f"# {doc['method']}", v["line"]]
    return lines


def gpus_main(args, options, min_percent: float, expect_percent: float, progress) -> int:
    """``--gpus-check``: measure, print, write ``{"gpu_rounds": ...}``; 1 when something is
    named, 0 when not (or waived: no GPU)."""
    if args.cpus is not None:
        raise ConfigError("--gpus-check checks GPU links: CPU devices have none (drop --cpus)")
    visible = visible_gpus()
    if not visible:
        print("# GPU check waived: no CUDA GPU is visible here (CPU devices have no GPU links); "
              "nothing measured" + (f", {args.json_path} not written" if args.json_path else ""))
        return 0
    gpus = list(parse_gpus(args.gpus)) if args.gpus is not None else list(range(visible))
    if len(set(gpus)) < len(gpus) or max(gpus) >= visible:
        raise ConfigError(f"--gpus-check --gpus {args.gpus}: each GPU once, of the {visible} "
                          f"visible (0..{visible - 1})")
    no_peer = parse_no_peer(args.no_peer, gpus)
    doc = measure_gpus(gpus, options, no_peer, min_percent, expect_percent, progress)
    print("\n".join(render(doc)), flush=True)
    if args.json_path:
        write_atomic(args.json_path, json.dumps({"gpu_rounds": doc}, indent=1) + "\n",
                     "the GPU check")
        print(f"# wrote {args.json_path}")
    return 1 if doc["verdict"]["failed"] else 0
