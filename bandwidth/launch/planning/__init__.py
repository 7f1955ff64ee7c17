"""What a launch asks for and where each of its processes runs; pure, nothing started.

* ``config`` -- ``LaunchConfig``, frozen and checked (what depends on the launcher is the
  launcher table's)
* ``hostfile`` -- the hosts file format (``hosts.example``)
* ``placement`` -- the policies (round-robin within slots, servers-apart, count:N) and what each
  puts on every host's link, pure functions the planner calls too
* ``plan`` -- which host each process runs on, with its role and local rank

May import: the vocabulary (errors, results.files) and launch.contract (the job's roles).
"""
