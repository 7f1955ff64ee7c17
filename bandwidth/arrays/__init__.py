"""The arrays' vocabulary, below every stage that handles them: where each array lives in the flat
per-device buffers and torch's dtypes (``layout``), the dtypes' sizes, known without torch
(``dtypes``), the seeded test data whose reduced value is
known in closed form and MXNet's error measure (``data``), and the optimizers a kvstore can apply
to the reduced gradient (``optimizers``). The stores, the schedules, the measurement, the plan and
the backends all read them; none of them owns them.

May import only the standard library, numpy, torch, networks and the vocabulary (errors,
formulas). Nothing it imports imports it back.
"""
