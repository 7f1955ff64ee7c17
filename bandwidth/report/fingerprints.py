"""The hardware fingerprint of a baseline against this machine's (step 1 of the regression
check, bandwidth.report.baseline): other hardware is refused, a link that lost NVLinks or lanes is
a failing gate."""

from __future__ import annotations

from bandwidth.hardware.topology import pcie_text
from bandwidth.report.verdicts import LINK_LOST, BaselineMismatchError, Diff
from bandwidth.results.document import fingerprint

def document_fingerprint(doc: dict) -> dict:
    """The document's own fingerprint, or one computed from its environment (older files)."""
    return doc.get("fingerprint") or fingerprint(doc.get("environment", {}))


def describe_hardware(fp: dict) -> str:
    """``8 x NVIDIA H100 80GB HBM3 (driver 550.54)``."""
    text = f"{fp.get('device_count', 0)} x {fp.get('device_model') or 'unknown device'}"
    return text + (f" (driver {fp['driver']})" if fp.get("driver") else "")


def _peer_text(matrix) -> str:
    if not matrix:
        return "none recorded"
    pairs = [(i, j) for i in range(len(matrix)) for j in range(len(matrix)) if i < j]
    both = sum(1 for i, j in pairs if matrix[i][j] and matrix[j][i])
    return f"{both} of {len(pairs)} GPU pairs"


def link_changes(baseline_links: dict | None, current_links: dict | None
                 ) -> list[tuple[str, str, bool]]:
    """What differs between two link descriptions (topology.compact_links), per link:
    ``("GPU 0<->1", "18 NVLinks in the baseline, 12 now", True)``, the last item True where the
    link lost NVLinks, PCIe lanes or generation (a fault: the check fails, naming it) and False
    where it gained. A value unknown on either side (None: NVML could not tell; or a side
    without NVML at all) is not compared: it proves no difference."""
    if not baseline_links or not current_links:
        return []
    out = []
    base_nv, now_nv = baseline_links.get("nvlinks") or {}, current_links.get("nvlinks") or {}
    for pair, before in base_nv.items():
        after = now_nv.get(pair)
        if before is not None and after is not None and before != after:
            a, b = pair.split("-")
            out.append((f"GPU {a}<->{b}", f"{before} NVLink{'' if before == 1 else 's'} in the "
                        f"baseline, {after} now", after < before))
    base_pcie, now_pcie = baseline_links.get("pcie") or {}, current_links.get("pcie") or {}
    for gpu, before in base_pcie.items():
        after = now_pcie.get(gpu) or {}
        known = [k for k in ("gen", "width")
                 if before.get(k) is not None and after.get(k) is not None]
        if any(before[k] != after[k] for k in known):
            out.append((f"GPU {gpu}", f"PCIe {pcie_text(before)} in the baseline, "
                        f"{pcie_text(after)} now", any(after[k] < before[k] for k in known)))
    return out


def link_differences(baseline_links: dict | None, current_links: dict | None) -> list[str]:
    """link_changes in words: ``GPU 0<->1: 18 NVLinks in the baseline, 12 now``."""
    return [f"{name}: {text}" for name, text, _ in link_changes(baseline_links, current_links)]


def link_gates(baseline_fp: dict, current_fp: dict, source: str = "this machine") -> list[Diff]:
    """One failing Diff (LINK LOST) per link that lost NVLinks, lanes or PCIe generation since
    the baseline: the fault a health check exists to catch is a failure naming the link (exit
    1), not other hardware."""
    return [Diff(f"link {name}", ("link", name, source), None, None, 1, None, LINK_LOST,
                 note=text + ("" if source == "this machine" else f" ({source})"), gate="link")
            for name, text, lost in link_changes(baseline_fp.get("links"),
                                                 current_fp.get("links")) if lost]


def fingerprint_differences(baseline_fp: dict, current_fp: dict) -> list[str]:
    """The fields that differ, in words: ``['device model', 'driver']``. Links are not among
    them: a link that lost NVLinks or lanes is a failure of the check (link_gates), and one that
    gained is a note."""
    names = {"device_model": "device model", "device_count": "device count", "driver": "driver",
             "peer_access": "peer access"}
    keys = list(names) + sorted((set(baseline_fp) | set(current_fp)) - set(names) - {"links"})
    return [names.get(k, k) for k in keys if baseline_fp.get(k) != current_fp.get(k)]


def check_fingerprint(baseline_fp: dict, current_fp: dict, force: bool = False,
                      current_name: str = "this machine") -> str | None:
    """Refuse (BaselineMismatchError, exit 2) a baseline from other hardware; with ``force``
    return a warning line instead. Where the hardware is the same: None, or a note when only one
    side recorded its links (they could not be compared). ``current_name`` is what the message
    calls the other side: "this machine", or a file name."""
    differs = fingerprint_differences(baseline_fp, current_fp)
    if not differs:
        return _unknown_links_note(baseline_fp, current_fp, current_name)
    base, now = describe_hardware(baseline_fp), describe_hardware(current_fp)
    # What the two descriptions do not already show: links and peer access (of equal counts).
    detail = []
    if "peer access" in differs and "device count" not in differs:
        detail.append(f"peer access: {_peer_text(baseline_fp.get('peer_access'))} then, "
                      f"{_peer_text(current_fp.get('peer_access'))} now")
    known = ("device model", "device count", "driver", "peer access")
    detail += [f"{name}: {baseline_fp.get(name)!r} then, {current_fp.get(name)!r} now"
               for name in differs if name not in known]
    if base != now:
        message = f"baseline was measured on {base} but {current_name} has {now}"
        if detail:
            message += f" (other {'; '.join(detail)})"
    else:
        message = (f"baseline was measured on {base} as {current_name} has, but with other "
                   + "; other ".join(detail))
    if force:
        return f"warning: {message}; compared anyway (--force)"
    raise BaselineMismatchError(f"{message}; use --force to compare anyway")


def _unknown_links_note(baseline_fp: dict, current_fp: dict, current_name: str) -> str | None:
    known = [bool(baseline_fp.get("links")), bool(current_fp.get("links"))]
    if known[0] == known[1]:
        return None
    missing = "the baseline" if not known[0] else current_name
    return (f"note: links not compared: {missing} recorded none (no NVML there; "
            "pip install '.[topology]')")

