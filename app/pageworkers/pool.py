"""Page workers: pages, fragments, exports and read-only API calls rendered by other processes, so the live
hub's event loop and GIL (ingest, log fan-out) are not spent on them, and they do not wait for those to render
(they still pass the hub's loop to be relayed: docs/performance.md measures both).

`campaign serve --workers N` (default 1, `CAMPAIGN_PAGE_WORKERS`) runs the *hub* process, which holds the
public port, the runner and viewer sockets, the page feed, the sweeper and every write, plus N page
workers: the same app (`create_app(role="pages")`), each a uvicorn on a Unix socket in a private folder,
started by `python -m app.pageworkers.worker`. The hub's outermost middleware (`PageProxy`) hands a request to a
worker when it is a GET or HEAD without a body, outside `HUB_ONLY` (the login link, which spends a token and counts failed
attempts in this process; the page feed; the health check); everything else, websockets and writes
included, runs in the hub as before. Reads need nothing from the hub but the database, with one
exception, carried in a header: the page feed's mark, which the hub takes before it forwards (a page
knows what it may have missed, app/api/pagefeed.py).

A worker that dies is started again (after 1, 2, 4 ... 60 s when it keeps dying within 10 s of its start);
while none is ready the hub serves the request itself, so a page never fails because a worker is gone. Workers exit with the hub (parent-death signal, and a check of the
parent process) and are stopped on shutdown after the hub's open requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from app.config import Settings

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
MIN_LIFE_S = 10.0  # a worker that exits sooner after its start counts as failing to start
MAX_BACKOFF_S = 60.0


@dataclass
class Worker:
    index: int
    path: Path
    proc: subprocess.Popen | None = None
    client: httpx.AsyncClient | None = None
    ready: bool = False
    in_flight: int = 0
    starts: int = 0
    served: int = 0
    started_at: float = 0.0
    backoff_s: float = 0.0  # a worker that keeps dying at start is started again less and less often
    retry_at: float = 0.0


@dataclass
class PageWorkerPool:
    """N page-worker processes and one keep-alive HTTP client per worker's Unix socket."""

    settings: Settings
    count: int
    workers: list[Worker] = field(default_factory=list)
    folder: Path | None = None
    stopping: bool = False
    fallbacks: int = 0  # requests served by the hub because no worker was ready (tests and the bench read it)
    _monitor: asyncio.Task | None = None
    _turn: itertools.count = field(default_factory=itertools.count)

    def environment(self) -> dict[str, str]:
        """The hub's effective settings (CLI flags included) for the workers; the secret key stays where it is
        (the environment or the data folder, which the hub created)."""
        env = dict(os.environ)
        for name in type(self.settings).model_fields:
            value = getattr(self.settings, name)
            if value is None or name == "secret_key":
                continue
            env[f"CAMPAIGN_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
        env["CAMPAIGN_EMBEDDED_RUNNER"] = "false"
        return env

    def start(self) -> None:
        """Spawn the workers; they become ready in the background (the hub serves reads meanwhile)."""
        self.folder = Path(tempfile.mkdtemp(prefix="campaign-pages-"))  # 0700: only this user reaches the sockets
        self.workers = [Worker(i, self.folder / f"{i}.sock") for i in range(self.count)]
        for worker in self.workers:
            self._spawn(worker)
        self._monitor = asyncio.create_task(self._run())

    def health(self) -> dict[str, int]:
        """Ready workers, and reads served by the workers and by the hub (none ready, or one failed)."""
        served = sum(w.served for w in self.workers)
        return {
            "ready": sum(w.ready for w in self.workers),
            "of": self.count,
            "served": served,
            "by_hub": self.fallbacks,
        }

    def argv(self, worker: Worker) -> list[str]:
        return [sys.executable, "-m", "app.pageworkers.worker", "--uds", str(worker.path), "--parent", str(os.getpid())]

    def _spawn(self, worker: Worker) -> None:
        worker.path.unlink(missing_ok=True)
        worker.ready = False
        worker.starts += 1
        worker.started_at = time.monotonic()
        worker.proc = subprocess.Popen(
            self.argv(worker),
            env=self.environment(),
            stdin=subprocess.DEVNULL,
        )

    async def _wait_ready(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_S
        client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(worker.path)),
            timeout=httpx.Timeout(300.0, connect=5.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            # A relay, not a browser: no cookie jar (one person's Set-Cookie must never ride along with
            # another's request) and none of httpx's default headers (the client's own go through).
            cookies=http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
        )
        client.headers = httpx.Headers()
        while loop.time() < deadline and not self.stopping:
            if worker.proc is None or worker.proc.poll() is not None:
                break
            if worker.path.exists():
                try:
                    r = await client.get("http://localhost/healthz", timeout=2.0)
                    if r.status_code == 200:
                        if worker.client is not None:
                            await worker.client.aclose()
                        worker.client = client
                        worker.ready = True
                        return
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.05)
        await client.aclose()
        code = worker.proc.poll() if worker.proc else None
        log.warning("page worker %d did not start (exit code %s); the hub serves its pages", worker.index, code)

    async def _run(self) -> None:
        """Wait for the workers, then start one again when it exits (checked every second; backing off, 1 to
        60 s, while it keeps dying soon after its start)."""
        await asyncio.gather(*(self._wait_ready(w) for w in self.workers))
        log.info("page workers: %d of %d ready", sum(w.ready for w in self.workers), self.count)
        while not self.stopping:
            await asyncio.sleep(1.0)
            for worker in self.workers:
                if self.stopping or worker.proc is None or worker.proc.poll() is None:
                    continue
                now = time.monotonic()
                if worker.ready or worker.retry_at == 0.0:  # it had been running: note when, decide the wait
                    worker.ready = False
                    short = now - worker.started_at < MIN_LIFE_S
                    worker.backoff_s = min(MAX_BACKOFF_S, max(1.0, worker.backoff_s * 2)) if short else 0.0
                    worker.retry_at = now + worker.backoff_s
                    log.warning(
                        "page worker %d exited (code %s): starting it again%s",
                        worker.index,
                        worker.proc.returncode,
                        f" in {worker.backoff_s:.0f} s" if worker.backoff_s else "",
                    )
                if now < worker.retry_at:
                    continue
                worker.retry_at = 0.0
                self._spawn(worker)
                await self._wait_ready(worker)

    def pick(self) -> Worker | None:
        ready = [w for w in self.workers if w.ready and w.client is not None]
        if not ready:
            return None
        least = min(w.in_flight for w in ready)
        candidates = [w for w in ready if w.in_flight == least]
        return candidates[next(self._turn) % len(candidates)]

    async def stop(self) -> None:
        self.stopping = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(BaseException):
                await self._monitor
        for worker in self.workers:
            worker.ready = False
            if worker.proc is not None and worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(self._reap)
        for worker in self.workers:
            if worker.client is not None:
                await worker.client.aclose()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _reap(self) -> None:
        for worker in self.workers:
            if worker.proc is None:
                continue
            try:
                worker.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
