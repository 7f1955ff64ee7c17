"""Text of a Ceilings tree: p2pBandwidthLatencyTest's matrices, a host table, nccl-tests' table.

    print("\n".join(render.lines(ceilings)))

Every figure that does not apply prints as ``n/a`` with its reason, never as 0.
"""

from __future__ import annotations

from bandwidth.ceiling.model import Ceilings, Matrix

NA = "n/a"


def _cell(value: float | None, width: int = 8, digits: int = 2) -> str:
    return f"{NA:>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def matrix_lines(m: Matrix) -> list[str]:
    if m.values is None:
        return [f"{m.title}: {NA} ({m.reason})"]
    corner = "   GPU" if m.unit == "us" else "   D\\D"
    lines = [m.title, corner + "".join(f"{d:>8d}" for d in m.devices)]
    for d, row in zip(m.devices, m.values):
        lines.append(f"{d:>6d}" + "".join(_cell(v) for v in row))
    lines.append(f"# {m.method}")
    lines += [f"# note: {note}" for note in m.notes]
    return lines


def preamble(c: Ceilings) -> list[str]:
    env, dev = c.environment, c.devices
    versions = ", ".join(f"{label} {env[k]}" for k, label in
                         (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"),
                          ("driver", "driver")) if env.get(k))
    kind = "GPUs" if dev["kind"] == "cuda" else "CPU devices"
    names = ", ".join(sorted(set(dev["names"])))
    return [f"# ceilings on {env.get('host', '?')}: {versions}",
            f"# devices: {len(dev['ids'])} {kind} ({','.join(map(str, dev['ids']))}): {names}"]


def host_lines(c: Ceilings) -> list[str]:
    mb = c.settings["nbytes"] / 1e6
    if c.host_links is None:
        lines = [f"Host<->device bandwidth (GB/s): {NA} ({c.not_applicable.get('host_links')})"]
    else:
        lines = [(f"Host<->device bandwidth (GB/s), {mb:g} MB copies, per GPU; GPU add: "
                  "torch.add counting 3 x bytes"),
                 (f"{'GPU':>6}{'H2D pinned':>12}{'D2H pinned':>12}{'H2D pageable':>14}"
                  f"{'D2H pageable':>14}{'GPU add':>10}")]
        for h in c.host_links:
            lines.append(f"{h.gpu:>6d}{_cell(h.h2d_pinned_gbps, 12)}{_cell(h.d2h_pinned_gbps, 12)}"
                         f"{_cell(h.h2d_pageable_gbps, 14)}{_cell(h.d2h_pageable_gbps, 14)}"
                         f"{_cell(h.device_add_gbps, 10, 1)}")
    hp = c.host_path
    if hp is not None:
        lines.append(f"Host path of the local mode ({hp['devices']} GPUs at once, "
                     f"{hp['nbytes'] / 1e6:g} MB): d2h {hp['d2h_seconds'] * 1e3:.2f} ms, sum "
                     f"{hp['sum_seconds'] * 1e3:.2f} ms ({hp['threads']} threads), h2d "
                     f"{hp['h2d_seconds'] * 1e3:.2f} ms, all at once "
                     f"{hp['overlap_seconds'] * 1e3:.2f} ms; pipelined bound "
                     f"{hp['bound_busbw_gbps']:.2f} GB/sec per gpu")
    m = c.host_memory
    if m is None:
        lines.append(f"Host memory: {NA} ({c.not_applicable.get('host_memory')})")
    else:
        lines.append(f"Host memory ({m.nbytes / 1e6:g} MB, {m.threads} CPU threads): copy "
                     f"{m.copy_gbps:.2f} GB/s (copy_, read + write), sum {m.sum_gbps:.2f} GB/s "
                     "(torch.add, 3 x bytes)")
    return lines


def collective_lines(c: Ceilings) -> list[str]:
    s = c.collectives
    if s is None:
        return [f"Collectives: {NA} ({c.not_applicable.get('collectives')})"]
    names = list(s.rows[0]["results"]) if s.rows else []
    lines = [(f"# {s.backend.upper()} collectives, {s.ranks} ranks, float32 sum, out-of-place "
              "buffers except all_reduce and broadcast (in place); busbw = algbw x factor "
              "(nccl-tests)"),
             f"# timing: {s.iters} iterations after {s.warmup} warm-up; {s.timing}"]
    if s.note:
        lines.append(f"# note: {s.note}")
    lines.append("#" + " " * 35 + "".join(f"{n:>18}" for n in names))
    lines.append(f"#{'size (B)':>13}{'count':>14}{'type':>8}"
                 + "".join(f"{'algbw':>9}{'busbw':>9}" for _ in names) + f"{'#wrong':>8}")
    for row in s.rows:
        r = row["results"]
        lines.append(f"{row['nbytes']:>14d}{row['count']:>14d}{'float':>8}"
                     + "".join(_cell(r[n]["algbw_gbps"], 9) + _cell(r[n]["busbw_gbps"], 8)
                               + ("*" if r[n].get("host_paced") else " ") for n in names)
                     + f"{sum(r[n]['wrong'] for n in names):>8d}")
    if any(r.get("host_paced") for row in s.rows for r in row["results"].values()):
        lines.append("# *: host-paced: the GPU finished as soon as the host queued the last call, "
                     "so the per-call host cost, not the link, set this figure")
    if s.rows:
        last = s.rows[-1]
        lines.append(f"# busbw at {last['nbytes']} B (GB/s): " + ", ".join(
            f"{n} {last['results'][n]['busbw_gbps']:.2f}" for n in names))
    return lines


def topology_lines(c: Ceilings) -> list[str]:
    t = c.topology
    if t is None:
        return [f"Topology: {NA} ({c.not_applicable.get('topology')})"]

    def pair(cur, top):
        return f"{cur if cur is not None else '?'}/{top if top is not None else '?'}"

    lines = ["Topology (NVML): PCIe generation and width current/max; NVLinks active",
             (f"{'GPU':>6}  {'name':<24}{'bus id':<14}{'PCIe gen':>9}{'width':>8}"
              f"{'NVLinks':>9}{'NVLink gen':>12}")]
    for g in t.gpus:
        gen = "-" if not g.nvlinks else (g.nvlink_generation or "?")
        lines.append(f"{g.gpu:>6d}  {(g.name or '?')[:23]:<24}{(g.pci_bus_id or '?'):<14}"
                     f"{pair(g.pcie_gen, g.pcie_gen_max):>9}"
                     f"{pair(g.pcie_width, g.pcie_width_max):>8}"
                     f"{g.nvlinks if g.nvlinks is not None else NA:>9}{gen:>12}")
        if g.errors:
            lines.append("#   not read: " + "; ".join(f"{k}: {v}" for k, v in g.errors.items()))
    lines.append("      " + "".join(f"{'GPU' + str(g.gpu):>7}" for g in t.gpus))
    for g, row in zip(t.gpus, t.matrix):
        lines.append(f"{'GPU' + str(g.gpu):>6}" + "".join(f"{x or '?':>7}" for x in row))
    lines += [f"# note: {n}" for n in t.notes]
    return lines


def lines(c: Ceilings) -> list[str]:
    out = preamble(c)
    for m in c.p2p:
        out += [""] + matrix_lines(m)
    for section in (host_lines, collective_lines, topology_lines):
        out += [""] + section(c)
    if c.failures:
        out += [""] + [f"# FAILED: {f}" for f in c.failures]
    return out
