"""``python -m bandwidth`` is ``python -m bandwidth.measure``."""

import sys

from bandwidth.measure import main

sys.exit(main())
