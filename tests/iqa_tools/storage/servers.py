"""Serve S3 and HTTP sites on loopback for the storage tests, counting every request.

:class:`Front` stands before moto's S3 and injects faults on demand; :class:`Site` is a small
HTTP site that serves photos, redirects, stalls or lies about its size.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import REPO

#: The photo the sites serve (and the size a lying site declares).
PHOTO = (REPO / "examples" / "i03_blurred.png").read_bytes()


@dataclass
class Front:
    """An S3 endpoint in front of moto: counts requests as (method, path), and in ``bodies``
    the GETs answered with the object (200, not "304 Not Modified"), answers the queued faults
    first (``(status, code)``, or ``"stall"``), forwards everything else."""

    upstream: str
    url: str = ""
    seen: Counter = field(default_factory=Counter)
    bodies: Counter = field(default_factory=Counter)
    faults: list = field(default_factory=list)
    always: tuple[int, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self) -> tuple[int, str] | str | None:
        """Return the next fault to answer with, or None to forward the request."""
        with self.lock:
            if self.always is not None:
                return self.always
            return self.faults.pop(0) if self.faults else None


def front_handler(front: Front) -> type[BaseHTTPRequestHandler]:
    """Return a request handler that answers as ``front`` says."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            with front.lock:
                front.seen[(self.command, self.path.split("?")[0])] += 1
            fault = front.take_fault()
            if fault == "stall":
                time.sleep(2.5)
                return
            if fault is not None:
                status, code = fault
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>injected</Message><RequestId>1</RequestId></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            host = front.upstream.removeprefix("http://")
            connection = http.client.HTTPConnection(host, timeout=10)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            connection.request(self.command, self.path, headers=headers)
            response = connection.getresponse()
            body = response.read()
            if self.command == "GET" and response.status == 200:
                with front.lock:
                    front.bodies[self.path.split("?")[0]] += 1
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "server", "date"):
                    self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            connection.close()

        do_GET = _answer
        do_HEAD = _answer

    return Handler


@dataclass
class Site:
    """An HTTP server's behaviour per path, and the requests that reached it."""

    files: dict[str, bytes] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    stalls: set[str] = field(default_factory=set)
    #: path -> (size its HEAD declares, bytes its GET sends with no Content-Length)
    liars: dict[str, tuple[int, int]] = field(default_factory=dict)
    seen: Counter = field(default_factory=Counter)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self, path: str | None = None) -> int:
        with self.lock:
            return sum(
                count
                for (_, seen), count in self.seen.items()
                if path is None or seen.split("?")[0] == path
            )


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            with site.lock:
                site.seen[(self.command, self.path)] += 1
            path = self.path.split("?")[0]
            body = self.command == "GET"
            try:
                if path in site.redirects:
                    self.send_response(301)
                    self.send_header("Location", site.redirects[path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif path in site.stalls:
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")
                    self.send_header("Content-Length", str(len(PHOTO)))
                    self.end_headers()
                    if body:
                        self.wfile.flush()
                        time.sleep(8)
                elif path in site.liars:
                    declared, sent = site.liars[path]
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")  # it is not
                    if not body:
                        self.send_header("Content-Length", str(declared))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    if body:
                        block = b"\0" * 65536
                        for _ in range(sent // len(block)):
                            self.wfile.write(block)
                elif path in site.files:
                    data = site.files[path]
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")
                    self.send_header("Content-Length", str(len(data)))
                    if path in site.etags:
                        self.send_header("ETag", f'"{site.etags[path]}"')
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                else:
                    self.send_response(404 if path != "/admin" else 200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
            except (BrokenPipeError, ConnectionResetError):
                return

        do_GET = _answer
        do_HEAD = _answer

    return Handler


def serve_site(site: Site) -> Iterator[Site]:
    """Serve ``site`` on a loopback port until the generator is closed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield site
    server.shutdown()
    server.server_close()
