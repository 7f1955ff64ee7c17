"""The compute a training step overlaps its exchange with: what each layer computes, from the
network's FLOPs at the batch size or from the user's milliseconds (``layers``), and the runner
that does that work on a device as matrix multiplications in the run's dtype (``runner``).

May import: config, hardware, the vocabulary, and ``networks``. Not the plan, the stores, the
measurement, the results or the report (they import this).
"""
