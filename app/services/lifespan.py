"""What the server starts and stops with its lifespan (on the AppState that app/main.create_app made): the page
feed's signal handlers (app/services/events.py), the open streams' credential check (app/services/access.py), the lost-runner sweeper, the notifier (app/services/notifier.py), the change-point pass (app/services/changes.py), the search log indexer (app/services/search.py), the trace reader (app/services/artifacts.py), the embedded runner, gc.freeze, and tracing probes."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from sqlmodel import Session, col, select

from app.domain import runners as runner_domain
from app.domain.artifacts import store_for
from app.live import trace, trace_probes
from app.models import ACTIVE_TRIAL_STATES, Runner, Trial, utcnow
from app.protocol.messages import CloseCode
from app.services import artifacts, changes, events, notifier, periodic, search
from app.services.runners import sweep_once
from app.state import app_state
from runners.embedded import start_embedded, stop_embedded

log = logging.getLogger(__name__)


def _needs_sweep(session: Session) -> bool:
    return (
        session.exec(select(Runner.id).where(col(Runner.connected).is_(True))).first() is not None
        or session.exec(select(Trial.id).where(col(Trial.state).in_(ACTIVE_TRIAL_STATES))).first() is not None
    )


async def _sweeper(app: FastAPI, period_s: float = 1.0) -> None:
    """Every second: runners silent past runner_lost_after_s go offline and their trials are lost."""

    async def one_pass() -> None:
        if await app_state(app).db.read_in_tx(_needs_sweep):
            await sweep_once(app)

    await periodic.every(period_s, one_pass, log, "lost-runner sweep failed", wait_first=True)


def _all_offline(session: Session) -> None:
    # This process holds no runner socket yet; the lost-after clock restarts now for all of them.
    now = utcnow()
    for runner in session.exec(select(Runner).where(col(Runner.connected).is_(True))):
        runner.connected = False
        runner.last_seen_at = now
        session.add(runner)


# Young objects collected every GC_YOUNG allocations (Python's default: 700). A page allocates some hundred
# thousand short-lived objects (rows, dicts, template output), nearly all freed by their reference counts;
# at 700 the collector ran through them, and promoted them to older generations that it scanned again, for
# 20-37 ms of a 150-280 ms page (the replay report at full size, docs/performance.md). What waits longer
# for collection is cyclic garbage alone: a few MB at most.
GC_YOUNG = 50_000


def settle_heap() -> None:
    """Once the process is set up: modules, routes, the engine live as long as the process, so they are
    kept out of the collector's full passes (which otherwise stall the event loop, and the live logs, for
    tens of ms now and then); and young objects are collected less often (`GC_YOUNG`). The hub and every
    page worker (app/main.py) call it."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, middle, old)


async def start(app: FastAPI) -> None:
    state = app_state(app)
    await events.start(app)
    await state.db.run_in_tx(_all_offline)
    settle_heap()
    trace_queue: asyncio.Queue[int] = asyncio.Queue()
    state.trace_queue = trace_queue
    # Stopped in this order.
    state.tasks["runner_sweeper"] = asyncio.create_task(_sweeper(app))
    state.tasks["access_checker"] = asyncio.create_task(state.access_watch.run())
    state.tasks["notifier"] = asyncio.create_task(notifier.run(app))
    state.tasks["change_points"] = asyncio.create_task(changes.run(app))
    state.tasks["search_indexer"] = asyncio.create_task(search.run(app))
    if trace.on:
        state.tasks["trace_probes"] = asyncio.create_task(trace_probes())
    state.tasks["trace_reader"] = asyncio.create_task(
        artifacts.run_reader(app, trace_queue, store_for(state.settings.data_dir))
    )
    settings = state.settings
    if settings.embedded_runner:
        _, token = await state.db.run_in_tx(runner_domain.ensure_embedded_runner)
        # The runner retries its connection with backoff, so starting it before the server listens is fine.
        state.embedded_runner = start_embedded(settings.base_url(), token, settings.data_dir / "spool")


async def stop(app: FastAPI) -> None:
    state = app_state(app)
    events.stop(app)
    for task in state.tasks.values():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    state.tasks.clear()
    proc, state.embedded_runner = state.embedded_runner, None
    if proc is not None:
        # SIGTERM: it cancels its running trial and reports it while the server still listens.
        await asyncio.to_thread(stop_embedded, proc, state.settings.cancel_grace_s + 5)
    for link in list(state.hub.runners.values()):
        await link.close(CloseCode.GOING_AWAY, "server shutting down")


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await start(app)
    try:
        yield
    finally:
        await stop(app)
