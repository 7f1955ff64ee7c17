"""Execution: what ``measure.py`` does with a parsed ``Job`` (``job.execute``): the configurations
measured in order (``measuring``), the passes beyond the first (``passes``: --repeat auto, the
baseline's processes, the confirmations), the gates judged and the files written; a distributed
mode's role under launch.py or torchrun (``distributed``). ``measure.py`` is only the command line
around it (parsing, the role, exit statuses).

``job`` -- a whole invocation on this host (``execute``): plans checked first, then the
measurements, gates and outputs.

May import: config, plan, run, backends, measurement, results, report, ceiling, hardware,
stores.registry, launch (the preflight and heartbeat contract), processes, predict, compute, the
vocabulary. Imported only by ``measure``; nothing it imports imports it back.
"""
