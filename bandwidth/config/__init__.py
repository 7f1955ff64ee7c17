"""Configuration: the command line of ``measure.py``, parsed once into a frozen ``Config`` per
measured configuration and one ``Job`` for the whole invocation (``options.job_from_args``, the
front door, which re-exports ``Config``, ``Job`` and ``build_parser``). ``job``: the frozen
``Config`` and ``Job`` and the names their fields take; ``parser``: the flags, one table (topic,
default, help, whether ``--help`` shows it; ``--help-all`` shows all) and the parser built from it;
``values``: the single values' parsers and checks (other command lines use them too);
``compute_flags`` and ``schedules``: those flags' values. Code below this never touches argparse
or os.environ.

Owns: flags, their defaults and checks, the names of the backends. May import the vocabulary
(errors, cliparse) and the owners of the values it parses: the stores' registry for mode names,
the schedules' registry for --schedule (``schedules``: those flags),
plan.layout for dtype sizes, ceiling.hostmatrix and ceiling.linkbound for --network-ceiling and
--link-rate, report.baseline for the gates' thresholds, hardware.devices for the default devices
that --scaling sweeps. Nothing it imports imports it back.

``options`` -- the command line parsed once into the frozen Config and Job (``job_from_args``).
"""
