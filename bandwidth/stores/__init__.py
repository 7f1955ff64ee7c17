"""The kvstore modes, one module each, listed once in ``registry`` (the only table the driver
reads): ``local``, ``device``, ``nccl`` (and ``dist_nccl``), the parameter-server modes in
``dist``, and the server side of those, ``psserver``; ``peerwait``: a worker's wait for an
exchange, timed per server (its rate with each peer). ``base`` is the small interface each mode
fills; beside its operation each mode holds two small objects, its ``traits`` (what it is in words
and flags: summary, bound, how it is run) and its ``costs`` (what it moves and needs: bus factor,
network traffic, memory); ``owners``: which device owns which elements (the device mode's
placement rules, also the parameter servers' key placement); ``deviceplan``: the device mode's
plan of a step (chunks, copy streams, events and the views each copy and sum touches). Adding a
mode: one module here and one line in ``registry``.

May import: the vocabulary, hardware (devices, raw copies), arrays (layout, optimizers). Never
config, the run, the measurement or the report.
"""
