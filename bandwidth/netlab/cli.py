"""The lab's command line, and ``up``/``down`` for programs (the tests,
benchmarks/network_impact.py).

    python -m bandwidth.netlab up --hosts 4 --rate 1gbit [--rate-of 3=500mbit ...]
                                  [--rto-min MS] [--name bwlab] [--subnet 198.18.0.0/24]
    python -m bandwidth.netlab status [--name bwlab]
    python -m bandwidth.netlab down [--name bwlab]

``up`` prints the hosts file it wrote and a command that uses it; it refuses in one line when the
machine lacks root, ``ip``, ``tc`` or ``sshd``, or when a lab of that name is up. A failure half way
removes what was made. ``down`` removes the lab's namespaces (and every process in them), links,
bridge and files, found by name, so it also cleans up after a crash. Exit status 2 with one line on
stderr for any refusal.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys

from bandwidth.errors import BandwidthError
from bandwidth.links.linkbound import parse_rate
from bandwidth.netlab import lab as labmod
from bandwidth.netlab import sshd
from bandwidth.netlab.lab import DEFAULT_NAME, DEFAULT_SUBNET, Lab, NetlabError, format_rate
from bandwidth.progress import Stages


def up(name: str, count: int, rate: str | None, rates_of: dict[str, str] | None = None,
       subnet: str = DEFAULT_SUBNET, rto_min_ms: int | None = None,
       paths: dict[str, str] | None = None) -> Lab:
    """Make the lab and start its sshds; returns it (written to ``lab.json``)."""
    missing = labmod.missing_prerequisites()
    if missing:
        raise NetlabError(f"the lab needs {', '.join(missing)}")
    rate_bits = parse_rate(rate) if rate else None
    lab = labmod.plan_lab(name, subnet, count, rate_bits,
                          {k: parse_rate(v) for k, v in (rates_of or {}).items()}, rto_min_ms,
                          {k: parse_rate(v) for k, v in (paths or {}).items()})
    if labmod.namespaces_of(name) or lab.state_dir.exists():
        raise NetlabError(f"a lab named {name} is up already: python -m bandwidth.netlab down "
                          f"--name {name}, or choose another --name")
    try:
        with Stages().watching() as stages:      # a line per stage once 10 s pass in silence
            lab.state_dir.mkdir(parents=True)
            (lab.state_dir / "lab.json").write_text(lab.to_json())
            stages.enter(f"lab {name}: making {count} hosts (namespaces, links, shaping)")
            labmod.make_network(lab)
            stages.enter(f"lab {name}: starting {count} sshds")
            sshd.make_keys(lab.state_dir)
            sshd.write_client_config(lab)
            pids = {str(h.index): sshd.start_sshd(lab, h) for h in lab.hosts}
            lab = dataclasses.replace(lab, sshd_pids=pids)
            (lab.state_dir / "lab.json").write_text(lab.to_json())
            for ready, host in enumerate(lab.hosts):      # a slow login says where it waits
                stages.enter(f"lab {name}: logging in to {host.address} ({ready} of {count} "
                             "hosts ready)")
                sshd.wait_ready(lab, host)
        (lab.state_dir / "hosts").write_text("".join(f"{h.address}\n" for h in lab.hosts))
    except BaseException:
        # Ctrl-C, SIGTERM (Stopped) or a failure part-way: remove what was made, and let no
        # second signal cut the removal short
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in STOPPING}
        try:
            labmod.remove(name)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        raise
    return lab


STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """SIGTERM or SIGHUP while the lab is made: unwinds like Ctrl-C, so that it is removed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


def down(name: str) -> list[str]:
    if labmod.os.geteuid() != 0:
        raise NetlabError("removing a lab needs root (run with sudo)")
    return labmod.remove(name)


