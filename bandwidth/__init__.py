"""Communication-bandwidth toolkit for deep-learning clusters.

Exchanges the parameter arrays of real networks under each way of aggregating gradients (the
"kvstore" modes) and reports GB/s per GPU, as Apache MXNet's tools/bandwidth did. ``run(config)``
(bandwidth.run) is the programmatic entry point; ``bandwidth.measure`` is the command line.

The folders are the stages of a measurement, in the order a run goes through them
(docs/architecture.md draws it)::

    config -> plan -> stores -> measurement -> results -> report
                      (backends: which stores; processes: where they run; ceiling: the bounds)

``config`` the command line, parsed once; ``plan`` what is measured where (arrays, devices, the
mode's class, memory); ``stores`` the kvstore modes and the parameter server; ``backends`` whose
kvstore does the exchange (this toolkit's or MXNet's) behind one interface; ``measurement`` the one
protocol (warm-up, timing, error check) on one process's replicas; ``processes`` the processes of a
run (one per device, or the roles of a launch) and what they share; ``results`` the result of a
run and the document it is written as; ``report`` text, tables, CSV, plots, baselines and gates;
``execution`` what measure.py does with a parsed job (repeats, gates, outputs, a distributed
role); ``hardware`` facts about this machine; ``ceiling`` what the hardware allows; ``launch`` the
distributed launcher; ``netlab`` a laboratory of hosts. ``run.py`` is the pipeline, top to bottom.

Modules at this level: the entry points (``measure``, ``compare``, ``__main__``), ``run``, and the
vocabulary every stage may import and that imports none of them: ``errors``, ``formulas``,
``cliparse``, ``words``; ``files`` (reading and writing the tool's files so that nothing is
silently lost and nothing blocks), ``thresholds`` (the gates' flags' values: --tolerance,
--min-gbps, --min-percent-of-ceiling, --repeat), ``gates`` (one record per gated figure, and the
JUnit and markdown reports CI systems show), ``textformat`` (byte counts and fixed-width tables
as text), ``progress`` (a sweep's bar and a long wait's stages on stderr); and the package ``links`` (the host-to-host matrix and the link bound of the
distributed modes). No module imports another that imports it back, directly or not
(tests/test_architecture.py checks it); package ``__init__`` files hold only their rule.

``hostgate`` is an entry point too (``python -m bandwidth.hostgate``, the per-host gate on a
host-to-host matrix), and ``cliexit`` how every entry point ends on Ctrl-C, a signal or a closed
stdout.
"""

__version__ = "0.1.0"
