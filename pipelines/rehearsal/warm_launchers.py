"""Run a rehearsal's Google Cloud Pipeline Components container tasks in processes forked from a warm server.

`serving(modules)`, entered in the rehearsal's environment, starts a server: a fresh interpreter started as a task's
command is (`python -u -m`), in that environment, so the redirect shim (shim/sitecustomize.py) patches it, that
imports `modules` (GCPC's launchers) and everything they import once, then forgets the launchers themselves and
freezes the imported objects (`gc.freeze`). While active, kfp.local's `run_local_subprocess` runs a command
`python -u -m <module> args...` (this interpreter, one of `modules`) as a child forked from the server:
the child takes the task's working directory, environment (the rehearsal's plus kfp.local's `env_vars`, as the
process would get) and arguments, writes stdout and stderr into one pipe whose lines are printed as kfp.local prints
a process's, then runs the launcher as `python -m` would (`runpy`, as `__main__`); its exit status (0, SystemExit's
code, 1 for an uncaught exception with its traceback, minus the signal that killed it) is returned as kfp.local
returns a process's. Other commands take kfp.local's own path.

Faithful: the same launcher code runs with the same arguments and environment, in a process of its own forked from
one that only imported modules (the redirect's patches, applied on import, included), so no task sees another's
state; what it saves is each task's import of the Vertex AI SDK, and the collections of those imports' objects at
its exit (frozen, as core/fast_exit.py freezes a step's heap at its exit: only garbage in reference cycles among
them is left to the operating system). A task's process is a grandchild of the rehearsing process:
pipelines/step_memory.py counts it for the step after its first `SETTLE_SECONDS`, as it does a forked child that has
not exec'd, with the server's resident memory as its start, as a fresh launcher's after the same imports. When a
task's caller stops waiting (a cancelled run), its process gets SIGTERM (GCPC's launchers then cancel their job, as
on a cancelled Vertex pipeline), SIGKILL `GRACE_SECONDS` later; leaving `serving` does the same to every task's
process still running and ends the server.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL for a task's process whose caller stopped waiting (by default)


class WarmLaunchers:
    """The client of a server that imported `modules` (see the module)."""

    def __init__(self, modules: list[str], grace: float = GRACE_SECONDS):
        self.modules = set(modules)
        self._control, server_end = socket.socketpair()
        with server_end:
            self._server = subprocess.Popen(
                [sys.executable, "-u", "-m", __name__, str(server_end.fileno()), str(grace), *modules],
                pass_fds=[server_end.fileno()],
            )
        self._lock = threading.Lock()

    def runs(self, command: list[str]) -> bool:
        """Whether `command` is `<this interpreter> -u -m <one of the modules> ...` and the server is up (one that
        failed to import a module is not: the task's own process then shows the error)."""
        is_launcher = command[:3] == [sys.executable, "-u", "-m"] and len(command) > 3 and command[3] in self.modules
        return is_launcher and self._server.poll() is None

    def run(self, command: list[str], env: dict[str, str]) -> int:
        """Run `command` (one the server `runs`) with `env` in a child of the server, print its output lines as
        they come, then an empty line (as kfp.local does); its exit status."""
        read, write = os.pipe()
        task, server_end = socket.socketpair()
        with task, open(read) as output:
            try:
                with self._lock:
                    socket.send_fds(self._control, [b"t"], [server_end.fileno(), write])
            finally:
                server_end.close()
                os.close(write)
            request = {"cwd": os.getcwd(), "env": env, "module": command[3], "args": command[4:]}
            task.sendall(json.dumps(request).encode() + b"\n")
            for line in iter(output.readline, ""):
                print(line, end="")
            print("\n")
            with task.makefile() as status:
                code = status.readline()
        if not code:
            raise RuntimeError(f"the warm launchers' server ended before the task's process: {command[3]}")
        return int(code)

    def close(self) -> None:
        """End the server, after its tasks' processes (SIGTERM, SIGKILL `grace` seconds later)."""
        self._control.close()
        self._server.wait()


@contextlib.contextmanager
def serving(modules: list[str]):
    """kfp.local's tasks running one of `modules` run warm while the block runs (no server when there is none)."""
    if not modules:
        yield
        return
    from kfp.local import subprocess_task_handler

    launchers = WarmLaunchers(modules)
    run_local = subprocess_task_handler.run_local_subprocess

    def run_local_subprocess(full_command, env_vars=None):
        if not launchers.runs(full_command):
            return run_local(full_command, env_vars)
        return launchers.run(full_command, {**os.environ, **(env_vars or {})})

    subprocess_task_handler.run_local_subprocess = run_local_subprocess
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = run_local
        launchers.close()


def _serve(control: socket.socket, grace: float) -> tuple[dict, int] | None:
    """Fork a child for each task sent on `control` until it closes and the children have ended; in a child, return
    its task and output fd (the server returns None)."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so that SIGCHLD wakes the selector
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    tasks: dict[int, socket.socket] = {}  # pid: the task's socket
    kill_at: dict[int, float] = {}  # pid: when a task's process told to end gets SIGKILL
    open_ = True

    def stop(pid: int) -> None:
        os.kill(pid, signal.SIGTERM)
        kill_at[pid] = time.monotonic() + grace

    while open_ or tasks:
        timeout = max(0.0, min(kill_at.values()) - time.monotonic()) if kill_at else None
        for key, _ in selector.select(timeout):
            if key.fileobj is control:
                message, fds, _flags, _address = socket.recv_fds(control, 1, 2)
                if not message:
                    open_ = False
                    selector.unregister(control)
                    for pid in set(tasks) - set(kill_at):
                        stop(pid)
                    continue
                task, output = socket.socket(fileno=fds[0]), fds[1]
                with task.makefile("rb") as lines:
                    line = lines.readline()
                if not line:  # the caller stopped before sending its task
                    task.close()
                    os.close(output)
                    continue
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    selector.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    for sock in (control, task, *tasks.values()):
                        sock.close()
                    return request, output
                os.close(output)
                tasks[pid] = task
                selector.register(task, selectors.EVENT_READ, pid)
            elif key.fileobj == wake_read:
                os.read(wake_read, 512)
                _reap(tasks, kill_at, selector)
            elif key.data in tasks:  # the task's caller stopped waiting (its process not reaped in this round)
                selector.unregister(key.fileobj)
                stop(key.data)
        for pid, when in list(kill_at.items()):
            if when <= time.monotonic():
                os.kill(pid, signal.SIGKILL)
                del kill_at[pid]
    return None


def _reap(tasks: dict[int, socket.socket], kill_at: dict[int, float], selector: selectors.BaseSelector) -> None:
    """Send each ended child's exit status (as `subprocess` gives it) to its task's caller."""
    while tasks:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        task = tasks.pop(pid)
        kill_at.pop(pid, None)
        with contextlib.suppress(KeyError):
            selector.unregister(task)
        with task, contextlib.suppress(OSError):  # the caller may be gone
            task.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _start(request: dict, output: int) -> None:
    """Make this forked child the task's process, up to running its module."""
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # `python -m`'s first entry: the working directory
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [sys.argv[0], *request["args"]]  # runpy sets argv[0] to the module's file, as `python -m` does


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the tasks and their caller
    for module in sys.argv[3:]:
        importlib.import_module(module)
        del sys.modules[module]  # executed again as __main__ by each task, as `python -m` runs it
    gc.collect()
    gc.freeze()  # the imported objects: not scanned, so not copied, by each child's collections and its exit
    task = _serve(socket.socket(fileno=int(sys.argv[1])), float(sys.argv[2]))
    if task is not None:
        _start(*task)
        # the interpreter's own exit follows: SystemExit's code, an uncaught exception's traceback and status 1
        runpy.run_module(task[0]["module"], run_name="__main__", alter_sys=True)
