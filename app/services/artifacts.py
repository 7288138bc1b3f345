"""A finished artifact upload: stored and recorded in one transaction, then the trial's open pages told (its
artifacts fragment re-fetches); a profiler trace is then read and its figures kept (the campaign's pages told:
the model reads N_ar and t_ar from them). The only code that records an artifact and publishes (the services
rule)."""

from __future__ import annotations

import asyncio
import functools
import logging

from fastapi import FastAPI

from app.domain import artifacts as store_domain
from app.domain import traces
from app.models import Artifact, Trial
from app.services import events
from app.state import app_state

log = logging.getLogger(__name__)


async def complete_upload(
    app: FastAPI,
    trial: Trial,
    name: str,
    size: int,
    sha256: str,
    *,
    store: store_domain.ArtifactStore,
    caps: store_domain.Caps,
    actor: str,
) -> tuple[Artifact, list[Artifact]]:
    """Check and store the upload (hashing off the event loop, no transaction open), record it (retention
    applied), then publish the trial's topic (and the trials whose artifacts retention removed)."""
    size, sha = await asyncio.to_thread(store.finish_checked, trial.id or 0, name, size, sha256)
    row, removed = await app_state(app).db.run_in_tx(
        functools.partial(store_domain.record, store=store, caps=caps, actor=actor),
        trial,
        name,
        size,
        sha,
    )
    events.publish(app, events.trial(trial.id), *{events.trial(r.trial_id) for r in removed})
    if store_domain.needs_trace(row):
        queue = app_state(app).trace_queue
        if queue is None:  # an app without its lifespan's reader: read it here
            row = await read_trace(app, row, store)
        else:
            queue.put_nowait(row.id or 0)  # read by `run_reader`, after this response (a 200 MB trace: ~30 s)
    return row, removed


async def run_reader(app: FastAPI, queue: asyncio.Queue[int], store: store_domain.ArtifactStore) -> None:
    """The lifespan's trace reader: first every stored trace not read yet (one uploaded just before the server
    stopped), then each new one as its upload completes (on `queue`, the AppState's trace_queue), one at a time
    (a trace's read is CPU-bound)."""
    for artifact_id in await app_state(app).db.read_in_tx(store_domain.unread_traces):
        queue.put_nowait(artifact_id)
    while True:
        artifact_id = await queue.get()
        row = await app_state(app).db.read_in_tx(store_domain.artifact_by_id, artifact_id)
        if row is not None and store_domain.needs_trace(row):
            try:
                await read_trace(app, row, store)
            except Exception:  # a file gone from the store, a database hiccup: said, and the next one is read
                log.exception("reading the trace of artifact #%s failed", artifact_id)


async def read_trace(app: FastAPI, row: Artifact, store: store_domain.ArtifactStore) -> Artifact:
    """Read a stored trace (off the event loop, no transaction open) and keep its figures on the row (a file
    that is not a trace keeps the reason, said on the trial page); the campaign's pages then show the model
    inputs it gives. Returns the row as stored."""
    try:
        summary = await asyncio.to_thread(traces.read_stored, store.path(row.sha256), row.sha256)
        figures = summary.figures()
    except traces.TraceError as exc:
        figures = {"error": exc.message}
    stored = await app_state(app).db.run_in_tx(store_domain.set_trace, row.id or 0, row.sha256, figures)
    if stored is None:
        return row
    events.publish(app, events.trial(row.trial_id), events.campaign(row.campaign_id))
    return stored
