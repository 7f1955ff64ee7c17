"""What a run produced: the in-memory ``Result`` of one configuration (``result``), the result
document that ``--json`` writes and the flat ``Row`` view every reader uses (``document``), and
the checks that make a document read from a file safe to use (``validate``).

``costs`` -- what a step cost (``--compute``), as figures of the document; ``gathered`` -- a
distributed run's worker's Result, every worker's traffic gathered (both engines' workers);
``ranks`` -- every rank's record in a distributed run (host, role, step times, bytes, a
worker's rate with each server, a dist_nccl worker's with each probe neighbour); ``rule`` --
the one rule by which a figure stands out against the median; ``stragglers`` -- it applied to
the ranks, naming the rank that held the run back, and the summary's line; ``probepaths`` -- it
applied to dist_nccl's neighbour probe, naming a worker's slow link or a slow path.
Writing the tool's files is bandwidth.files, below every stage.

May import: plan, measurement.protocol (samples and summaries) and measurement.tasks (the
reference's summary), ceiling (bounds), hardware.environment, the vocabulary (links: the
host-to-host ceiling). Not the report, which renders results.
"""
