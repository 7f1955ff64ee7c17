"""A laboratory of hosts on one Linux machine: network namespaces on one bridge, each with its own
address in 198.18.0.0/15, links shaped with ``tc tbf``, and an sshd of the lab's own in each.

    python -m bandwidth.netlab up --hosts 4 --rate 1gbit [--rate-of 2=500mbit] [--name bwlab]
    python -m bandwidth.netlab status [--name bwlab]
    python -m bandwidth.netlab down [--name bwlab]

Modules: ``lab`` -- the network (namespaces, veths, a bridge, ``tc tbf``): made and removed;
``sshd`` -- the lab's ssh (keys, one sshd per host, a client configuration); ``cli`` -- the
command line, and ``up``/``down`` for programs. See docs/netlab.md.

May import the vocabulary (links.linkbound for rates); nothing else of the toolkit: a lab is
for any program, the launcher's jobs among them.
"""
