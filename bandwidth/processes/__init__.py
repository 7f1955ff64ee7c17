"""The process plumbing of a run, whatever it measures: one process per device on this host
started and supervised (``spawn``; each runs bandwidth.execution.rank), cross-process combination
(``group``), and how a process ends when it must (``lifeline``).

May import: launch.plan, launch.rendezvous and launch.heartbeat (the launcher's threads rule,
store and heartbeat), the vocabulary. Nothing here imports what a process runs: not the run,
the plan, the measurement, the ceiling, the results or the report.
"""
