"""The distributed launcher: MXNet's ``tools/launch.py`` interface, with supervision.

Beside them: ``child`` -- one child process of a launch and the ``Failure`` that names a root
cause; ``ending`` -- how each process ended, the root cause and the ``--report`` file;
``heartbeat`` -- each process's beats through the rendezvous, and the launcher's watch on them;
``repeats`` -- identical stderr lines of many processes shown once with a count; ``fdlimit`` -- the
open-file limit, checked before anything starts.

May import the vocabulary (errors, cliparse) and processes.lifeline; nothing of the measurement:
the launcher starts any command.

Modules, in the order a launch uses them:

* ``cli`` -- the command line (``python launch.py``, ``bandwidth-launch``), parsed once into a
  ``LaunchConfig``; exact usage there
* ``config`` -- ``LaunchConfig``, frozen and checked (what depends on the launcher: ``launchers``)
* ``hostfile`` -- the hosts file format (``hosts.example``)
* ``launchers`` -- the table of launchers: ``local``, ``ssh``, ``mpi``, ``slurm``
* ``plan`` -- which host each process runs on; ``placement`` -- the policies (round-robin
  within slots, servers-apart, count:N) and what each puts on every host's link, pure functions
  the planner calls too
* ``preflight`` -- start-up that scales: the rendezvous timeout from the job's size, a
  measure.py command line checked once before anything starts; ``limits`` -- what this host can
  start (memory, processes, open files), refused before starting
* ``contract`` -- the environment every process receives, and ``Role.from_environ`` to read it
* ``environ`` -- which of the launcher's variables are forwarded (an allowlist)
* ``rendezvous`` -- the TCPStore the launcher hosts, and the watch on who joined;
  ``storegate`` -- the gate in front of it that serves only the job's secret, and the relay
  its programs reach it through; ``storedoor`` -- its private loopback port, closed to all
  but the gate
* ``supervisor`` -- start, forward output, stop everything at the first failure, report;
  ``sentinel`` -- a process of its own that ends what the children started once the launcher is
  gone (even by SIGKILL) or the job is over
* ``local``, ``ssh`` (+ ``guard``), ``mpi`` (+ ``mpirole``), ``slurm`` (+ ``slurmrole``) -- the
  launchers themselves; ``rolewrap``, what ``mpirole`` and ``slurmrole`` share (a process that
  mpirun or srun started takes its planned role's environment, runs the command and says how it
  ended: ``rankends``); ``runner``, the child for mpirun or srun that reports every rank
* ``interface`` -- the network interface towards the rendezvous; ``noise`` -- torch's warnings
  explained once; ``torchenv`` -- a job started by torchrun (or another launcher that sets
  ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``) read as a launch.py job; ``storeopen`` -- the store
  such a job's rank 0 hosts and the others join, each failure in one line within ``--timeout``
* ``driver`` -- ``run(config, environ)``, the whole launch without the command line
"""
