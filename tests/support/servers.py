"""Real servers for tests: `campaign serve` in its own process (LiveServer) and uvicorn serving
create_app(settings) in a thread of the test process (ThreadServer, when a test needs the AppState)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import httpx
import uvicorn

from app.config import Settings
from app.db import session_scope
from app.domain.logins import create_api_token
from app.state import app_state
from tests.support.databases import seed_admin
from tests.support.net import free_port
from tests.support.paths import ROOT


class LiveServer:
    """`campaign serve` in its own process on a free port, with its printed login URL."""

    def __init__(self, proc: subprocess.Popen, url: str, login_url: str, env: dict[str, str], log: Path) -> None:
        self.proc, self.url, self.login_url, self.env, self.log = proc, url, login_url, env, log

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )


def start_live_server(
    tmp_path: Path,
    db_url: str,
    *extra: str,
    env: dict[str, str] | None = None,
    command: Sequence[str] = (sys.executable, "-m", "app.cli"),
    cwd: Path = ROOT,
    first_login_done: bool = True,
    port: int | None = None,
) -> LiveServer:
    """Start `<command> serve <extra>` (by default this checkout's) and wait for its login URL and /healthz.

    With `first_login_done` the board gets its first admin (`TEST_ADMIN`) as soon as it is up, so
    the printed link logs in as that admin; without, the link is the first-admin link (it asks
    for the admin's name). `port`: a given one (a restart on the same address), else a free one."""
    port = port or free_port()
    run_env = {
        **os.environ,
        "CAMPAIGN_DATA_DIR": str(tmp_path / "data"),
        "CAMPAIGN_DATABASE_URL": db_url,
        "CAMPAIGN_PORT": str(port),
        "CAMPAIGN_SECRET_KEY": "live-" + uuid.uuid4().hex,
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    log_path = tmp_path / f"server-{port}.log"
    log = open(log_path, "w+")
    proc = subprocess.Popen(
        [*command, "serve", *extra], env=run_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    login_url = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"campaign serve exited with {proc.returncode}:\n{log.read()}")
        log.seek(0)
        for line in log.read().splitlines():
            if "/login?token=" in line:
                login_url = line[line.index("http") :].strip()
        if login_url:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    if first_login_done:
                        seed_admin(db_url)
                    return LiveServer(proc, url, login_url, run_env, log_path)
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("campaign serve did not come up within 60 s")


def stop_live_server(server: LiveServer) -> None:
    try:
        os.killpg(server.proc.pid, signal.SIGTERM)
        server.proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(server.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class ThreadServer:
    """uvicorn serving create_app(settings) in a thread of this process (tests can reach its AppState)."""

    def __init__(self, settings: Settings) -> None:
        from app.main import create_app

        self.port = free_port()
        settings.port = self.port
        self.app = create_app(settings)
        self.loop = None

        lifespan = self.app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def remember_loop(app):
            self.loop = asyncio.get_running_loop()
            async with lifespan(app):
                yield

        self.app.router.lifespan_context = remember_loop
        self.settings = settings
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            ws_max_size=16 * 1024 * 1024,
            lifespan="on",
            timeout_graceful_shutdown=2,
            ws_per_message_deflate=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    @property
    def engine(self):
        return app_state(self.app).engine

    def api_headers(self) -> dict[str, str]:
        with session_scope(self.engine) as session:
            return {"Authorization": f"Bearer {create_api_token(session, 'tests-' + uuid.uuid4().hex[:6])}"}

    def session_cookie(self) -> str:
        from app.domain.logins import create_login_token, redeem_login_token
        from tests.support.auth import ensure_admin

        with session_scope(self.engine) as session:
            session_id = redeem_login_token(session, create_login_token(session, 60, ensure_admin(session)), 3600)
        return app_state(self.app).session_signer.issue(session_id)
