"""The GPUs' links as NVML reports them: PCIe generation and width, active NVLinks and their
generation, and a GPU-pair matrix like ``nvidia-smi topo -m`` (NV# / PIX / PXB / PHB / NODE / SYS).

    topo, reason = read_topology([0, 1], bus_ids=["0000:00:06.0", "0000:00:07.0"])
    topo.gpus[0].nvlinks, topo.matrix[0][1]        # 18, "NV18"
    compact_links(topo)    # {"nvlinks": {"0-1": 18}, "pcie": {"0": {"gen": 5, "width": 16}, ...}}

Needs ``pynvml`` (package nvidia-ml-py), imported only here and only when called; without it, or
without GPUs, the answer is ``(None, reason)``. Every NVML call may fail on some GPU, driver or
virtual machine: each failure leaves its field None and is recorded in ``errors``. GPUs are found
by PCI bus id when one is given (CUDA and NVML may number them differently), else by index.
PCIe links slow down when idle, so the current generation can read lower than the maximum.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# NVLink generation of each GPU architecture (NVML's link version is not reported consistently
# across drivers: some give the generation, some nvmlNvlinkVersion_t, so both are kept).
NVLINK_GENERATION = {"PASCAL": 1, "VOLTA": 2, "TURING": 2, "AMPERE": 3, "HOPPER": 4,
                     "BLACKWELL": 5}
# nvmlGpuTopologyLevel_t -> nvidia-smi topo's label
TOPOLOGY_LABELS = {"NVML_TOPOLOGY_INTERNAL": "INT", "NVML_TOPOLOGY_SINGLE": "PIX",
                   "NVML_TOPOLOGY_MULTIPLE": "PXB", "NVML_TOPOLOGY_HOSTBRIDGE": "PHB",
                   "NVML_TOPOLOGY_NODE": "NODE", "NVML_TOPOLOGY_SYSTEM": "SYS"}


@dataclass
class GpuLinks:
    gpu: int                          # CUDA device index
    name: str | None = None
    pci_bus_id: str | None = None
    pcie_gen: int | None = None       # current (drops when idle)
    pcie_gen_max: int | None = None
    pcie_width: int | None = None     # current lanes
    pcie_width_max: int | None = None
    nvlinks: int | None = None        # active NVLinks (0: none)
    nvlink_version: int | None = None     # as NVML reports it for the first active link
    nvlink_generation: int | None = None  # from the architecture, when links are active
    errors: dict[str, str] = field(default_factory=dict)   # field -> NVML error


@dataclass
class Topology:
    gpus: list[GpuLinks]
    matrix: list[list[str | None]]    # [i][j]: "X", "NV18", "PIX", ..., None if unknown
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        return cls([GpuLinks(**g) for g in data["gpus"]], data["matrix"], list(data["notes"]))


def nvlink_count(label: str | None) -> int | None:
    """NVLinks between a GPU pair from its topology label: ``NV18`` -> 18, a PCIe path (``PIX``,
    ``SYS``, ...) -> 0, unknown -> None."""
    if label is None:
        return None
    return int(label[2:]) if label.startswith("NV") and label[2:].isdigit() else 0


def compact_links(topo: Topology) -> dict:
    """What a hardware fingerprint keeps of the topology (bandwidth.results.document.fingerprint):
    ``{"nvlinks": {"0-1": 18, ...}, "pcie": {"0": {"gen": 5, "width": 16}, ...}}``, keyed by CUDA
    device index; None where NVML could not tell. ``gen`` is the highest generation the GPU and
    its slot support (the current one drops when the link idles), ``width`` the lanes the link
    trained at (a GPU that lost lanes shows fewer)."""
    ids = [g.gpu for g in topo.gpus]
    nvlinks = {f"{a}-{b}": nvlink_count(topo.matrix[i][j])
               for i, a in enumerate(ids) for j, b in enumerate(ids) if i < j}
    pcie = {str(g.gpu): {"gen": g.pcie_gen_max, "width": g.pcie_width} for g in topo.gpus}
    return {"nvlinks": nvlinks, "pcie": pcie}


def pcie_text(link: dict) -> str:
    """An entry of compact_links' ``pcie``, as ``gen5 x16`` (``?`` where unknown)."""
    return f"gen{link.get('gen') or '?'} x{link.get('width') or '?'}"


def read_topology(gpus: list[int], bus_ids: list[str | None] | None = None
                  ) -> tuple[Topology | None, str | None]:
    """(Topology, None), or (None, why not)."""
    return with_nvml(gpus, lambda nvml: _read(nvml, gpus, bus_ids or [None] * len(gpus)))


def with_nvml(gpus: list[int], read):
    """``read(pynvml)`` inside one NVML session: (its result, None), or (None, why NVML could not
    tell: no GPU, pynvml missing, NVML not starting)."""
    if not gpus:
        return None, "no GPU"
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML cannot start: {exc}"
    try:
        return read(pynvml), None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def normalise_bus_id(bus_id: str) -> str:
    """``00000000:00:06.0`` and ``0000:00:06.0`` -> ``0000:00:06.0``."""
    parts = _text(bus_id).strip().lower().split(":")
    domain = int(parts[-3], 16) if len(parts) >= 3 else 0
    return f"{domain:04x}:{int(parts[-2], 16):02x}:{parts[-1]}"


