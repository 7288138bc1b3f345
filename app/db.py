"""Engine and sessions. SQLite gets WAL, foreign keys and a busy timeout; the same code runs on PostgreSQL.

Transactions: domain functions flush but never commit; the caller (a sync route through the
SessionDep dependency, an async route, socket or service through `Database.run_in_tx`/`read_in_tx`,
or the CLI through `session_scope`) commits once per unit of work.

Every transaction says up front whether it may write (`write=True`): on SQLite that is
`BEGIN IMMEDIATE`, so a writer never upgrades a read lock mid-transaction (the source of
"database is locked" under WAL). A session opened with `write=False` is read-only: any
INSERT/UPDATE/DELETE in it raises `ReadOnlyTransaction` at once, on every backend, so a
forgotten `write=True` fails loudly in tests instead of intermittently in production.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import orjson
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import ORMExecuteState
from sqlmodel import Session, create_engine

from alembic import command
from app.config import resource_dir

T = TypeVar("T")
P = ParamSpec("P")

# A run of 19 digits may be an integer past 64 bits, which orjson reads as a float where json keeps it exact:
# digits become "0" (bytes.translate, a fraction of a regex's cost) and the run is looked for.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def loads_json(text: str | bytes) -> Any:
    """`json.loads(text)`, read by orjson where that gives the same value (the comparisons' 160,000 samples:
    14 ms instead of 36), by json itself where orjson refuses the text (NaN, Infinity, numbers out of range,
    lone surrogates: json's own answer or error) or would read it otherwise (integers past 64 bits). The
    engine's JSON columns are read with it on both databases; they are still written by json.dumps."""
    raw = text.encode(errors="surrogatepass") if isinstance(text, str) else text
    if _LONG_DIGITS not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, json_deserializer=loads_json, connect_args={"check_same_thread": False, "timeout": 30}
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            # Let SQLAlchemy's BEGIN (below) decide when a transaction starts.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            # A write transaction takes the write lock up front (BEGIN IMMEDIATE): two writers never
            # both read-then-write stale rows, nor fail upgrading a read lock under WAL. This is what
            # serializes "run next candidate" on SQLite the way SELECT ... FOR NO KEY UPDATE does on PostgreSQL.
            mode = "IMMEDIATE" if conn.get_execution_options().get("write") else "DEFERRED"
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine
    engine = create_engine(url, json_deserializer=loads_json, pool_pre_ping=True, pool_size=10, max_overflow=20)

    @event.listens_for(engine, "connect")
    def _postgres_custom_plans(dbapi_conn, _record):
        # psycopg prepares a statement run five times; PostgreSQL then plans it once for any parameters (a
        # generic plan) when that plan looks as cheap. For the campaign's metric lookups it is not: the
        # charts page's one-seek-per-name EXISTS took 330-420 ms instead of 0.2 after about ten visits
        # (docs/performance.md). Every execution is planned for its parameters; statements stay prepared.
        cur = dbapi_conn.cursor()
        cur.execute("SET plan_cache_mode = force_custom_plan")
        cur.close()
        dbapi_conn.commit()

    return engine


def alembic_config(url: str) -> Config:
    # No alembic.ini at run time (the wheel has none); the checkout's alembic.ini serves the `alembic` CLI.
    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("alembic")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str) -> None:
    """Bring the database to the newest schema (the server does this on start)."""
    command.upgrade(alembic_config(url), "head")


class ReadOnlyTransaction(RuntimeError):
    """A write was attempted in a session opened with write=False (a programming error)."""


class ReadSession(Session):
    """A session for a transaction that never writes: writes raise instead of taking a lock late."""


@event.listens_for(ReadSession, "before_flush")
def _refuse_flush(session: Session, _ctx, _instances) -> None:
    if session.new or session.deleted or any(session.is_modified(obj) for obj in session.dirty):
        raise ReadOnlyTransaction("write in a read-only transaction: open it with write=True")


@event.listens_for(ReadSession, "do_orm_execute")
def _refuse_dml(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        raise ReadOnlyTransaction("write in a read-only transaction: open it with write=True")


def open_session(engine: Engine, *, write: bool, snapshot: bool = False) -> Session:
    """The one session factory. `write=True`: a transaction that may write, which takes the write
    lock up front (BEGIN IMMEDIATE on SQLite); `write=False`: a read-only one (writes raise).
    `snapshot=True` (read-only): every statement reads the same snapshot, which a read in several
    statements needs (a streamed export): REPEATABLE READ on PostgreSQL, where each statement would
    otherwise see what committed meanwhile; a SQLite transaction already reads one snapshot."""
    if write:
        return Session(engine.execution_options(write=True), expire_on_commit=False)
    if snapshot and engine.dialect.name == "postgresql":
        return ReadSession(engine.execution_options(isolation_level="REPEATABLE READ"), expire_on_commit=False)
    return ReadSession(engine, expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine, *, write: bool = True, snapshot: bool = False) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with open_session(engine, write=write, snapshot=snapshot) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def stream_in_session(engine: Engine, produce: Callable[..., Iterator[T]], *args: Any) -> Iterator[T]:
    """`produce(session, *args)`'s pieces, read in one snapshot by a session of their own that lives as long
    as the iteration: a streamed response's body, which Starlette iterates on worker threads after the
    request's session has closed."""
    with session_scope(engine, write=False, snapshot=True) as session:
        yield from produce(session, *args)


class Database:
    """The board's engine and what every one of its sessions carries (`info`: the page feed and the
    access watch, read after commit by app/services/events.py and app/services/access.py), and the one
    way async code (routes, sockets, services) runs a transaction: on a worker thread, so the event loop
    never waits on the database lock."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.info: dict[str, object] = {}

    @contextmanager
    def scope(self, *, write: bool = True, snapshot: bool = False) -> Iterator[Session]:
        """`session_scope` on this engine, its session carrying `info`."""
        with session_scope(self.engine, write=write, snapshot=snapshot) as session:
            session.info.update(self.info)
            yield session

    async def run_in_tx(self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(session, *args, **kwargs)` in one write transaction on a worker thread, committed on success
        (what it registered with `events.after_commit` is published then)."""

        def work() -> T:
            with self.scope(write=True) as session:
                return fn(session, *args, **kwargs)

        return await asyncio.to_thread(work)

    async def read_in_tx(self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(session, *args, **kwargs)` in one read-only transaction on a worker thread (a write raises)."""

        def work() -> T:
            with self.scope(write=False) as session:
                return fn(session, *args, **kwargs)

        return await asyncio.to_thread(work)
