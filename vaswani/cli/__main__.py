"""`python -m vaswani.cli ...`: the `vaswani` command where no script was installed."""

import sys

from vaswani.cli import main

sys.exit(main())
