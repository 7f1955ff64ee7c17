"""Everything that renders or judges results: text (preamble, MXNet's lines, summary: ``text``),
fixed-width tables and CSV (``table``, their cells and column layout: ``cells``), plots (``plot``), progress on stderr (``progress``),
and the gates: baselines and thresholds (``baseline``), their statistics (``stats``), per-host
gates (``hostgate``) and the JUnit / markdown reports CI systems show (``gatereport``).

May import: results, plan (labels), hardware (topology for fingerprints), ceiling (ceiling
names and host matrices), the vocabulary. Never the run, the stores or the processes.
"""