class _Fields:
    """Calls NVML functions for one GPU, turning each failure into None plus an error entry."""

    def __init__(self, nvml, links: GpuLinks):
        self.nvml, self.links = nvml, links

    def get(self, name: str, fn_name: str, *args):
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            self.links.errors[name] = f"{fn_name} is not in this pynvml"
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            self.links.errors[name] = str(exc)
            return None


def _read(nvml, gpus: list[int], bus_ids: list[str | None]) -> Topology:
    notes, handles, found = [], [], []
    for gpu, bus_id in zip(gpus, bus_ids):
        links = GpuLinks(gpu)
        f = _Fields(nvml, links)
        if bus_id:
            handle = f.get("handle", "nvmlDeviceGetHandleByPciBusId", bus_id.encode())
        else:
            handle = f.get("handle", "nvmlDeviceGetHandleByIndex", gpu)
            notes.append(f"GPU {gpu}: no PCI bus id; NVML index {gpu} assumed to be the same GPU")
        handles.append(handle)
        found.append(links)
        if handle is not None:
            _read_gpu(nvml, f, handle)
    remotes = [_nvlink_remotes(nvml, h) if h is not None else [] for h in handles]
    matrix = [[_pair_label(nvml, a, b, ha, hb, ra, rb)
               for b, hb, rb in zip(found, handles, remotes)]
              for a, ha, ra in zip(found, handles, remotes)]
    return Topology(found, matrix, notes)


def _read_gpu(nvml, f: _Fields, handle) -> None:
    links = f.links
    name = f.get("name", "nvmlDeviceGetName", handle)
    links.name = None if name is None else _text(name)
    pci = f.get("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    links.pci_bus_id = None if pci is None else normalise_bus_id(pci.busId)
    links.pcie_gen = f.get("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", handle)
    links.pcie_gen_max = f.get("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", handle)
    links.pcie_width = f.get("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", handle)
    links.pcie_width_max = f.get("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", handle)
    active = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError as exc:
            if link == 0:                   # no NVLink at all (or not readable here)
                links.errors["nvlinks"] = str(exc)
            break
        if state == getattr(nvml, "NVML_FEATURE_ENABLED", 1):
            active.append(link)
    links.nvlinks = len(active) if "nvlinks" not in links.errors else None
    if active:
        links.nvlink_version = f.get("nvlink_version", "nvmlDeviceGetNvLinkVersion", handle,
                                     active[0])
        arch = f.get("nvlink_generation", "nvmlDeviceGetArchitecture", handle)
        links.nvlink_generation = next(
            (gen for name, gen in NVLINK_GENERATION.items()
             if arch is not None and arch == getattr(nvml, f"NVML_DEVICE_ARCH_{name}", None)),
            None)


def _nvlink_remotes(nvml, handle) -> list[tuple[str | None, bool]]:
    """Per active link: (the remote end's bus id, whether it is an NVSwitch)."""
    out = []
    switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != getattr(nvml, "NVML_FEATURE_ENABLED",
                                                                      1):
                continue
        except nvml.NVMLError:
            break
        try:
            remote = normalise_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except (nvml.NVMLError, ValueError, IndexError):
            remote = None
        try:
            is_switch = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == switch
        except (nvml.NVMLError, AttributeError):
            is_switch = False
        out.append((remote, is_switch))
    return out


def _pair_label(nvml, a: GpuLinks, b: GpuLinks, ha, hb, ra, rb) -> str | None:
    """nvidia-smi topo's label: X, NV# (direct links, or links into a shared NVSwitch fabric: the
    smaller link count of the two), else the PCIe path from their common ancestor."""
    if a is b:
        return "X"
    direct = sum(1 for remote, _ in ra if remote is not None and remote == b.pci_bus_id)
    if direct:
        return f"NV{direct}"
    switched_a = sum(1 for _, is_switch in ra if is_switch)
    switched_b = sum(1 for _, is_switch in rb if is_switch)
    if switched_a and switched_b:
        return f"NV{min(switched_a, switched_b)}"
    if ha is None or hb is None:
        return None
    if a.nvlinks and b.nvlinks and _nvlink_p2p(nvml, ha, hb):
        return f"NV{min(a.nvlinks, b.nvlinks)}"    # remote ends not readable (a VM, say)
    try:
        level = nvml.nvmlDeviceGetTopologyCommonAncestor(ha, hb)
    except nvml.NVMLError:
        return None
    return next((label for const, label in TOPOLOGY_LABELS.items()
                 if getattr(nvml, const, object()) == level), None)


def _nvlink_p2p(nvml, ha, hb) -> bool:
    """NVML's word that a and b reach each other over NVLink (peer-to-peer status OK)."""
    index = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", None)
    if index is None or not hasattr(nvml, "nvmlDeviceGetP2PStatus"):
        return False
    try:
        return nvml.nvmlDeviceGetP2PStatus(ha, hb, index) == getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    except nvml.NVMLError:
        return False
