"""A trial's artifacts on its page: the list (size, type, download; text and JSON viewable in the page,
always escaped), and the kernel table of its profiler trace. Fragments loaded by the trial page."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import Field
from sqlmodel import Session

from app.api.artifacts import store_of
from app.deps import OperatorDep, RowId
from app.domain import artifacts as store_domain
from app.domain.traces import StoredTrace, TraceSummary, kernel_diff, read_stored
from app.models import Artifact
from app.state import app_state
from app.web.render import render

router = APIRouter(include_in_schema=False)
PickedTrials = Annotated[list[Annotated[int, Field(ge=1, le=2**63 - 1)]] | None, Query(max_length=8)]
VIEW_BYTES = 256 * 1024  # shown in the page; the download has the rest


def _listing(session: Session, trial_id: int) -> dict[str, Any]:
    rows = store_domain.list_artifacts(session, trial_id)
    return {"trial_id": trial_id, "artifacts": rows, "text_types": store_domain.TEXT_TYPES}


@router.get("/trials/{trial_id}/artifacts")
async def artifacts_fragment(request: Request, trial_id: RowId, operator: OperatorDep) -> HTMLResponse:
    ctx = await app_state(request).db.read_in_tx(_listing, trial_id)
    trace = store_domain.first_trace(ctx["artifacts"])
    summary: TraceSummary | None = None
    stored: StoredTrace | None = None
    error = ""
    if trace is not None:
        try:
            summary = await asyncio.to_thread(read_stored, store_of(request).path(trace.sha256), trace.sha256)
            stored = StoredTrace(trace.id or 0, trial_id, None, trace.name, summary.figures())
        except store_domain.DomainError as exc:
            error = exc.message
    return render(
        request,
        "_partials/artifacts.html",
        {**ctx, "trace": trace, "summary": summary, "stored": stored, "trace_error": error},
    )


@router.get("/trials/{trial_id}/artifact-view")
async def artifact_view(
    request: Request, trial_id: RowId, operator: OperatorDep, name: str = Query(max_length=255)
) -> HTMLResponse:
    row = await app_state(request).db.read_in_tx(store_domain.get_artifact, trial_id, name)
    if row.content_type not in store_domain.TEXT_TYPES:
        raise store_domain.Invalid(f"{name!r} is {row.content_type}: download it", field="name")
    with store_of(request).path(row.sha256).open("rb") as f:
        head = f.read(VIEW_BYTES)
    return render(
        request,
        "_partials/artifact_view.html",
        {"artifact": row, "text": head.decode("utf-8", errors="replace"), "cut": row.size > VIEW_BYTES},
    )


def _traces_of(session: Session, trial_ids: list[int]) -> list[tuple[int, Artifact]]:
    """(trial id, its trace artifact) for each of these trials that has one, in the order given."""
    return [(t, a) for t in trial_ids if (a := store_domain.trace_of(session, t)) is not None]


@router.get("/campaigns/{slug}/compare/kernels")
async def kernel_diff_fragment(
    request: Request, slug: str, operator: OperatorDep, trial: PickedTrials = None
) -> HTMLResponse:
    """The compare page's kernel diff: the first two picked trials that left a profiler trace, kernel by kernel
    per step (what got faster or slower, what appeared, what vanished)."""
    traced = await app_state(request).db.read_in_tx(_traces_of, list(dict.fromkeys(trial or [])))
    diff: list[dict[str, Any]] = []
    pair = traced[:2]
    if len(pair) == 2:
        store = store_of(request)
        read = [await asyncio.to_thread(read_stored, store.path(t.sha256), t.sha256) for _, t in pair]
        diff = kernel_diff(read[0], read[1])
    return render(
        request, "_partials/kernel_diff.html", {"pair": pair, "diff": diff[:40], "more": max(0, len(diff) - 40)}
    )
