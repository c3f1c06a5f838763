"""`python -m sim.cli`: the `servesim` command, as the console script runs it."""

import sys

from sim.cli import main

sys.exit(main())
