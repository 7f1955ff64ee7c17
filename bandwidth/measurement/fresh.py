"""One ``--repeat auto`` pass of measure.py in a fresh process (``fresh_pass``).

Why: on CPU devices the figure of a process stays near a level of its own for its whole life
(its allocations, where its threads run, the interpreter's layout), and that level differs from
one process to the next by more than the iterations inside one process do (BENCHMARKS.md,
2026-11-24, issue 20). Passes measured in the same process share its level, so they are not
independent: a confirmation pass in the process whose first pass was low by its level is low
again, and a baseline from one process carries that process's level into every later check. A
pass in a fresh process draws a new level: the baseline's processes (``--baseline-processes``)
and the confirmation passes (``--confirm``) are measured this way.

The child is started with multiprocessing's spawn (a new interpreter, torch imported anew), asks
the kernel to kill it when measure.py dies (``lifeline.die_with_parent``), runs measure.py's
``auto_pass`` (pickled by reference) on the plans it was given, and sends the results back through a
pipe; measure.py kills it on every exit path of its own. The pipe is an anonymous one between
measure.py and the child it spawned (no address, nothing another host or process can reach), so
the pickles multiprocessing sends through it are not data from the network (which the toolkit
never unpickles: bandwidth.processes.group). An error in the child is raised again in
measure.py (a BandwidthError keeps its exit status); a child that ends without a word is a
BandwidthError naming its exit status.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from typing import Callable

from bandwidth.errors import BandwidthError


def fresh_pass(auto_pass: Callable, job, plans: list, environment: dict, tag: str) -> list:
    """``auto_pass(job, plans, bounds, environment, tag)`` (bandwidth.execution.passes's, passed in:
    this module does not import it) in a fresh process: its repeats' results (a list of lists of
    Result). Its output (the pass's progress and summary line) goes to this process's stdout and
    stderr."""
    import torch
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()      # this process's cached GPU memory, free for the child
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, os.getpid(), auto_pass, job, plans,
                                             environment, tag),
                        name=f"measure.py {tag}", daemon=True)
    child.start()
    send.close()
    try:
        try:
            status, payload = receive.recv()
        except EOFError:
            child.join(5)
            raise BandwidthError(f"the fresh process of the {tag} pass ended without a result "
                                 f"(exit status {child.exitcode})") from None
        if status == "error":
            raise payload
        return payload
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()


def _child(send, parent_pid: int, auto_pass: Callable, job, plans: list, environment: dict,
           tag: str) -> None:
    from bandwidth.launch.supervision.lifeline import die_with_parent

    die_with_parent(parent_pid)
    try:
        from bandwidth.ceiling.bounds import BoundCache

        print(f"# {tag}: in a fresh process (pid {os.getpid()})", flush=True)
        runs = auto_pass(job, plans, BoundCache(plans), environment, tag)
        message = ("ok", runs)
    except BaseException as exc:          # sent back: measure.py reports it as its own
        try:
            pickle.loads(pickle.dumps(exc))
            message = ("error", exc)
        except Exception:
            message = ("error", RuntimeError(f"{type(exc).__name__}: {exc}"))
    send.send(message)
    send.close()
