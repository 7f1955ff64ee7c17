"""``python -m bandwidth.netlab``: see bandwidth.netlab.cli."""

import sys

from bandwidth.netlab.cli import main

sys.exit(main())
