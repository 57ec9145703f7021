"""The server's ports: checked before the models load, and a port in use is reported in one line with what holds it
(found in /proc on Linux) and the option that picks another."""

from __future__ import annotations

import errno
import glob
import os
import socket


class PortError(OSError):
    """A port the server cannot bind; the message is one line."""


def check_ports(host: str, rest_port: int, grpc_port: int) -> None:
    """Raise PortError when the server's REST or gRPC port cannot be bound (`check_free`)."""
    check_free(host, rest_port, "REST", "--rest-port")
    check_free(host, grpc_port, "gRPC", "--grpc-port")


def check_free(host: str, port: int, what: str, option: str) -> None:
    """Raise PortError when `port` (> 0) cannot be bound on `host`, as the server would bind it (SO_REUSEADDR)."""
    if port <= 0:
        return
    advice = f"choose another with {option} PORT, or {option} 0 for any free port"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortError(f"cannot bind {what} to {host}:{port}: {e.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise PortError(f"cannot bind {what} to {host}:{port}: {e.strerror}; {advice}") from None
                held = holder(port)
                raise PortError(
                    f"port {port} ({what}, {host}) is in use{f' by {held}' if held else ''}; {advice}"
                ) from None


def holder(port: int) -> str:
    """`pid N (command line)` of the process listening on TCP `port`, or "" when that cannot be known (not Linux,
    another user's process)."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        for row in rows:  # sl local_address rem_address st ... inode; st 0A = LISTEN
            if row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{row[9]}]")
    for fds in glob.glob("/proc/[0-9]*/fd") if sockets else []:
        if _links(fds) & sockets:
            pid = fds.split("/")[2]
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())
            except OSError:  # gone meanwhile
                return f"pid {pid}"
            return f"pid {pid} ({command[:300]})"
    return ""


def _links(fds: str) -> set[str]:
    """What a process's file descriptors point at (none readable: another user's process, or gone)."""
    try:
        names = os.listdir(fds)
    except OSError:
        return set()
    links = set()
    for name in names:
        try:
            links.add(os.readlink(f"{fds}/{name}"))
        except OSError:  # closed meanwhile
            continue
    return links
