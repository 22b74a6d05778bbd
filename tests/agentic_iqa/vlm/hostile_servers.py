"""Local HTTP servers that answer the OpenAI and Anthropic protocols badly: slowly, a byte at a
time, or with a body far larger than any answer.

Each is a real ThreadingHTTPServer on 127.0.0.1, so the real SDKs talk to it over a socket.
The body is a valid chat completion (or Messages reply): a client that waits long enough, or
reads everything, gets a well-formed answer, so only a deadline or a cap can stop it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from tests.agentic_iqa.vlm.fake_servers import anthropic_message, openai_completion

Protocol = Literal["openai", "anthropic"]


def answer_body(protocol: Protocol, content: str = '{"answer": "B"}') -> bytes:
    """A well-formed reply of ``protocol`` whose text is ``content``."""
    document = openai_completion(content) if protocol == "openai" else anthropic_message(content)
    return json.dumps(document).encode()


class HostileServer:
    """Answers every POST by :meth:`write`; counts requests; a context manager.

    ``mode``: ``"drip"`` sends the whole answer one byte every ``interval`` seconds (with its
    Content-Length); ``"drip-headers"`` the status line and headers too; ``"huge"`` sends a
    valid answer whose text is ``size`` bytes, chunked (no Content-Length), generated as it is
    sent; ``"huge-length"`` the same with its Content-Length announced.
    """

    def __init__(
        self,
        protocol: Protocol,
        mode: Literal["drip", "drip-headers", "huge", "huge-length"],
        *,
        interval: float = 2.0,
        size: int = 200 * 1024 * 1024,
    ) -> None:
        self.protocol, self.mode, self.interval, self.size = protocol, mode, interval, size
        self.requests = 0
        #: When each request came (``time.monotonic()``).
        self.arrivals: list[float] = []
        #: Bytes of body each request got written before the client went away.
        self.sent: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}" + ("/v1" if self.protocol == "openai" else "")

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _huge_pieces(self) -> Iterator[bytes]:
        """A valid reply whose text is ``size`` x's, in 64 KiB pieces."""
        marker = "@@TEXT@@"
        head, tail = answer_body(self.protocol, marker).split(marker.encode())
        yield head
        block = b"x" * 65536
        left = self.size
        while left > 0:
            yield block[: min(left, len(block))]
            left -= len(block)
        yield tail

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with server._lock:
                    server.requests += 1
                    server.arrivals.append(time.monotonic())
                sent = 0
                try:
                    if server.mode == "drip-headers":
                        body = answer_body(server.protocol)
                        raw = (
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                            b"content-length: %d\r\n\r\n%s" % (len(body), body)
                        )
                        for index in range(len(raw)):
                            self.wfile.write(raw[index : index + 1])
                            self.wfile.flush()
                            sent += 1
                            time.sleep(server.interval)
                    elif server.mode == "drip":
                        body = answer_body(server.protocol)
                        self._head({"content-length": str(len(body))})
                        for index in range(len(body)):
                            self.wfile.write(body[index : index + 1])
                            self.wfile.flush()
                            sent += 1
                            time.sleep(server.interval)
                    elif server.mode == "huge-length":
                        length = sum(len(piece) for piece in server._huge_pieces())
                        self._head({"content-length": str(length)})
                        for piece in server._huge_pieces():
                            self.wfile.write(piece)
                            sent += len(piece)
                    else:
                        self._head({"transfer-encoding": "chunked"})
                        for piece in server._huge_pieces():
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                            sent += len(piece)
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                finally:
                    with server._lock:
                        server.sent.append(sent)

            def _head(self, headers: dict[str, str]) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Silence the per-request stderr lines."""

        return Handler
