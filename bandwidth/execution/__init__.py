"""Execution: what ``measure.py`` does with a parsed ``Job`` (``job.execute``): the configurations
measured in order (``measuring``), the passes beyond the first (``passes``: --repeat auto, the
baseline's processes, the confirmations), the gates judged and the files written; one
configuration under launch.py or torchrun (``distributed``), where the toolkit's own roles play
each process's part (``roles``: workers and parameter servers, dist_nccl ranks); and one rank of
a run of one process per device (``rank``, the main that bandwidth.processes.spawn starts).
``measure.py`` is only the command line around it (parsing, the role, exit statuses).

``job`` -- a whole invocation on this host (``execute``): plans checked first, then the
measurements, gates and outputs. ``commandline`` -- where the job is built: config's parser and
parse (``build_parser``, ``job_from_args``) with the names the registries own checked (the
kvstore modes, what --network-ceiling and --predict cover), before anything is planned.

May import: arrays, config, plan, run, backends, measurement, results, report, ceiling, hardware,
stores, schedules, launch (the preflight and heartbeat contract, the rendezvous), processes,
predict, compute, the vocabulary. Imported only by ``measure`` (bandwidth.processes.spawn starts
``rank`` by its module name, importing nothing here); nothing it imports imports it back.
"""