def describe(lab: Lab) -> list[str]:
    state = lab.state_dir
    rto = f", TCP's rto_min {lab.rto_min_ms} ms" if lab.rto_min_ms is not None else ""
    lines = [f"lab {lab.name}: {len(lab.hosts)} hosts on bridge {lab.bridge} "
             f"({lab.bridge_address}/{lab.prefixlen} in the root namespace){rto}"]
    for src, dst, bits in lab.paths:
        lines.append(f"  slow path {lab.host(src).address} -> {lab.host(dst).address}: "
                     f"{format_rate(bits)} (that direction only)")
    for h in lab.hosts:
        alive = "sshd up" if labmod.alive(int(lab.sshd_pids.get(str(h.index), 0) or 0)) \
            else "sshd down"
        lines.append(f"  {h.address:<16} namespace {h.namespace:<12} interface {h.interface:<10}"
                     f" {format_rate(h.rate_bits):>14} each way, {alive}")
    lines += [f"hosts file: {state / 'hosts'}", f"ssh config: {state / 'ssh_config'}",
              f"try: python launch.py -H {state / 'hosts'} --ssh-config {state / 'ssh_config'} "
              "-n 2 -s 2 python bandwidth/measure.py --kv-store dist_sync --cpus 1",
              f"in a host: ip netns exec {lab.hosts[0].namespace} COMMAND"]
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bandwidth.netlab",
                                     description="A lab of hosts on this machine: network "
                                     "namespaces with shaped links and an sshd each (root).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="make the lab")
    p_up.add_argument("--hosts", type=int, required=True, help="number of hosts")
    p_up.add_argument("--rate", help="every host's link rate each way, e.g. 1gbit, 2.5gbit "
                      "(default: unshaped)")
    p_up.add_argument("--rate-of", action="append", default=[], metavar="HOST=RATE",
                      help="one host's rate (HOST: its index 1..N or address); repeatable")
    p_up.add_argument("--slow-path", action="append", default=[], metavar="FROM-TO=RATE",
                      help="one direction between two hosts (indices or addresses) at RATE, the "
                      "rest of FROM's link as it is (tc htb and a filter on TO's address); "
                      "repeatable")
    p_up.add_argument("--rto-min", type=int, default=None, metavar="MS",
                      help="every host's least TCP retransmission timeout, 1-200 ms (default: "
                      "the kernel's 200), as datacenter hosts set it against incast")
    p_up.add_argument("--subnet", default=DEFAULT_SUBNET,
                      help=f"within 198.18.0.0/15 (default {DEFAULT_SUBNET})")
    for p in (p_up, sub.add_parser("down", help="remove the lab and everything in it"),
              sub.add_parser("status", help="list the lab")):
        p.add_argument("--name", default=DEFAULT_NAME,
                       help=f"the lab's name, prefix of all it makes (default {DEFAULT_NAME})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    try:
        if args.command == "up":
            pairs, paths = {}, {}
            for flag, items, into, example in (("--rate-of", args.rate_of, pairs,
                                                "HOST=RATE, e.g. 2=500mbit"),
                                               ("--slow-path", args.slow_path, paths,
                                                "FROM-TO=RATE, e.g. 1-2=50mbit")):
                for item in items:
                    key, sep, value = item.partition("=")
                    if not sep:
                        raise NetlabError(f"{flag} {item!r}: expected {example}")
                    into[key] = value
            lab = up(args.name, args.hosts, args.rate, pairs, args.subnet, args.rto_min, paths)
            print("\n".join(describe(lab)))
        elif args.command == "down":
            removed = down(args.name)
            print(f"lab {args.name}: removed {len(removed)} objects" if removed
                  else f"lab {args.name}: nothing to remove")
        else:
            print("\n".join(describe(Lab.load(args.name))))
    except BandwidthError as err:          # NetlabError, or a bad rate (ConfigError)
        print(f"netlab: error: {err}", file=sys.stderr)
        return 2
    except (subprocess.SubprocessError, OSError) as err:    # a command of the lab failed
        print(f"netlab: error: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
              " (what was made is removed)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("netlab: interrupted (what was made is removed)", file=sys.stderr)
        return 130
    except Stopped as stop:
        print(f"netlab: stopped by {signal.Signals(stop.signum).name} (what was made is "
              "removed)", file=sys.stderr)
        return 128 + stop.signum
    return 0
