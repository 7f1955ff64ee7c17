import sys

from bandwidth.predict.cli import main

sys.exit(main())
