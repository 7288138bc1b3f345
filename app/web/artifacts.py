"""A trial's artifacts on its page: the list (size, type, download; text and JSON viewable in the page,
always escaped), and the kernel table of its profiler trace. Fragments loaded by the trial page."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session

from app.api.artifacts import store_of
from app.deps import OperatorDep, RowId
from app.domain import artifacts as store_domain
from app.domain.traces import TraceSummary, read_stored
from app.live import run_in_tx
from app.web.render import render

router = APIRouter(include_in_schema=False)
VIEW_BYTES = 256 * 1024  # shown in the page; the download has the rest


def _listing(session: Session, trial_id: int) -> dict[str, Any]:
    rows = store_domain.list_artifacts(session, trial_id)
    return {"trial_id": trial_id, "artifacts": rows, "text_types": store_domain.TEXT_TYPES}


@router.get("/trials/{trial_id}/artifacts")
async def artifacts_fragment(request: Request, trial_id: RowId, operator: OperatorDep) -> HTMLResponse:
    ctx = await run_in_tx(request.app.state.engine, _listing, trial_id, write=False)
    trace = next((a for a in ctx["artifacts"] if a.removed_at is None and store_domain.is_trace_name(a.name)), None)
    summary: TraceSummary | None = None
    error = ""
    if trace is not None:
        try:
            summary = await asyncio.to_thread(read_stored, store_of(request).path(trace.sha256), trace.sha256)
        except store_domain.DomainError as exc:
            error = exc.message
    return render(
        request, "_partials/artifacts.html", {**ctx, "trace": trace, "summary": summary, "trace_error": error}
    )


@router.get("/trials/{trial_id}/artifact-view")
async def artifact_view(
    request: Request, trial_id: RowId, operator: OperatorDep, name: str = Query(max_length=255)
) -> HTMLResponse:
    row = await run_in_tx(request.app.state.engine, store_domain.get_artifact, trial_id, name, write=False)
    if row.content_type not in store_domain.TEXT_TYPES:
        raise store_domain.Invalid(f"{name!r} is {row.content_type}: download it", field="name")
    with store_of(request).path(row.sha256).open("rb") as f:
        head = f.read(VIEW_BYTES)
    return render(
        request,
        "_partials/artifact_view.html",
        {"artifact": row, "text": head.decode("utf-8", errors="replace"), "cut": row.size > VIEW_BYTES},
    )
