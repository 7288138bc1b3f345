"""Trial artifacts, JSON and files: the resumable upload (the trial's runner with its token, or an operator),
the list, downloads, and the kernel table of a trial's profiler trace. The rules are app/domain/artifacts.py
and app/domain/traces.py.

Uploads stream to disk with no database transaction open (a 1 GB artifact holds no lock); the trial and the
uploader are checked in a read transaction first, the row is written in a short one at the end.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session, select

from app.api.users import Utc
from app.deps import RowId, bearer_token, require_operator, require_user
from app.domain import artifacts as store_domain
from app.domain import runners as runner_domain
from app.domain import traces
from app.domain.errors import NotFound, or_not_found
from app.models import Artifact, Runner, Trial
from app.schemas import RowPublic
from app.services.artifacts import complete_upload
from app.state import app_state

router = APIRouter(prefix="/api", tags=["artifacts"])
# The upload routes take the trial's runner token as well as a person's credential (AuthenticateFirst lets a
# bearer token through on these paths; the route checks it).
UPLOAD_PATH = re.compile(r"^/api/trials/[0-9]+/(uploads/|artifacts$)")
MAX_CHUNK = 8 << 20


class ArtifactPublic(RowPublic):
    name: str
    size: int
    sha256: str
    content_type: str
    uploaded_by: str
    created_at: Utc
    removed: str | None = Field(None, description="Why it is gone (the retention limit), or null.")

    @classmethod
    def of(cls, row: Artifact) -> ArtifactPublic:
        return cls.of_row(row, removed=row.removed_reason if row.removed_at else None)


class UploadStatus(BaseModel):
    name: str
    offset: int = Field(description="Bytes the board has of this upload: send the next ones from here.")
    limit: int = Field(description="The most bytes this file may have (the file and trial caps).")
    complete: bool = Field(description="An artifact of this name is stored (a new upload replaces it).")


class UploadComplete(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")


class KernelRowPublic(BaseModel):
    name: str
    kind: str = Field(description="compute, or the collective (NCCL allreduce, symm-mem one-shot, ...).")
    calls: int
    total_us: float
    mean_us: float
    share: float = Field(description="Of the counted kernels' total time.")


class KernelTable(BaseModel):
    artifact: str
    trace_id: int = Field(description="The artifact's id: the model's inputs from it say \"from trace #id\".")
    device: bool = Field(description="Device kernels (else a CPU trace's host spans).")
    step_name: str | None
    steps: int
    allreduces_per_step: float | None = Field(description="N_ar, from the trace.")
    allreduce_us: float | None = Field(description="The in-situ allreduce time t_ar, from the trace.")
    kernels: list[KernelRowPublic]


def _caps(request: Request) -> store_domain.Caps:
    s = app_state(request).settings
    return store_domain.Caps(s.artifact_max_file_bytes, s.artifact_max_trial_bytes, s.artifact_retention_bytes)


def store_of(request: Request) -> store_domain.LocalStore:
    return store_domain.store_for(app_state(request).settings.data_dir)


def _runner_of(session: Session, token: str | None) -> Runner | None:
    return runner_domain.authenticate(session, token) if token else None


def _trial(session: Session, trial_id: int) -> Trial:
    return or_not_found(session.get(Trial, trial_id), f"no trial #{trial_id}", field="trial_id")


async def _who(request: Request, trial_id: RowId) -> tuple[Trial, str]:
    """The trial and who uploads to it: its own runner (by its token), or a person who may change things (the
    usual checks first: role, CSRF and Origin for a browser; then the trial)."""
    db = app_state(request).db
    runner = await db.read_in_tx(_runner_of, bearer_token(request))
    if runner is None:
        operator = await require_operator(request, await require_user(request))
        return await db.read_in_tx(_trial, trial_id), operator.name
    trial = await db.read_in_tx(_trial, trial_id)
    if runner.id != trial.runner_id:
        raise store_domain.Forbidden(f"trial #{trial_id} is not runner {runner.name}'s", field="trial_id")
    return trial, f"runner {runner.name}"


# A dependency, so the uploader is known before the request's own parameters are checked (a viewer gets 403).
Uploader = Annotated[tuple[Trial, str], Depends(_who)]


@router.get("/trials/{trial_id}/uploads/{name:path}", response_model=UploadStatus)
async def upload_status(request: Request, trial_id: RowId, name: str, upload: Uploader) -> UploadStatus:
    trial, _ = upload
    name = store_domain.check_name(name)
    store = store_of(request)

    def read(session: Session) -> UploadStatus:
        limit = store_domain.upload_limit(session, trial, name, _caps(request), store)
        stored = session.exec(select(Artifact.id).where(Artifact.trial_id == trial.id, Artifact.name == name)).first()
        return UploadStatus(name=name, offset=store.part_size(trial_id, name), limit=limit, complete=stored is not None)

    return await app_state(request).db.read_in_tx(read)


@router.put("/trials/{trial_id}/uploads/{name:path}", response_model=UploadStatus)
async def upload_chunk(
    request: Request, trial_id: RowId, name: str, upload: Uploader, offset: Annotated[int, Query(ge=0)]
) -> UploadStatus:
    """The next bytes of the file (at most 8 MiB a request), at `offset`: the bytes the board has."""
    trial, _ = upload
    name = store_domain.check_name(name)
    store = store_of(request)
    limit = await app_state(request).db.read_in_tx(store_domain.upload_limit, trial, name, _caps(request), store)
    part = await asyncio.to_thread(store.begin_append, trial_id, name, offset)
    have = offset
    try:
        async for block in _blocks(request.stream()):
            if have + len(block) > limit:
                raise store_domain.TooLarge(
                    f"{name!r} would pass {limit:,} bytes (the artifact size cap of the file or the trial)",
                    field="size",
                )
            await asyncio.to_thread(part.write, block)
            have += len(block)
    finally:
        await asyncio.to_thread(part.close)
    return UploadStatus(name=name, offset=have, limit=limit, complete=False)


async def _blocks(stream: AsyncIterator[bytes], size: int = 1 << 20) -> AsyncIterator[bytes]:
    """The body re-cut into blocks of about `size` bytes (fewer thread hops than the server's 64 KiB)."""
    buffer = bytearray()
    async for chunk in stream:
        buffer += chunk
        if len(buffer) >= size:
            yield bytes(buffer)
            buffer.clear()
    if buffer:
        yield bytes(buffer)


@router.delete("/trials/{trial_id}/uploads/{name:path}", status_code=204)
async def upload_discard(request: Request, trial_id: RowId, name: str, upload: Uploader) -> None:
    """Drop what arrived of an unfinished upload (to start it over)."""
    await asyncio.to_thread(store_of(request).discard, trial_id, store_domain.check_name(name))


@router.post("/trials/{trial_id}/artifacts", response_model=ArtifactPublic, status_code=201)
async def upload_complete(request: Request, trial_id: RowId, data: UploadComplete, upload: Uploader) -> ArtifactPublic:
    """The upload is whole: checked (size, sha256), stored under its hash, listed. Past the campaign's
    retention limit the oldest artifacts are removed (the list says so)."""
    trial, who = upload
    name = store_domain.check_name(data.name)
    row, _removed = await complete_upload(
        request.app, trial, name, data.size, data.sha256, store=store_of(request), caps=_caps(request), actor=who
    )
    return ArtifactPublic.of(row)


@router.get("/trials/{trial_id}/artifacts", response_model=list[ArtifactPublic], dependencies=[Depends(require_user)])
async def list_all(request: Request, trial_id: RowId) -> list[ArtifactPublic]:
    rows = await app_state(request).db.read_in_tx(store_domain.list_artifacts, trial_id)
    return [ArtifactPublic.of(r) for r in rows]


@router.get(
    "/trials/{trial_id}/artifacts/{name:path}",
    response_class=FileResponse,
    dependencies=[Depends(require_user)],
    responses={200: {"content": {"application/octet-stream": {}}}},
)
async def download(request: Request, trial_id: RowId, name: str) -> FileResponse:
    """The file, with its type; text and JSON inline (the browser shows them, never runs them), anything else
    as an attachment."""
    row = await app_state(request).db.read_in_tx(store_domain.get_artifact, trial_id, name)
    inline = row.content_type in store_domain.TEXT_TYPES
    media = "text/plain; charset=utf-8" if inline and row.content_type == "text/plain" else row.content_type
    return FileResponse(
        store_of(request).path(row.sha256),
        media_type=media,
        filename=Path(row.name).name,
        content_disposition_type="inline" if inline else "attachment",
    )


@router.get("/trials/{trial_id}/kernels", response_model=KernelTable, dependencies=[Depends(require_user)])
async def kernels(request: Request, trial_id: RowId) -> KernelTable:
    """The kernel table of the trial's profiler trace (its first artifact that is a Chrome/Kineto trace),
    with the N_ar and t_ar it gives. Read off the event loop, once per trace (cached by its hash)."""
    row = await app_state(request).db.read_in_tx(store_domain.trace_of, trial_id)
    if row is None:
        raise NotFound(f"trial #{trial_id} has no profiler trace (an artifact named *.trace.json or *trace*.json)")
    summary = await asyncio.to_thread(traces.read_stored, store_of(request).path(row.sha256), row.sha256)
    return KernelTable(
        artifact=row.name,
        trace_id=row.id or 0,
        device=summary.device,
        step_name=summary.step_name,
        steps=summary.steps,
        allreduces_per_step=summary.allreduces_per_step,
        allreduce_us=summary.allreduce_us,
        kernels=[KernelRowPublic(**r) for r in summary.table()],
    )
