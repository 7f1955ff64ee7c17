"""The store and environment contract: what every process of a job receives from the launcher,
and how it reaches the job's store. The launcher's bottom floor: programs import it alone
(``environment``'s ``Role`` and ``join_store``), so nothing here starts or watches a process.

* ``environment`` -- the variables every process receives, ``Role.from_environ`` to read them,
  ``join_store`` to join the rendezvous
* ``forwarding`` -- which of the launcher's variables are forwarded (an allowlist), and ``--env``
* ``torchenv`` -- a job started by torchrun (or another launcher that sets
  ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``) read as a launch.py job
* ``storeopen`` -- the store such a job's rank 0 hosts and the others join, each failure in one
  line within ``--timeout``
* ``storegate`` -- the gate in front of the launcher's store that serves only the job's secret,
  and the relay its programs reach it through; ``storedoor`` -- the store's private loopback
  port, closed to all but the gate
* ``heartbeat`` -- each process's beats through the store, and the launcher's watch on them
* ``interface`` -- the network interface towards the rendezvous

May import: the vocabulary (errors). Nothing else of the launcher.
"""
