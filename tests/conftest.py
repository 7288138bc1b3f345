"""Shared fixtures: one test suite over every storage backend (SQLite file and PostgreSQL),
apps on a fresh database, a real uvicorn server on a free port, and Chromium through Playwright.

PostgreSQL: CAMPAIGN_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test).
Each test gets its own database, created and dropped around it. When the server is unreachable
the PostgreSQL cases fail (CI starts it); set CAMPAIGN_TEST_SKIP_POSTGRES=1 to skip them locally.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

PG_ADMIN_URL = os.environ.get("CAMPAIGN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CAMPAIGN_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _pg_conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="session")
def postgres_admin() -> str:
    if os.environ.get("CAMPAIGN_TEST_SKIP_POSTGRES"):
        pytest.skip("CAMPAIGN_TEST_SKIP_POSTGRES is set")
    import psycopg

    try:
        psycopg.connect(_pg_conninfo(PG_ADMIN_URL), connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}. .ci/run starts it; "
                    "set CAMPAIGN_TEST_SKIP_POSTGRES=1 to skip PostgreSQL cases locally.")
    return PG_ADMIN_URL


def make_postgres_db(admin_url: str) -> tuple[str, callable]:
    """Create an empty database; return its URL and a function that drops it."""
    import psycopg

    name = f"cb_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_conninfo(admin_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin_url.rsplit("/", 1)[0]

    def drop() -> None:
        with psycopg.connect(_pg_conninfo(admin_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"{base}/{name}", drop


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> Iterator[str]:
    """An empty database URL, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'campaign.db'}"
        return
    url, drop = make_postgres_db(request.getfixturevalue("postgres_admin"))
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def settings(tmp_path, db_url):
    from app.config import Settings

    return Settings(data_dir=tmp_path / "data", database_url=db_url, embedded_runner=False,
                    secret_key="test-secret-" + uuid.uuid4().hex)


@pytest.fixture
def app(settings):
    from app.main import create_app

    return create_app(settings)


@pytest.fixture
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


def login_token(app) -> str:
    from app.db import session_scope
    from app.security import create_login_token

    with session_scope(app.state.engine) as session:
        return create_login_token(session, 3600)


def api_token(app, name: str = "tests") -> str:
    from app.db import session_scope
    from app.security import create_api_token

    with session_scope(app.state.engine) as session:
        return create_api_token(session, name)


@pytest.fixture
def operator_client(client, app):
    """A TestClient logged in as an operator, sending the session's CSRF token on writes."""
    from app.security import CSRF_HEADER, SESSION_COOKIE

    r = client.get(f"/login?token={login_token(app)}", follow_redirects=False)
    assert r.status_code == 303, r.text
    operator = app.state.session_signer.read(client.cookies.get(SESSION_COOKIE))
    client.headers[CSRF_HEADER] = operator.csrf_token
    return client


@pytest.fixture
def api_headers(app) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_token(app)}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """`campaign serve` in its own process on a free port, with its printed login URL."""

    def __init__(self, proc: subprocess.Popen, url: str, login_url: str, env: dict[str, str]) -> None:
        self.proc, self.url, self.login_url, self.env = proc, url, login_url, env

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", *args], env=self.env, cwd=ROOT,
                              capture_output=True, text=True, check=check, timeout=120)


def start_live_server(tmp_path: Path, db_url: str, *extra: str, env: dict[str, str] | None = None) -> LiveServer:
    port = free_port()
    run_env = {**os.environ, "CAMPAIGN_DATA_DIR": str(tmp_path / "data"), "CAMPAIGN_DATABASE_URL": db_url,
               "CAMPAIGN_PORT": str(port), "CAMPAIGN_SECRET_KEY": "live-" + uuid.uuid4().hex,
               "PYTHONUNBUFFERED": "1", **(env or {})}
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", *extra], env=run_env, cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    login_url = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"campaign serve exited with {proc.returncode}:\n{log.read()}")
        log.seek(0)
        text = log.read()
        for line in text.splitlines():
            if "/login?token=" in line:
                login_url = line[line.index("http"):].strip()
        if login_url:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    return LiveServer(proc, url, login_url, run_env)
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("campaign serve did not come up within 60 s")


def stop_live_server(server: LiveServer) -> None:
    import signal

    try:
        os.killpg(server.proc.pid, signal.SIGTERM)
        server.proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(server.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def live_server(tmp_path) -> Iterator[LiveServer]:
    """A real `campaign serve --demo --no-runner` on SQLite, in its own process."""
    server = start_live_server(tmp_path, f"sqlite:///{tmp_path / 'live.db'}", "--demo", "--no-runner")
    try:
        yield server
    finally:
        stop_live_server(server)


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium through Playwright (Playwright cannot download its own browser here).

    Module scope: Playwright's sync API keeps an event loop running in this thread while it is
    started, so it must stop before tests that call asyncio.run() themselves."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: .ci/run installs Debian's chromium package")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()
