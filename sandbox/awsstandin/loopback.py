"""An HTTP server on loopback, in a thread of its own: how the stand-in serves its endpoints."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Mapping
from typing import Final

LOOPBACK: Final = "127.0.0.1"

# (method, path, headers, body) -> (status, content type, body)
Answer = Callable[[str, str, Mapping[str, str], bytes], tuple[int, str, bytes]]


class LoopbackServer:
    """Answers every GET and POST with ``answer``; ``start`` listens, ``stop`` stops."""

    def __init__(self, answer: Answer, name: str, port: int = 0) -> None:
        """Serve on ``port`` of loopback (0: a free one the OS picks as it binds)."""
        self._server = http.server.ThreadingHTTPServer((LOOPBACK, port), _handler(answer))
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> None:
        """Listen in a thread of its own."""
        self._thread.start()

    def stop(self) -> None:
        """Stop listening."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler(answer: Answer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, content_type, payload = answer(
                self.command, self.path, dict(self.headers.items()), body
            )
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: requests and answers carry credentials."""

    return Handler
