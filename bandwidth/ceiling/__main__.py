import sys

from bandwidth.ceiling.cli import main

sys.exit(main())
