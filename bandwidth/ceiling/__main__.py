import sys

from bandwidth import cliexit

cliexit.quiet_interrupt_while_importing("python -m bandwidth.ceiling")   # while torch imports

from bandwidth.ceiling.cli import main  # noqa: E402

sys.exit(main())
