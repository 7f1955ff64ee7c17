"""Configuration: the command line of ``measure.py``, parsed once into a frozen ``Config`` per
measured configuration and one ``Job`` for the whole invocation (``options.parse_job``, the
front door, which re-exports ``Config`` and ``Job``). ``job``: the frozen
``Config`` and ``Job`` and the names their fields take; ``parser``: the flags, one table (topic,
default, help, whether ``--help`` shows it; ``--help-all`` shows all) and the parser built from it;
``values``: the single values' parsers and checks (other command lines use them too);
``compute_flags`` and ``schedules``: those flags' values. Code below this never touches argparse
or os.environ.

Config parses and range-checks; a check that needs a registry (the kvstore modes' names, the
modes --network-ceiling and --predict cover) runs where the job is built
(bandwidth.execution.commandline), which hands config the modes' names.

Owns: flags, their defaults and checks, the names of the backends. May import the vocabulary
(errors, cliparse, thresholds for the gates' values, links for --network-ceiling and
--link-rate) and the owners of the values it parses: the schedules' registry for --schedule
(``schedules``: those flags), arrays.layout for dtype sizes, hardware.devices for the default
devices that --scaling sweeps. Not the stores, the ceiling, the report or the model. Nothing it
imports imports it back.

``options`` -- the command line parsed once into the frozen Config and Job (``parse_job``).
"""
