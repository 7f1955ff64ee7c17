"""The measurement protocol, written once: warm-up, device-synchronised timing and the error check
on every iteration (``protocol``), one process's replicas of a mode with their data (``session``,
its steps issued from a CUDA graph or eagerly as plan.launching says), and a process's whole task
as a plain dict that crosses processes (``tasks``).

``costs`` -- what a step costs with ``--compute`` (compute alone, exchange alone, both);
``framework`` -- with ``--framework torch``, the ddp and fsdp schedules' step taken by PyTorch's
DistributedDataParallel and FSDP2 themselves, checked as the schedules are; ``fresh`` -- one
``--repeat auto`` pass in a fresh process; ``probe`` -- dist_nccl's neighbour probe after the
steps (each rank's receives from its neighbours, timed).

May import: arrays, stores, plan, hardware, launch.supervision.lifeline (the per-iteration
watchdog). Not the run, the results or the report.
"""
