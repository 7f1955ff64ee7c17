"""What each link should carry, from NVML's facts, and the gate that holds the measured ceilings to
it (``python -m bandwidth.ceiling --expect-links``): a machine judged without any baseline.

Per link, one direction, GB/s:

- NVLink between a GPU pair: active links x the per-link rate of the generation (NVIDIA's
  figures: NVLink 1 (P100) 20, NVLink 2 (V100) and 3 (A100) 25, NVLink 4 (H100) 25, NVLink 5
  (B200) 50 GB/s per link and direction), held against the slower direction of the pair's
  peer-to-peer copy (p2pBandwidthLatencyTest's unidirectional P2P=Enabled matrix).
- PCIe of each GPU: the GPU's maximum lanes x the per-lane rate of the highest generation the GPU
  and its slot support (gen1 0.25, gen2 0.5 with 8b/10b coding; gen3 0.985, gen4 1.969, gen5
  3.938 with 128b/130b; gen6 7.563 GB/s with FLIT coding), held against the slower of the pinned
  host->device and device->host copies. The maximum width, not the trained one, is the
  expectation: a link that trained at fewer lanes carries less and fails.

Faults NVML shows before any rate is compared are failures too, naming the link: a PCIe link
trained at fewer lanes than the GPU has; a GPU pair with fewer NVLinks than the other pairs of
the same GPUs (an NVSwitch system's pairs all have the same count); a GPU whose PCIe generation
is below that of the other GPUs of its model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bandwidth.gates import GateRecord

NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
DEFAULT_PCT = 60.0
PASS, BELOW, DEGRADED, NOT_MEASURED, UNKNOWN = (
    "ok", "BELOW EXPECTED", "LINK DEGRADED", "NOT MEASURED", "expectation unknown")


@dataclass(frozen=True)
class Expectation:
    name: str                      # "GPU 0<->1 NVLink", "GPU 0 PCIe"
    expected_gbps: float | None    # None: NVML does not say enough
    basis: str                     # how the figure follows from NVML's facts, in words
    fault: str | None = None       # a degradation NVML shows by itself


def expectations(topology: dict) -> list[Expectation]:
    """One per NVLink-connected GPU pair and one per GPU's PCIe link, from a Topology's dict
    (bandwidth.hardware.topology.Topology.to_dict(), as the ceiling document holds it)."""
    gpus = topology.get("gpus") or []
    out = []
    counts = {}
    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            if i < j:
                label = (topology.get("matrix") or [[None] * len(gpus)] * len(gpus))[i][j]
                if label and label.startswith("NV") and label[2:].isdigit():
                    counts[(a["gpu"], b["gpu"])] = int(label[2:])
    usual = Counter(counts.values()).most_common(1)[0][0] if counts else None
    by_id = {g["gpu"]: g for g in gpus}
    for (a, b), links in counts.items():
        gen = by_id[a].get("nvlink_generation") or by_id[b].get("nvlink_generation")
        rate = NVLINK_GBPS.get(gen)
        fault = None
        if len(counts) > 1 and links < usual:
            fault = f"{links} NVLinks where the other GPU pairs have {usual}"
        out.append(Expectation(
            f"GPU {a}<->{b} NVLink", None if rate is None else links * rate,
            f"{links} NVLinks x {rate:g} GB/s (NVLink {gen})" if rate else
            f"{links} NVLinks of an unknown generation", fault))
    gens = Counter((g.get("name"), g.get("pcie_gen_max")) for g in gpus)
    for g in gpus:
        gen, width, width_max = g.get("pcie_gen_max"), g.get("pcie_width"), g.get("pcie_width_max")
        lanes = width_max or width
        rate = PCIE_LANE_GBPS.get(gen)
        faults = []
        if width and width_max and width < width_max:
            faults.append(f"trained at x{width} of x{width_max}")
        best_gen = max((gn for (name, gn), _ in gens.items()
                        if name == g.get("name") and gn is not None), default=None)
        if gen and best_gen and gen < best_gen:
            faults.append(f"gen{gen} where the other {g.get('name')} GPUs have gen{best_gen}")
        out.append(Expectation(
            f"GPU {g['gpu']} PCIe", rate * lanes if rate and lanes else None,
            f"gen{gen} x{lanes}: {lanes} lanes x {rate:g} GB/s" if rate and lanes else
            f"gen{gen or '?'} x{lanes or '?'}", "; ".join(faults) or None))
    return out


def _pair_gbps(ceilings: dict, a: int, b: int) -> float | None:
    for m in ceilings.get("p2p") or []:
        if m.get("key") == "unidirectional_enabled" and m.get("values"):
            ids = m["devices"]
            i, j = ids.index(a), ids.index(b)
            both = [m["values"][i][j], m["values"][j][i]]
            return None if None in both else min(both)
    return None


def _host_gbps(ceilings: dict, gpu: int) -> float | None:
    for h in ceilings.get("host_links") or []:
        if h.get("gpu") == gpu:
            both = [h.get("h2d_pinned_gbps"), h.get("d2h_pinned_gbps")]
            return None if None in both else min(both)
    return None


def link_gates(ceilings: dict, min_pct: float = DEFAULT_PCT) -> list[GateRecord]:
    """One record per link of a ceiling document (Ceilings.to_dict()): its measured rate against
    ``min_pct`` % of its expectation, and any fault NVML shows; a link whose rate was not
    measured fails (a missing measurement is not a pass)."""
    topology = ceilings.get("topology") or {}
    out = []
    for e in expectations(topology):
        first = e.name.split()[1]
        if "<->" in first:
            a, b = (int(x) for x in first.split("<->"))
            measured = _pair_gbps(ceilings, a, b)
        else:
            measured = _host_gbps(ceilings, int(first))
        threshold = None if e.expected_gbps is None else e.expected_gbps * min_pct / 100.0
        detail = [f"expected {e.expected_gbps:.1f} GB/s from {e.basis}"
                  if e.expected_gbps is not None else f"NVML: {e.basis}"]
        if e.fault:
            verdict = DEGRADED
            detail.insert(0, e.fault)
        elif measured is None:
            verdict = NOT_MEASURED
        elif threshold is None:
            verdict = UNKNOWN
        else:
            verdict = BELOW if measured < threshold else PASS
            detail.append(f"{100 * measured / e.expected_gbps:.0f} % of it")
        out.append(GateRecord("expect", e.name, verdict, verdict in (BELOW, DEGRADED,
                                                                       NOT_MEASURED),
                              measured, threshold,
                              f"at least {min_pct:g} % of what NVML says the link carries",
                              "; ".join(detail)))
    return out
