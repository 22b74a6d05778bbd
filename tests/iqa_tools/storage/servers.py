"""Serve S3 on localhost with faults on demand: a front that counts requests before moto."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler


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
