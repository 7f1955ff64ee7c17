"""What a run produced: the in-memory ``Result`` of one configuration (``result``), the result
document that ``--json`` writes and the flat ``Row`` view every reader uses (``document``), and
the checks that make a document read from a file safe to use (``validate``).

``costs`` -- what a step cost (``--compute``), as figures of the document; ``files`` -- reading and
writing the tool's files so that nothing is silently lost and nothing blocks; ``gathered`` -- a
distributed run's worker's Result, every worker's traffic gathered (both engines' workers).

May import: plan, measurement.protocol (samples and summaries) and measurement.tasks (the
reference's summary), ceiling (bounds), hardware.environment, the vocabulary. Not the report,
which renders results.
"""
