"""The compute a training step overlaps its exchange with: what each layer computes, from the
network's FLOPs at the batch size or from the user's milliseconds (``layers``), and the runner
that does that work on a device as matrix multiplications in the run's dtype (``runner``), in
the compute slots of a schedule's step (``slots``).

``graphs`` -- each run of a step's compute slots as one CUDA graph per GPU; ``stepgraph`` -- a
scheduled step with its compute as a single CUDA graph, and its compute alone as another.

May import: config, hardware, the vocabulary, ``networks`` and schedules.base (the events it
runs in). Not the plan, the stores, the measurement, the results or the report (they import it).
"""
