"""Shared fixtures: one test suite over every storage backend (SQLite file and PostgreSQL),
apps on a fresh database, a real `campaign serve` on a free port, and Chromium through Playwright.
The helpers behind them live in tests/support/.

Databases: each backend is migrated once per session (per xdist worker) into a template, and every
test gets its own copy (tests/support/databases.py). A test runs on SQLite; a test (or module, through
`pytestmark`) marked `both_databases` runs on PostgreSQL too, and CAMPAIGN_TEST_ALL_DATABASES=1 runs every
test on both (docs/testing.md says which tests carry the mark). When PostgreSQL is unreachable its cases fail
(CI starts it); set CAMPAIGN_TEST_SKIP_POSTGRES=1 to skip them locally.

Markers: `serial` tests run alone, after the parallel pass (scripts/run-tests).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.auth import api_token, log_in
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.cli import run  # noqa: F401  (the CLI tests' fixture: `campaign` in a subprocess)
from tests.support.databases import PG_ADMIN_URL, PostgresTemplate, SqliteTemplate, make_postgres_db, pg_conninfo
from tests.support.servers import LiveServer, start_live_server, stop_live_server

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
BOTH_DATABASES = "both_databases"  # the marker of tests whose behaviour differs between the databases
ALL_DATABASES_ENV = "CAMPAIGN_TEST_ALL_DATABASES"


def all_databases() -> bool:
    """CAMPAIGN_TEST_ALL_DATABASES: "1" runs every test on both databases, unset, "" or "0" only the marked ones."""
    value = os.environ.get(ALL_DATABASES_ENV, "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(f"{ALL_DATABASES_ENV} must be 1 (every test on both databases) or 0, not {value!r}")
    return value == "1"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The backend of every test that takes a database (through `db_backend`): SQLite, and PostgreSQL too for a
    test marked `both_databases` or with CAMPAIGN_TEST_ALL_DATABASES=1. The ids stay `[sqlite]`, `[postgres]`."""
    if "db_backend" in metafunc.fixturenames:
        both = all_databases() or metafunc.definition.get_closest_marker(BOTH_DATABASES) is not None
        metafunc.parametrize("db_backend", BACKENDS if both else BACKENDS[:1], indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Building and installing the wheel is the longest test by far: start it first, so the other
    xdist workers run the rest meanwhile instead of waiting for it at the end."""
    items.sort(key=lambda item: item.path.name != "test_wheel.py")  # stable: the rest keep their order


@pytest.fixture(scope="session")
def postgres_admin() -> str:
    if os.environ.get("CAMPAIGN_TEST_SKIP_POSTGRES"):
        pytest.skip("CAMPAIGN_TEST_SKIP_POSTGRES is set")
    import psycopg

    try:
        psycopg.connect(pg_conninfo(PG_ADMIN_URL), connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}. .ci/run starts it; "
            "set CAMPAIGN_TEST_SKIP_POSTGRES=1 to skip PostgreSQL cases locally."
        )
    return PG_ADMIN_URL


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> SqliteTemplate:
    return SqliteTemplate(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(scope="session")
def postgres_template(postgres_admin) -> Iterator[PostgresTemplate]:
    template = PostgresTemplate(postgres_admin)
    try:
        yield template
    finally:
        template.drop()


@pytest.fixture
def db_backend(request) -> str:
    """ "sqlite" or "postgres": the database this test case runs on (pytest_generate_tests parametrizes it)."""
    return request.param


@pytest.fixture
def db_url(request, tmp_path, db_backend) -> Iterator[str]:
    """A database at the newest schema, the test's own, once per backend the test runs on."""
    if db_backend == "sqlite":
        yield request.getfixturevalue("sqlite_template").copy(tmp_path)
        return
    url, drop = request.getfixturevalue("postgres_template").copy()
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def empty_db_url(request, tmp_path, db_backend) -> Iterator[str]:
    """An empty database (no tables), once per backend the test runs on: for the migrations themselves."""
    if db_backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    url, drop = make_postgres_db(request.getfixturevalue("postgres_admin"))
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def engine(db_url):
    """An engine on the test's database (migrated already: `db_url` is a copy of the migrated template)."""
    from app.db import make_engine

    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def settings(tmp_path, db_url):
    from app.config import Settings

    return Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        embedded_runner=False,
        secret_key="test-secret-" + uuid.uuid4().hex,
    )


@pytest.fixture
def app(settings):
    from app.main import create_app

    return create_app(settings)


@pytest.fixture
def srv(tmp_path, db_url):
    """A real server (uvicorn on a thread, its lifespan and sweeper running) on the test's database."""
    from tests.support.servers import ThreadServer
    from tests.support.trials import make_settings

    server = ThreadServer(make_settings(tmp_path, db_url)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(app, monkeypatch):
    """The app with its lifespan, in process. Its lost-runner sweeper is off: within a second it marks offline
    every runner the database says is connected but whose socket this hub does not hold, which is what the
    runners these tests seed straight into the database are, so a slow test lost that race (a Settle refused
    with "no runner is connected"). The sweeper's own tests run a real server with real runner sockets
    (tests/trials, tests/runners)."""
    from fastapi.testclient import TestClient

    from app.services import lifespan

    monkeypatch.setattr(lifespan, "_needs_sweep", lambda session: False)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture
def operator_client(client, app):
    """A TestClient logged in as an operator, sending the session's CSRF token on writes."""
    return log_in(client, app)


@pytest.fixture
def api_headers(app) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_token(app)}"}


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
