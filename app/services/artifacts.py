"""A finished artifact upload: stored and recorded in one transaction, then the trial's open pages told (its
artifacts fragment re-fetches). The only code that records an artifact and publishes (the services rule)."""

from __future__ import annotations

import asyncio
import functools

from fastapi import FastAPI

from app.domain import artifacts as store_domain
from app.live import run_in_tx
from app.models import Artifact, Trial
from app.services import events


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
    row, removed = await run_in_tx(
        app.state.engine,
        functools.partial(store_domain.record, store=store, caps=caps, actor=actor),
        trial,
        name,
        size,
        sha,
    )
    events.publish(app, events.trial(trial.id), *{events.trial(r.trial_id) for r in removed})
    return row, removed
