"""What exchanges the arrays: the toolkit's own kvstore modes, or another framework's real kvstore
driven through the same protocol, output and error check (``--backend``).

    python bandwidth/measure.py --backend mxnet --kv-store device --cpus 2 --network lenet
    python bandwidth/measure.py --backend toolkit,mxnet --kv-store local,device --cpus 2

``registry`` gives, per backend and kvstore mode, the ``KVStore`` class that describes the mode to
the driver (summary, bound, bus factor, why it cannot run here); ``engines`` is the one interface
the run calls to carry a measurement out (every device in this process, or the roles under
launch.py). ``mxnet_backend`` describes MXNet's kvstore types; ``mxnet_session`` drives them, and
is imported only when asked for; it imports ``mxnet`` itself only when it measures.

May import: arrays, config, plan, stores, measurement, processes, results. Nothing here imports the run.
"""
