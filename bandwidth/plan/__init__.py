"""The plan of a measurement: the network's arrays (from the network tables of ``networks``), on
which devices, under which mode's class, in which schedule's parts, and whether it fits
(``plan``), checked before anything is allocated; how the mode's steps will be issued, from a CUDA
graph or eagerly (``launching``: the rule the measurement's session applies and the plan reports).

``onegpu`` -- what the default run measures on one GPU, and the hint where a run of one device
would print 0 GB/s.

May import: arrays, config, compute, hardware, the schedules (their registry), networks, the
vocabulary. Not the stages it plans for: the caller hands ``make_plan`` the mode's class
(bandwidth.backends.registry.store_class), so neither the stores, the backends, the measurement,
the run, the report nor the processes.
"""
