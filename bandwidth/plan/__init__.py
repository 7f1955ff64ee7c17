"""The plan of a measurement: which arrays (``layout``, from the network tables of ``networks``),
with which seeded data and closed-form reference (``data``), which optimizer (``optimizers``),
on which devices and under which mode's class, and whether it fits (``plan``).

``onegpu`` -- what the default run measures on one GPU, and the hint where a run of one device
would print 0 GB/s.

May import: config, hardware, the stores' registry, the schedules (their registry),
backends.registry (the mode's class under its backend), measurement.launching (how steps are
launched). Not the run, the report or the processes.
"""
