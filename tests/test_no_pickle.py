"""Nothing received from another process is unpickled (issue 28): a peer that sends a pickle
whose loading would run code gets its value refused as "not JSON", and the code never runs.

Two real processes over Gloo on loopback: rank 0 gathers through the toolkit
(bandwidth.processes.group.DistGroup.gather, what every cross-process gather uses); rank 1 plays
a stranger who reached the job and sends, in the exact wire format of torch's
``all_gather_object``, a pickle that would create a file when loaded.
"""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(120)

INIT = ("import sys, torch, torch.distributed as dist\n"
        "from datetime import timedelta\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', rank={rank}, "
        "world_size=2, timeout=timedelta(seconds=30))\n")
VICTIM = INIT + ("from bandwidth.processes.group import DistGroup\n"
                 "try:\n"
                 "    print('gathered', DistGroup(torch.device('cpu')).gather('host-a'))\n"
                 "except ValueError as err:\n"
                 "    print('refused:', err)\n")
ATTACKER = INIT + ("import pickle\n"
                   "class Evil:\n"
                   "    def __reduce__(self):\n"
                   "        return (exec, (\"open({mark!r}, 'w').write('ran')\",))\n"
                   "data = pickle.dumps(Evil())\n"
                   "lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]\n"
                   "dist.all_gather(lengths, torch.tensor([len(data)], dtype=torch.int64))\n"
                   "longest = max(int(t.item()) for t in lengths)\n"
                   "mine = torch.zeros(longest, dtype=torch.uint8)\n"
                   "mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)\n"
                   "out = [torch.empty(longest, dtype=torch.uint8) for _ in range(2)]\n"
                   "dist.all_gather(out, mine)\n"
                   "print('sent')\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_pickled_payload_from_a_peer_is_refused_and_never_run(tmp_path):
    mark = tmp_path / "code-ran"
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", code.format(port=port, rank=rank,
                                                                mark=str(mark))],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, code in ((0, VICTIM), (1, ATTACKER))]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    victim, attacker = outs
    assert "sent" in attacker[0], attacker[1][-2000:]
    assert victim[0].startswith("refused: rank 1 sent a value that is not JSON text"), \
        victim[0] + victim[1][-2000:]
    assert not mark.exists()


def test_json_values_still_cross(tmp_path):
    """The control: two honest ranks gather each other's values."""
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = INIT + ("from bandwidth.processes.group import DistGroup\n"
                   "print(DistGroup(torch.device('cpu')).gather({{'rank': {rank}, 'h': 'é' * {rank}}}))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code.format(port=port, rank=rank)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for out, err in outs:
        assert out.strip() == "[{'rank': 0, 'h': ''}, {'rank': 1, 'h': 'é'}]", err[-2000:]


def test_no_code_path_unpickles_what_other_processes_send():
    """torch's object collectives unpickle; none is used anywhere in the package, the
    benchmarks or the launcher. (measurement/fresh.py pickles over a pipe to its own spawned
    child, which no other process can reach.)"""
    banned = re.compile(r"\b(all_gather_object|gather_object|broadcast_object_list|"
                        r"scatter_object_list|send_object_list|recv_object_list|recv_object)\(")
    found = []
    for folder in ("bandwidth", "benchmarks", "networks"):
        for path in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if banned.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
