"""What a person sees on a terminal: a screen replayed from what a program wrote to it, and a stream that says it is
a terminal."""

import io
import os
import re
import sys


class Screen:
    """What a terminal shows of what was written to it: `\\r`, `\\n` (a pseudo-terminal's `\\r\\n` too), erase to
    the end of the line (`ESC[K`); other escape sequences are dropped."""

    def __init__(self):
        self.lines = [""]
        self.row = self.col = 0

    def feed(self, text: str) -> None:
        for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|.", text, re.DOTALL):
            if token == "\r":
                self.col = 0
            elif token == "\n":
                self.row, self.col = self.row + 1, 0
                self.lines += [""] * (self.row + 1 - len(self.lines))
            elif token == "\x1b[K":
                self.lines[self.row] = self.lines[self.row][: self.col]
            elif not token.startswith("\x1b"):
                line = self.lines[self.row].ljust(self.col)
                self.lines[self.row] = line[: self.col] + token + line[self.col + 1 :]
                self.col += 1

    def text(self) -> list[str]:
        """The lines up to the cursor's, the empty ones at the end left out."""
        lines = self.lines[: self.row + 1]
        while lines and not lines[-1]:
            lines.pop()
        return lines


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_on_a_terminal(argv: list[str], env: dict) -> tuple[int, list[list[str]], list[str]]:
    """Run `python argv...` under a pseudo-terminal: its exit code, the screen after each read (what a person saw at
    that moment) and the final screen."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: the program on the terminal (never back into the caller)
        try:
            os.execve(sys.executable, [sys.executable, *argv], env)
        finally:
            os._exit(127)
    screen, screens = Screen(), []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen.feed(chunk.decode(errors="replace"))
        screens.append(screen.text())
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), screens, screen.text()
