"""The runners page (`/runners`): the table of runners, adding one (its token shown once) and revoking one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session

from app.deps import AdminDep, OperatorDep, RowId, take_feed_mark
from app.domain import runners as runner_domain
from app.services.runners import create as create_runner
from app.services.runners import revoke
from app.state import app_state
from app.web.render import render

router = APIRouter(include_in_schema=False)


def _runners(session: Session) -> dict[str, Any]:
    return {"runners": runner_domain.list_runners(session), "summary": runner_domain.summary}


@router.get("/runners")
async def runners_page(request: Request, operator: OperatorDep) -> HTMLResponse:
    take_feed_mark(request)  # before the read
    ctx = await app_state(request).db.read_in_tx(_runners)
    block = "runners" if request.headers.get("hx-request") else None
    return render(request, "runners.html", {**ctx, "created": None}, block=block)


@router.get("/runners/table")
async def runners_table(request: Request, operator: OperatorDep) -> HTMLResponse:
    """The runners table alone: re-fetched on the page feed's "runners" notices."""
    ctx = await app_state(request).db.read_in_tx(_runners)
    return render(request, "runners.html", {**ctx, "created": None}, block="runner_table")


@router.post("/runners")
async def runners_create(request: Request, operator: AdminDep, name: str = Form("")) -> HTMLResponse:
    # An error (duplicate or empty name) goes through app/errors.py: shown by the name field, input kept.
    runner, token = await create_runner(request.app, name)
    ctx = await app_state(request).db.read_in_tx(_runners)
    return render(request, "runners.html", {**ctx, "created": {"name": runner.name, "token": token}}, block="runners")


@router.post("/runners/{runner_id}/revoke")
async def runners_revoke(request: Request, runner_id: RowId, operator: AdminDep) -> HTMLResponse:
    await revoke(request.app, runner_id)
    ctx = await app_state(request).db.read_in_tx(_runners)
    return render(request, "runners.html", {**ctx, "created": None}, block="runners")
