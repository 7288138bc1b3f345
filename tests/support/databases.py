"""Test databases from templates: each backend is migrated once per session (per xdist worker), and each
test gets a copy (a file copy for SQLite, `CREATE DATABASE ... TEMPLATE` for PostgreSQL) instead of
running the migrations again.

Each template holds the board's first admin (`TEST_ADMIN`, as if someone had completed the first
login), so a login link or API token made without naming a user acts as that admin; tests of the
first login itself start from `empty_db_url` or a fresh `campaign serve`.

PostgreSQL: CAMPAIGN_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlmodel import select

from app.db import make_engine, migrate, session_scope
from app.models import Role, User

PG_ADMIN_URL = os.environ.get("CAMPAIGN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


TEST_ADMIN = "admin"


def seed_admin(url: str) -> None:
    """The board's first admin, as the first login would have made it (idempotent)."""
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            if session.get(User, 1) is None and not session.exec(select(User)).first():
                session.add(User(name=TEST_ADMIN, role=Role.admin))
    finally:
        engine.dispose()  # SQLite: the WAL is checkpointed; PostgreSQL: a template must have no connections


def pg_conninfo(url: str) -> str:
    """A SQLAlchemy psycopg URL as psycopg itself takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def _admin(admin_url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(pg_conninfo(admin_url), autocommit=True) as conn:
        conn.execute(sql)


def make_postgres_db(admin_url: str, template: str | None = None) -> tuple[str, Callable[[], None]]:
    """Create a database (empty, or a copy of `template`); return its URL and a function that drops it."""
    name = f"cb_test_{uuid.uuid4().hex[:12]}"
    _admin(admin_url, f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))

    def drop() -> None:
        _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"{admin_url.rsplit('/', 1)[0]}/{name}", drop


class SqliteTemplate:
    """A migrated SQLite file; `copy(dir)` gives a test its own database."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "template.db"
        migrate(f"sqlite:///{self.path}")  # its engine is disposed: the WAL is checkpointed into the file
        seed_admin(f"sqlite:///{self.path}")
        assert not self.path.with_name("template.db-wal").exists(), "the template's WAL was not checkpointed"

    def copy(self, directory: Path) -> str:
        path = directory / "campaign.db"
        shutil.copyfile(self.path, path)
        return f"sqlite:///{path}"


class PostgresTemplate:
    """A migrated PostgreSQL database; `copy()` gives a test its own database and the function that drops it."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        url, self._drop = make_postgres_db(admin_url)
        self.name = url.rsplit("/", 1)[1]
        migrate(url)  # its engine is disposed: a template must have no connections
        seed_admin(url)

    def copy(self) -> tuple[str, Callable[[], None]]:
        return make_postgres_db(self.admin_url, template=self.name)

    def drop(self) -> None:
        self._drop()
