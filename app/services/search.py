"""The hub's log indexer (app/domain/search.py `index_pass`): every POLL_S, the log chunks stored since the
last pass become searchable, in transactions of their own, never in the log pipeline's insert. A pass takes at
most INDEX_BATCH chunks or INDEX_BYTES of text (a short hold of SQLite's write lock): the chunks stored since the
last pass first, newest first, then the backlog oldest first; while it is behind (a pass left chunks waiting, by
either limit), it works at most DUTY of the time (the CPU and the lock it takes from the log pipeline stay
small). Fresh logs are searchable within about a second even behind a flood; the flood is indexed at DUTY.
PostgreSQL indexes on insert (GIN): nothing to run."""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI

from app.domain import search
from app.services import periodic
from app.state import app_state

log = logging.getLogger(__name__)

POLL_S = 1.0  # idle: look for new chunks this often
DUTY = 0.1  # behind: indexing takes at most this share of the time (a pass, then 9x its length of pause)
BACKLOG_S = 0.05  # ... and never less pause than this between passes


def next_pause(took: float, more: bool, poll_s: float = POLL_S) -> float:
    """Seconds until the next pass: poll_s when caught up; behind (`more`), DUTY of the time indexing."""
    return max(BACKLOG_S, took * (1 - DUTY) / DUTY) if more else poll_s


async def run(app: FastAPI, poll_s: float = POLL_S) -> None:
    db = app_state(app).db
    if db.engine.dialect.name == "postgresql":
        return
    loop = asyncio.get_running_loop()

    async def one_pass() -> float:
        started = loop.time()
        _, more = await db.run_in_tx(search.index_pass)
        return next_pause(loop.time() - started, more, poll_s)

    await periodic.every(poll_s, one_pass, log, "search indexing pass failed")
