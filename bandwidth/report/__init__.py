"""Everything that renders or judges results: text (preamble, MXNet's lines, summary: ``text``),
fixed-width tables and CSV (``table``, their cells and the columns that name a row: ``cells``),
plots (``plot``), and the gates: baselines and their records
(``baseline``), their statistics (``stats``) and per-host gates (``hostgate``; on the host check
in rounds, ``roundgate``; on the GPU check in rounds, ``gpugate``). The gates'
thresholds, records and JUnit / markdown reports are vocabulary (bandwidth.thresholds,
bandwidth.gates), shared with the ceiling's gate; so is progress on stderr (bandwidth.progress),
which the launcher and a distributed job's set-up show too.

The regression check's parts: ``fingerprints`` (the hardware against the baseline's),
``rowcompare`` (rows against the baseline, the floor and the ceiling), ``verdicts`` (the names the
parts share), ``difftable`` (the diff table and verdict line); and ``timeline`` -- ``--plot`` of
one traced step with ``--compute``. ``stream``: the process's stdout, in whole lines, shared with
the job's other processes (imports nothing heavy: measure.py sets it up before parsing).

May import: results, plan (labels), arrays (dtype sizes), hardware (topology for fingerprints), the vocabulary (links
for host matrices; files, gates, thresholds, textformat). Never the ceiling's measurements, the
run, the stores or the processes.
"""
