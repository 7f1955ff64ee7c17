"""What a run produced: the in-memory ``Result`` of one configuration (``result``), the result
document that ``--json`` writes and the flat ``Row`` view every reader uses (``document``), and
the checks that make a document read from a file safe to use (``validate``).

``costs`` -- what a step cost (``--compute``), as figures of the document; ``gathered`` -- a
distributed run's worker's Result, every worker's traffic gathered (both engines' workers);
``ranks`` -- every rank's record in a distributed run (host, role, step times, bytes, a
worker's rate with each server); ``stragglers`` -- the rule that names the rank that held the
run back, and the summary's line.
Writing the tool's files is bandwidth.files, below every stage.

May import: plan, measurement.protocol (samples and summaries) and measurement.tasks (the
reference's summary), ceiling (bounds), hardware.environment, the vocabulary (links: the
host-to-host ceiling). Not the report, which renders results.
"""
