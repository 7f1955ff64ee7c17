"""The processes of a run and what they share: one worker process per device on this host
(``spawn``, ``worker``), the role dispatch of a distributed run under launch.py
(``distributed``: workers and parameter servers, dist_nccl ranks), cross-process combination
(``group``), and how a process ends when it must (``lifeline``).

May import: plan, measurement, stores, results.result, ceiling (bounds), report.text (rank 0
prints), launch.contract and launch.rendezvous (the launcher's environment and store). The run
calls into here; nothing here imports the run or the backends.
"""
