"""What a run produced: the in-memory ``Result`` of one configuration (``result``), the result
document that ``--json`` writes and the flat ``Row`` view every reader uses (``document``), and
the checks that make a document read from a file safe to use (``validate``).

May import: plan, measurement.protocol (samples and summaries), ceiling (bounds), the
vocabulary. Not the report, which renders results.
"""
