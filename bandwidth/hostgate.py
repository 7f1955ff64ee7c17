"""``python -m bandwidth.hostgate``: the per-host gate on a host-to-host matrix (the command line of
bandwidth.report.hostgate, where its usage is)."""

import sys

from bandwidth.report.hostgate import main

if __name__ == "__main__":
    sys.exit(main())
