"""Start a distributed job (MXNet's tools/launch.py interface); see bandwidth/launch/cli.py.

    python launch.py -n 2 -s 2 python3 train.py
    python launch.py -H hosts -n 4 --launcher mpi python3 train.py
"""

import sys

from bandwidth.launch.cli import main

if __name__ == "__main__":
    sys.exit(main())
