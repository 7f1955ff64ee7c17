"""Many short command lines as real processes, without paying torch's import for each.

``Forker()`` starts one Python process that imports torch and the package once; ``run(argv, cwd,
env)`` makes it fork a child per command line: the child takes its own session, working folder,
environment, argv, /dev/null as stdin and files as stdout and stderr, runs the script or module
as ``python ARGV`` would (``runpy``, as ``__main__``), and ends with that status; an uncaught
exception prints its traceback and ends with 1, as the interpreter does. The exit status,
stdout and stderr come back. A child still running after ``timeout_s`` has its session killed
and its status is None. (tests/test_bad_inputs.py: 60 command lines at about 3 s of imports
each were three minutes of a CI run.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SERVER = r'''
import json, os, runpy, signal, sys, time, traceback
import torch, numpy                                   # the imports every command pays
import bandwidth.measure, bandwidth.ceiling.cli, bandwidth.compare, bandwidth.launch.cli


def child(req, out_path, err_path):
    os.setsid()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    argv = req["argv"]
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1]] + argv[2:]
            if not hasattr(sys.modules.get(argv[1]), "__path__"):   # a package runs __main__
                sys.modules.pop(argv[1], None)    # run afresh as __main__, as python -m does
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)


for line in sys.stdin:
    req = json.loads(line)
    out_path, err_path = req["out"], req["err"]
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(req, out_path, err_path)
    deadline = time.monotonic() + req["timeout_s"]
    status = None
    while time.monotonic() < deadline:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(raw)
            break
        time.sleep(0.01)
    if status is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    print(json.dumps({"code": status}), flush=True)
'''


class Forker:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.folder = tempfile.mkdtemp(prefix="forkrun-")

    def run(self, argv: list[str], cwd: str, env: dict[str, str], timeout_s: float = 60):
        """(status or None, stdout, stderr) of ``python ARGV`` run in a forked child."""
        out, err = os.path.join(self.folder, "out"), os.path.join(self.folder, "err")
        request = {"argv": argv, "cwd": cwd, "env": env, "out": out, "err": err,
                   "timeout_s": timeout_s}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError("the fork server ended")
        code = json.loads(answer)["code"]
        return code, Path(out).read_text(errors="replace"), Path(err).read_text(errors="replace")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)
