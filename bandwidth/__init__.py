"""Communication-bandwidth toolkit for deep-learning clusters.

Exchanges the parameter arrays of real networks under each way of aggregating gradients (the
"kvstore" modes) and reports GB/s per GPU, as Apache MXNet's tools/bandwidth did. ``run(config)``
is the programmatic entry point; ``bandwidth.measure`` is the command line.
"""

__version__ = "0.1.0"
