"""The hub's change-point pass (app/domain/changes.py): every POLL_S, the series that got a new trial are
recomputed off the request path, and the approach and campaign pages that show them are told (page feed)."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from app.domain import changes
from app.services import events, periodic
from app.state import app_state

log = logging.getLogger(__name__)

POLL_S = 5.0


async def pass_once(app: FastAPI) -> int:
    """One pass: recompute the dirty series, publish their approach and campaign topics; returns how many
    (approach, runner) pairs were recomputed. Whether any series is dirty is read first: the write transaction
    (SQLite's write lock) is taken only when there is work."""
    if not await app_state(app).db.read_in_tx(changes.dirty, 1):
        return 0
    touched = await app_state(app).db.run_in_tx(changes.pass_once)
    topics = {events.approach(a) for _, a in touched} | {events.campaign(c) for c, _ in touched}
    if topics:
        events.publish(app, *sorted(topics))
    return len(touched)


async def run(app: FastAPI, poll_s: float = POLL_S) -> None:
    async def one_pass() -> None:
        await pass_once(app)

    await periodic.every(poll_s, one_pass, log, "change-point pass failed")
