"""The links between hosts as figures every stage shares: what a distributed run is held to.

``hostmatrix`` -- the host-to-host matrix (``python -m bandwidth.ceiling --network --json``) read
and checked (``load_matrix``, ``--network-ceiling``), the cells a run's ranks send over, and the
run against the slowest of them (``HostCeiling``, its summary line). ``linkbound`` -- link rates
as the command line gives them (``parse_rate``, ``--link-rate``), the bytes that cross each
host's link per step (``host_bytes``), and the full-duplex bound of a step (``LinkBound``).
``rounds`` -- the round search that names the slow host and the slow path without the full
matrix (``RoundSearch``: rounds of disjoint pairs, re-pairing with healthy hosts; pure, so a job
and a simulation drive the same code), and ``rounddoc`` -- its document (``--network --rounds
--json``), written and read back checked for ``python -m bandwidth.hostgate``.
``gpurounds`` -- the same rounds for the GPUs of one host (``GpuRounds``: every pair both ways at
once, each GPU's host link, NVML's figure as a pair's reference where there is no median), and
``gpudoc`` -- its document (``--gpus-check --json``). ``roundbook`` -- what both keep alike:
the round robin that screens, a round's ``Measurement``, and ``RoundBook``, the rounds handed out
and their rates recorded checked.

Config parses these flags, the launcher places by these bytes, the model predicts with them, the
results hold them and the report prints them; so they sit below all of those, as vocabulary.

May import: the vocabulary (errors, files, textformat). Nothing of the stages.
"""
