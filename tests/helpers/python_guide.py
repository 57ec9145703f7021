"""The Python of docs/guides/python.md, block by block as written: the tests run it (the fast part in
tests/contract/repository/test_python_guide.py, the runs in tests/e2e/test_python_guide.py)."""

import re
from dataclasses import dataclass
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "python.md"
_BLOCK = re.compile(r"(<!-- e2e: [^>]*-->\n)?```python\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    code: str
    e2e: bool  # marked `<!-- e2e: ... -->`: it runs the pipeline (tens of seconds)
    line: int

    def run(self, namespace: dict) -> None:
        exec(compile(self.code, f"{GUIDE}:{self.line}", "exec"), namespace)


def blocks() -> list[Block]:
    text = GUIDE.read_text()
    return [Block(m.group(2), bool(m.group(1)), text.count("\n", 0, m.start(2)) + 1) for m in _BLOCK.finditer(text)]
