"""`python -m sptune.cli ...`: the same as the `sptune` command."""

import sys

from sptune.cli.main import main

sys.exit(main())
