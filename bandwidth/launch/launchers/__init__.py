"""The launchers themselves, the top floor of the launcher.

* ``table`` -- the table of launchers (one entry per ``--launcher`` name: what it needs, how it
  builds its children)
* ``local`` -- every process on this host
* ``ssh`` -- one ssh client per process (remotely under supervision's ``guard``)
* ``mpi`` (+ ``mpirole``) -- every process from one ``mpirun``; ``slurm`` (+ ``slurmrole``) --
  every process from one ``srun`` step
* ``rolewrap`` -- what ``mpirole`` and ``slurmrole`` share: a process that mpirun or srun started
  takes its planned role's environment, runs the command and says how it ended

May import: the vocabulary (errors), launch.contract, launch.planning and launch.supervision.
"""
