"""The doubles' HTTP servers: each on a free port of 127.0.0.1, served by a daemon thread that notices a shutdown
within `SHUTDOWN_POLL_SECONDS` (http.server's default, half a second, would be paid at every test's teardown)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SHUTDOWN_POLL_SECONDS = 0.02


def serve_http(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A started server of `handler` on a free port of `host` (its port: `server.server_address[1]`)."""
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_SECONDS,), daemon=True).start()
    return server


def close_http(server: ThreadingHTTPServer) -> None:
    """Stop serving and close the listening socket."""
    server.shutdown()
    server.server_close()
