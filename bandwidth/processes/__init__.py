"""The process plumbing of a run, whatever it measures: one process per device on this host
started and supervised (``spawn``; each runs bandwidth.execution.rank), and cross-process
combination (``group``); how a process ends when it must is the launcher's
(launch.supervision.lifeline).

May import: launch.planning.plan, launch.rendezvous and launch.supervision.lifeline (the launcher's
threads rule, store and lifelines), the vocabulary. Nothing here imports what a process runs: not
the run, the plan, the measurement, the ceiling, the results or the report.
"""
