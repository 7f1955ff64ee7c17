"""Starting, watching and stopping the processes of a job, and saying how each ended.

* ``supervisor`` -- start, forward output, stop everything at the first failure, report
* ``child`` -- one child process of a launch and the ``Failure`` that names a root cause
* ``ending`` -- how each process ended, the root cause and the ``--report`` file
* ``runner`` -- the child for mpirun or srun, which reports every rank it ran; ``rankends`` --
  the lines a rank's wrapper says when its command started and how it ended, and what a rank
  said of its own end through the store
* ``noise`` -- torch's warnings explained once; ``repeats`` -- identical stderr lines of many
  processes shown once with a count
* ``sentinel`` -- a process of its own that ends what the children started once the launcher is
  gone (even by SIGKILL) or the job is over
* ``guard`` -- the ssh launcher's remote wrapper: the command's process group stopped when the
  connection closes
* ``launcherwatch`` -- on a host mpirun or srun started a process on, a line to the job's store
  that finds the launcher gone (its end, or a cut link) for the role wrappers
* ``lifeline`` -- how a process of a run ends when it must (its parent gone, no progress): the
  per-device processes of measure.py and the role wrappers
* ``limits`` -- what this host can start (memory, processes, open files), refused before
  starting; ``fdlimit`` -- the open-file limit, raised or refused before anything starts

May import: the vocabulary (errors) and launch.contract (the heartbeat's store keys).
"""
