"""Runners, JSON: list, read one, create (the token is shown once) and revoke. The runner's own websocket is
app/api/runner_socket.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from app.deps import AdminDep, OperatorDep, RowId
from app.domain import runners as runner_domain
from app.schemas import RunnerPublic
from app.services.runners import create, revoke
from app.state import app_state

router = APIRouter(tags=["runners"])


class RunnerCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # At least one visible character (neither whitespace nor a control character), in the schema too.
    name: str = Field(
        min_length=1,
        max_length=120,
        pattern=r"[^\s\x00-\x1f\x7f-\x9f]",
        description="The node's name, e.g. its hostname.",
    )


class RunnerCreated(BaseModel):
    id: int
    name: str
    token: str = Field(description="Shown once: give it to `campaign runner --token ...`.")


@router.get("/api/runners", response_model=list[RunnerPublic])
async def list_runners(request: Request, operator: OperatorDep) -> list[dict[str, Any]]:
    """Every runner: online, busy (with its trial), offline or revoked, and its stack in one line."""
    views = await app_state(request).db.read_in_tx(runner_domain.list_runners)
    return [v.as_dict() for v in views]


@router.get("/api/runners/{runner_id}", response_model=RunnerPublic)
async def get_runner(request: Request, runner_id: RowId, operator: OperatorDep) -> dict[str, Any]:
    view = await app_state(request).db.read_in_tx(runner_domain.runner_view, runner_id)
    return view.as_dict()


@router.post("/api/runners", status_code=201)
async def create_runner(request: Request, body: RunnerCreate, operator: AdminDep) -> RunnerCreated:
    runner, token = await create(request.app, body.name)
    return RunnerCreated(id=runner.id, name=runner.name, token=token)


@router.post("/api/runners/{runner_id}/revoke")
async def revoke_runner(request: Request, runner_id: RowId, operator: AdminDep) -> dict[str, Any]:
    await revoke(request.app, runner_id)
    return {"id": runner_id, "revoked": True}
