"""A real local HTTP receiver for notification tests: Apprise's JSON webhook (json://127.0.0.1:PORT/hook)
posts here; it records every body, can refuse the first N posts (500) and can hold each answer a while."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.net import free_port


class Receiver:
    def __init__(self, *, fail_first: int = 0, delay_s: float = 0.0) -> None:
        self.port = free_port()
        self.posts: list[dict[str, Any]] = []
        self.arrivals: list[float] = []  # time.monotonic() of each post's arrival (the bench's clock)
        self.refused = 0
        self.fail_first = fail_first
        self.delay_s = delay_s
        self.got_one = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.arrivals.append(time.monotonic())
                receiver.got_one.set()
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                with receiver.lock:
                    refuse = receiver.refused < receiver.fail_first
                    if refuse:
                        receiver.refused += 1
                    else:
                        receiver.posts.append(json.loads(body or b"{}"))
                self.send_response(500 if refuse else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/hook"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def texts(self) -> list[str]:
        with self.lock:
            return [f"{p.get('title', '')}\n{p.get('message', '')}" for p in self.posts]
