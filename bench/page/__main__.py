"""`python -m bench.page [--check]`: see bench.page."""

import sys

from bench.page import main

sys.exit(main())
