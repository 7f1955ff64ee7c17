"""Which device owns which elements in the ``device`` mode (``--owners``): MXNet's greedy rule for
whole keys (``assign_owners``), the balanced rule that cuts the large keys so that every device
owns the same number of elements to within one (``owner_pieces``, ``water_fill``), and the
contiguous regions of each owner in the flat buffers (``owner_runs``). bandwidth.stores.device
describes both rules; the parameter-server modes place their keys with ``assign_owners`` too.
Plain functions of sizes, no tensors."""

from __future__ import annotations

# Keys of more elements than this are split over the owners by the balanced rule (MXNet's
# MXNET_KVSTORE_BIGARRAY_BOUND, the size above which its parameter servers split a key).
SPLIT_BOUND = 1_000_000
OWNER_RULES = ("balanced", "greedy")


def assign_owners(numels: list[int], n: int) -> list[int]:
    """MXNet's rule: keys by size, largest first, each onto the least-loaded device.

    Ties go to the lower key and the lower device, so the placement is reproducible.
    """
    load = [0] * n
    owner = [0] * len(numels)
    for key in sorted(range(len(numels)), key=lambda k: (-numels[k], k)):
        target = min(range(n), key=lambda d: (load[d], d))
        owner[key] = target
        load[target] += numels[key]
    return owner


def owner_pieces(numels: list[int], n: int, rule: str = "balanced",
                 bound: int = SPLIT_BOUND) -> list[tuple[int, int, int, int]]:
    """Who owns which elements: ``(key, start, length, owner)`` pieces covering every key, grouped
    by owner (owner 0's pieces first) as the flat buffer lays them out; the rules are in the
    module docstring."""
    if rule not in OWNER_RULES:
        raise ValueError(f"unknown owner rule {rule!r}; valid: {', '.join(OWNER_RULES)}")
    split = [k for k, numel in enumerate(numels) if rule == "balanced" and numel > bound]
    whole = [k for k in range(len(numels)) if k not in frozenset(split)]
    placed = assign_owners([numels[k] for k in whole], n)
    load = [0] * n
    pieces = [[] for _ in range(n)]
    for k, o in zip(whole, placed):
        pieces[o].append((k, 0, numels[k], o))
        load[o] += numels[k]
    fill = water_fill(load, sum(numels[k] for k in split))
    # The split keys as one stream of elements, cut into consecutive runs of fill[o] elements.
    stream = [(k, numels[k]) for k in split]
    at, offset = 0, 0
    for o in range(n):
        want = fill[o]
        while want > 0:
            key, numel = stream[at]
            take = min(want, numel - offset)
            pieces[o].append((key, offset, take, o))
            want -= take
            offset += take
            if offset == numel:
                at, offset = at + 1, 0
    for o in range(n):
        pieces[o].sort(key=lambda piece: (piece[0], piece[1]))
    return [piece for owned in pieces for piece in owned]


def water_fill(load: list[int], extra: int) -> list[int]:
    """How many of ``extra`` elements each device takes so that the largest final load is as
    small as possible: devices below the common level are filled up to it (within one element;
    the lower devices get the odd ones)."""
    active = list(range(len(load)))
    while True:
        level = (sum(load[o] for o in active) + extra) / len(active)
        above = [o for o in active if load[o] > level]
        if not above:
            break
        active = [o for o in active if o not in above]
    total = sum(load[o] for o in active) + extra
    base, odd = divmod(total, len(active))
    fill = [0] * len(load)
    for rank, o in enumerate(sorted(active)):
        fill[o] = base + (1 if rank < odd else 0) - load[o]
    return fill


def owner_runs(layout, pieces, n: int) -> list[list[tuple[int, int]]]:
    """Per owner, the runs [start, stop) of the flat buffer it reduces: where ``layout``'s
    segments meet its pieces (one run per owner in this mode's own layout; several in the
    parameter-server modes', which lay the buffer out by server)."""
    by_key = {}
    for key, start, length, o in pieces:
        by_key.setdefault(key, []).append((start, start + length, o))
    marks = []
    for seg in layout.segments:
        lo, hi = seg.start, seg.start + seg.length
        for start, stop, o in by_key[seg.key]:
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                marks.append((seg.offset + a - lo, seg.offset + b - lo, o))
    runs = [[] for _ in range(n)]
    for a, b, o in sorted(marks):
        if runs[o] and runs[o][-1][1] == a:
            runs[o][-1] = (runs[o][-1][0], b)
        else:
            runs[o].append((a, b))
    return runs

