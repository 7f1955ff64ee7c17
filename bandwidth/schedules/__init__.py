"""The schedule stage, between the plan and the stores: in which parts and in which order a
training step exchanges the arrays (``--schedule``). ``base`` is the interface (units, parts,
events), one module per schedule (``flat``, ``backward``, ``ddp``, ``fsdp``), one table of them
(``registry``), and ``runner``, which executes a schedule's events on one store per part.

``graphs`` -- a scheduled step on GPUs with one CUDA graph per part; ``sharded`` -- FSDP's two
halves of an all-reduce, the store of ``fsdp``; ``realddp`` -- real DistributedDataParallel over a
network's shapes, the reference the ``ddp`` schedule is held to; ``torchmodel`` -- a torch.nn
module of a schedule's units whose forward and backward call a compute given to it, what the
framework's step (``--framework torch``) wraps.

May import: the vocabulary (errors, formulas), arrays.layout, the stores (their classes and
registry). Never config, the run, the measurement or the report.
"""
