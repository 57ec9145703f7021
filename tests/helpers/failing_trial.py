"""A trial that fails at once: 30 numbered lines on stdout, then exit code 3 (`python -m tests.helpers.failing_trial`,
whatever arguments follow)."""

import sys

for i in range(1, 31):
    print(f"trial line {i}")
sys.exit(3)
