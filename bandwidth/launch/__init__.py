"""The distributed launcher: MXNet's ``tools/launch.py`` interface, with supervision.

Split by concern into four floors, each importing only those below it (and the vocabulary:
errors, cliparse, results.files); nothing of the measurement, since the launcher starts any
command:

* ``contract`` (bottom) -- what every process of a job receives and how it reaches the job's
  store: the environment contract, the forwarded variables, the store's gate, the heartbeat
* ``planning`` -- what a launch asks for (``LaunchConfig``, the hosts file) and where each of its
  processes runs (the placement policies, the plan)
* ``supervision`` -- starting, watching and stopping processes: the supervisor, how each process
  ended and the root cause, the ssh guard, the sentinel, the lifelines of measure.py's own
  processes, what this host can start
* ``launchers`` (top) -- ``local``, ``ssh``, ``mpi``, ``slurm``, their table and the role
  wrappers that mpirun and srun start

Modules at this level, above all four, in the order a launch uses them:

* ``cli`` -- the command line (``python launch.py``, ``bandwidth-launch``), parsed once into a
  ``LaunchConfig``; exact usage there
* ``preflight`` -- start-up that scales: the rendezvous timeout from the job's size, a
  measure.py command line checked once before anything starts
* ``rendezvous`` -- the TCPStore the launcher hosts (behind the contract's gate), and the watch
  on who joined
* ``driver`` -- ``run(config, environ)``, the whole launch without the command line
"""
