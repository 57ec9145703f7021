"""The cluster's network, as a pod sees it: an HTTP proxy on 127.0.0.1 that a test puts in `HTTP_PROXY`, so that a
step's plain `requests.post("http://latest-digits-predictor.ml.svc.cluster.local/...")` reaches the pod behind that
name. Names the operator doubles registered resolve to their pods; any other host (the cluster's external domain,
`example.com` on a default install) cannot be reached from a pod: the connection is closed without an answer."""

from __future__ import annotations

import http.client
import random
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.doubles.http import close_http, serve_http


class Network:
    def __init__(self, seed: int = 0):
        self.hosts: dict[str, list[tuple[str, int, int]]] = {}  # host -> [(ip, port, weight)]
        self.refused: set[str] = set()
        self.requests: list[tuple[str, str]] = []  # (method, url) as the proxy received them
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        network = self

        class Proxy(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _relay(self):
                url = urlsplit(self.path)
                host = url.hostname or ""
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with network.lock:
                    network.requests.append((self.command, self.path))
                    target = network._pick(host)
                if target is None:
                    self.close_connection = True
                    self.connection.close()  # unreachable: no answer at all
                    return
                try:
                    connection = http.client.HTTPConnection(*target, timeout=120)
                    path = url.path + (f"?{url.query}" if url.query else "")
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "host")}
                    connection.request(self.command, path, body=body, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                except OSError:
                    self.close_connection = True
                    self.connection.close()  # the pod refused the connection or died
                    return
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay

        self.server = serve_http(Proxy)

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def environ(self) -> dict:
        """What a test puts in os.environ for the step: plain HTTP through this network, the API server direct."""
        return {
            "HTTP_PROXY": self.proxy,
            "http_proxy": self.proxy,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    def route(self, host: str, backends: list[tuple[str, int, int]]) -> None:
        with self.lock:
            self.hosts[host] = [b for b in backends if b[2] > 0]

    def unroute(self, host: str) -> None:
        with self.lock:
            self.hosts.pop(host, None)

    def _pick(self, host: str):
        if host in self.refused:
            return ("127.0.0.1", 9)  # nothing listens there: connection refused
        backends = self.hosts.get(host)
        if not backends:
            return None
        ip, port, _ = self.random.choices(backends, weights=[b[2] for b in backends])[0]
        return ip, port

    def close(self):
        close_http(self.server)
