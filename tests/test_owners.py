"""The device mode's key placement: MXNet's greedy rule, and the balanced rule that splits keys
larger than SPLIT_BOUND so that every owner holds the same elements; exact results with split
keys on 2 to 4 CPU devices."""

import json
import math

import pytest
import torch

from bandwidth.arrays.data import expected_sum
from bandwidth.config.options import Config
from bandwidth.hardware.devices import DeviceSet
from bandwidth.measurement.session import Session
from bandwidth.processes.group import LocalGroup
from bandwidth.run import run
from bandwidth.stores.owners import SPLIT_BOUND, assign_owners, owner_pieces, water_fill

# Keys on both sides of the bound: two above it (split by the balanced rule), one exactly at it
# and three below (kept whole by both rules).
SHAPES = [("big1", (1200, 1000)), ("at_bound", (1000, 1000)), ("small", (3, 5)),
          ("big2", (SPLIT_BOUND * 2 + 1,)), ("mid", (700, 999)), ("odd", (7,))]
NUMELS = [math.prod(s) for _, s in SHAPES]
NUMEL = sum(NUMELS)


def loads(pieces, n):
    out = [0] * n
    for _, _, length, owner in pieces:
        out[owner] += length
    return out


def covers_every_key_once(pieces):
    for key, numel in enumerate(NUMELS):
        runs = sorted((start, length) for k, start, length, _ in pieces if k == key)
        at = 0
        for start, length in runs:
            assert start == at and length > 0
            at += length
        assert at == numel


def test_water_fill_levels_the_loads():
    assert water_fill([10, 0], 30) == [10, 20]
    assert water_fill([50, 0, 0], 20) == [0, 10, 10]          # the heavy one gets nothing
    assert water_fill([5, 3], 0) == [0, 0]
    assert water_fill([0, 0, 0], 10) == [4, 3, 3]             # the odd element: lower device


@pytest.mark.parametrize("n", [2, 3, 4])
def test_balanced_rule_gives_every_owner_the_same_elements(n):
    pieces = owner_pieces(NUMELS, n, "balanced")
    covers_every_key_once(pieces)
    got = loads(pieces, n)
    assert max(got) - min(got) <= 1 and sum(got) == NUMEL
    split = {k for k, start, length, _ in pieces if (start, length) != (0, NUMELS[k])}
    assert split and all(NUMELS[k] > SPLIT_BOUND for k in split)
    # Keys at or below the bound stay whole, where MXNet's rule puts them among themselves.
    whole = [k for k in range(len(NUMELS)) if NUMELS[k] <= SPLIT_BOUND]
    owner_of = {k: o for k, _, _, o in pieces if k in whole}
    assert [owner_of[k] for k in whole] == assign_owners([NUMELS[k] for k in whole], n)
    # Grouped by owner, as the flat buffer lays them out.
    assert [o for *_, o in pieces] == sorted(o for *_, o in pieces)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_greedy_rule_is_mxnets(n):
    pieces = owner_pieces(NUMELS, n, "greedy")
    assert all((start, length) == (0, NUMELS[k]) for k, start, length, _ in pieces)
    owner_of = {k: o for k, _, _, o in pieces}
    assert [owner_of[k] for k in range(len(NUMELS))] == assign_owners(NUMELS, n)
    assert max(loads(pieces, n)) - min(loads(pieces, n)) > 1     # these keys do not balance


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("owners", ["balanced", "greedy"])
def test_split_keys_give_exact_results_on_cpu_devices(n, owners):
    s = Session("device", SHAPES, DeviceSet("cpu", tuple(range(n))), list(range(n)),
                LocalGroup(), dtype="float32", optimizer="none", seed=5, chunk_mb=1.0,
                owners=owners)
    assert sum(s.store.owned) == NUMEL
    if owners == "balanced":
        assert max(s.store.owned) - min(s.store.owned) <= 1
    for _ in range(2):
        s.prepare()
        s.step()
        assert s.error() == 0.0
    ref = expected_sum(0, NUMEL, n, 5, "cpu").to(torch.float32)
    for replica in s.replicas:
        assert torch.equal(replica.outputs, ref)
    # Each key read back through the layout holds its own closed-form sum.
    for seg in s.layout.segments:
        assert torch.equal(s.replicas[-1].outputs[seg.offset:seg.offset + seg.length],
                           ref[seg.offset:seg.offset + seg.length])
    s.close()


def test_split_keys_with_sgd_and_the_summary_note(tmp_path):
    net = tmp_path / "net.json"
    net.write_text(json.dumps([[name, list(shape)] for name, shape in SHAPES]))
    result = run(Config(network=str(net), kv_store="device", cpus=3, num_batches=2,
                        optimizer="sgd", reference=False))
    assert all(0 <= s.error < 1e-6 for s in result.samples)
    (note,) = [x for x in result.notes if x.startswith(("owner GPU", "owner device"))]
    assert "balanced, 2 keys of more than 1,000,000 elements split" in note
    assert result.plan.launch == "eager"
    assert all(s.host_seconds is not None and s.host_seconds > 0 for s in result.samples)
    assert result.summary.host_seconds_median > 0
