"""Everything that renders or judges results: text (preamble, MXNet's lines, summary: ``text``),
fixed-width tables and CSV (``table``, their cells and column layout: ``cells``), plots
(``plot``), progress on stderr (``progress``), and the gates: baselines and thresholds
(``baseline``), their statistics (``stats``), per-host gates (``hostgate``) and the JUnit /
markdown reports CI systems show (``gatereport``).

The regression check's parts: ``thresholds`` (its flags' values), ``fingerprints`` (the hardware
against the baseline's), ``rowcompare`` (rows against the baseline, the floor and the ceiling),
``verdicts`` (the names the parts share), ``difftable`` (the diff table and verdict line); and
``timeline`` -- ``--plot`` of one traced step with ``--compute``.

May import: results, plan (labels), hardware (topology for fingerprints), ceiling (ceiling
names and host matrices), the vocabulary. Never the run, the stores or the processes.
"""
