"""The steps' and workers' quick exit: the interpreter's teardown no longer collects the heap."""

import subprocess
import sys

import pytest

CODE = """
import sys
from core.fast_exit import skip_exit_collection
if sys.argv[2] == "skip":
    skip_exit_collection()

class Cycle:
    def __del__(self):
        open(sys.argv[1], "w").close()

c = Cycle()
c.me = c  # garbage in a reference cycle once dropped: only a collection finds it
del c  # and nothing allocated after it: no collection runs before the exit's
"""


@pytest.mark.parametrize("mode, collected", [("skip", False), ("plain", True)])
def test_the_exit_collection_is_skipped(tmp_path, mode, collected):
    marker = tmp_path / "collected"
    subprocess.run([sys.executable, "-c", CODE, str(marker), mode], check=True, timeout=60)
    assert marker.exists() is collected
