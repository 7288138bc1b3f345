"""The hub's log indexer (app/domain/search.py `index_logs`): every POLL_S, the log chunks stored since the
last pass become searchable, in transactions of their own, never in the log pipeline's insert. A pass takes at
most INDEX_BATCH chunks or INDEX_BYTES of text, so a log flood is indexed behind it, a batch per poll, while
ordinary logs are searchable within about a second. PostgreSQL indexes on insert (GIN): nothing to run."""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI

from app.domain import search
from app.state import app_state

log = logging.getLogger(__name__)

POLL_S = 1.0


async def run(app: FastAPI, poll_s: float = POLL_S) -> None:
    db = app_state(app).db
    if db.engine.dialect.name == "postgresql":
        return
    while True:
        try:
            await db.run_in_tx(search.index_logs)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("search indexing pass failed")
        await asyncio.sleep(poll_s)
