"""Engine and sessions. SQLite gets WAL, foreign keys and a busy timeout; the same code runs on PostgreSQL.

Transactions: domain functions flush but never commit; the caller (a route through
`session_scope`/the SessionDep dependency, or the CLI) commits once per request.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from app.config import resource_dir


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            # Let SQLAlchemy's BEGIN (below) decide when a transaction starts.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # noqa: ANN001
            # A write transaction takes the write lock up front (BEGIN IMMEDIATE): two writers never
            # both read-then-write stale rows, nor fail upgrading a read lock under WAL. This is what
            # serializes "run next candidate" on SQLite the way SELECT ... FOR UPDATE does on PostgreSQL.
            mode = "IMMEDIATE" if conn.get_execution_options().get("write") else "DEFERRED"
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def alembic_config(url: str) -> Config:
    # No alembic.ini at run time (the wheel has none); the checkout's alembic.ini serves the `alembic` CLI.
    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("alembic")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str) -> None:
    """Bring the database to the newest schema (the server does this on start)."""
    command.upgrade(alembic_config(url), "head")


def open_session(engine: Engine, *, write: bool) -> Session:
    """A session; `write=True` marks a transaction that will write (BEGIN IMMEDIATE on SQLite)."""
    bind = engine.execution_options(write=True) if write else engine
    return Session(bind, expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine, *, write: bool = True) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with open_session(engine, write=write) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
