"""A fake OpenAI-compatible server's base handler for the tests that replay against a threaded
``http.server`` on 127.0.0.1: quiet, and answering ``GET /v1/models`` with one model of a
4,096-token context (404 for any other path). A test's handler adds its own ``do_POST``;
:func:`serving` runs its server and stops it."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODELS = {"object": "list", "data": [
    {"id": "fake-model", "object": "model", "max_model_len": 4096}]}


class ModelsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        raw = json.dumps(MODELS).encode()
        found = self.path == "/v1/models"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw) if found else 0))
        self.end_headers()
        if found:
            self.wfile.write(raw)


@contextlib.contextmanager
def serving(server: ThreadingHTTPServer, release: Callable[[], None]) -> Iterator[str]:
    """``server``'s URL while it serves on a thread; at the end ``release`` (the test's held
    streams let go), then the server stopped and closed."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        release()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
