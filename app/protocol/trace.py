"""Per-hop timing of the log pipeline (server and runner), for `bench/log_pipeline.py --trace`.

Off unless CAMPAIGN_LOG_TRACE names a path prefix; then each process appends "event trial seq
time_ns" lines to <prefix>.<role>.<pid>.tsv. Off, callers test `trace.on` and skip it.
Standard library only: the runner imports it as well as the server.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

TRACE_ENV = "CAMPAIGN_LOG_TRACE"


class Trace:
    def __init__(self, role: str) -> None:
        prefix = os.environ.get(TRACE_ENV)
        self.on = bool(prefix)
        self._lines: list[str] = []
        self._lock = threading.Lock()
        if self.on:
            self._path = f"{prefix}.{role}.{os.getpid()}.tsv"
            atexit.register(self.flush)

    def __call__(self, event: str, trial: int, seq: int, t: int | None = None) -> None:
        line = f"{event}\t{trial}\t{seq}\t{t or time.time_ns()}\n"
        with self._lock:
            self._lines.append(line)
            full = len(self._lines) >= 4096
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
            if lines:
                with open(self._path, "a") as f:
                    f.writelines(lines)
