"""Artifacts: the files a trial leaves (results, profiles, traces), uploaded by its runner (or a person) in
chunks that can be resumed, stored content-addressed, listed and served.

Upload protocol (app/api/artifacts.py), per file of a trial:
1. `GET  /api/trials/{id}/uploads/{name}`: how many bytes the server has of it (0 for a new one), or that it
   is complete (a runner restarted mid-upload resumes from there);
2. `PUT  /api/trials/{id}/uploads/{name}?offset=N` with the next bytes: appended when N is what the server
   has, else 409 with the server's offset;
3. `POST /api/trials/{id}/uploads/{name}/complete` with `{"size", "sha256"}`: checked against what arrived,
   then the file moves into the store under its hash and becomes an `Artifact` row.

Caps: per file and per trial (Settings: `artifact_max_file_bytes`, `artifact_max_trial_bytes`), checked as bytes
arrive. Retention: a campaign keeps at most `artifact_retention_bytes` of artifacts; past it the oldest are
removed first (the row stays with its reason, the page says so).

Traces: a stored profiler trace (`is_trace_name`) is read once, off the event loop, by the hub's trace reader
after its upload completes (app/services/artifacts.py; one not read yet when the server starts), and what it
gives (`TraceSummary.figures`: its step, N_ar, t_ar) is kept on the row: the model reads it from there
(`campaign_traces`) as "from trace #id".

The store is a small interface (`ArtifactStore`): `LocalStore` keeps objects under the data directory; an
object store can take its place later. Nothing here holds a whole file in memory.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.domain.errors import Conflict, DomainError, Invalid, NotFound
from app.domain.traces import StoredTrace
from app.models import Artifact, Trial, utcnow

NAME = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._ +-]{0,99}(/[A-Za-z0-9._-][A-Za-z0-9._ +-]{0,99}){0,4}")
CHUNK = 1 << 20
# Served inline (viewable in the page) only as these types; anything else downloads as an attachment.
TEXT_TYPES = {"text/plain", "application/json", "text/csv"}


def check_name(name: str) -> str:
    """A relative path of at most five plain segments: no '..', no leading '/', no control characters."""
    if not NAME.fullmatch(name) or any(seg in (".", "..") for seg in name.split("/")) or len(name) > 255:
        raise Invalid(
            f"artifact name {name[:80]!r}: a relative path of letters, digits, '.', '_', '-', '+' and spaces "
            "(at most 5 segments of 100 characters)",
            field="name",
        )
    return name


def content_type(name: str) -> str:
    """By extension; a trace or a log is text or JSON; unknown types are octet streams."""
    if name.endswith((".log", ".txt", ".out", ".err", ".md")):
        return "text/plain"
    if name.endswith(".json") or name.endswith(".jsonl"):
        return "application/json"
    guessed, _ = mimetypes.guess_type(name)
    return (guessed or "application/octet-stream")[:100]


class ArtifactStore(Protocol):
    """Where artifact bytes live: partial uploads by (trial, name), finished objects by sha256."""

    def part_size(self, trial_id: int, name: str) -> int: ...
    def begin_append(self, trial_id: int, name: str, offset: int) -> BinaryIO: ...
    def finish_checked(self, trial_id: int, name: str, size: int, sha256: str) -> tuple[int, str]: ...
    def path(self, sha256: str) -> Path: ...
    def delete(self, sha256: str) -> None: ...
    def discard(self, trial_id: int, name: str) -> None: ...


class TooLarge(DomainError):
    """Over a size cap."""

    status_code = 413


class Forbidden(DomainError):
    """Neither the trial's runner nor a person who may change things."""

    status_code = 403


class LocalStore:
    """Objects at `root/objects/ab/abcdef...` (by sha256), partial uploads at `root/parts/<trial>/<hash of
    name>.part`; an object is moved into place whole (rename), so a reader never sees half of one."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "objects").mkdir(parents=True, exist_ok=True)
        (root / "parts").mkdir(parents=True, exist_ok=True)

    def _part(self, trial_id: int, name: str) -> Path:
        return self.root / "parts" / str(trial_id) / (hashlib.sha256(name.encode()).hexdigest() + ".part")

    def path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256[:2] / sha256

    def part_size(self, trial_id: int, name: str) -> int:
        part = self._part(trial_id, name)
        return part.stat().st_size if part.exists() else 0

    def begin_append(self, trial_id: int, name: str, offset: int) -> BinaryIO:
        """The part file, open for appending at `offset`, which must be the bytes it has (else Conflict with
        the offset to resume from)."""
        part = self._part(trial_id, name)
        part.parent.mkdir(parents=True, exist_ok=True)
        have = part.stat().st_size if part.exists() else 0
        if offset != have:
            raise Conflict(f"upload of {name!r} is at byte {have}, not {offset}: resume from {have}", field="offset")
        return part.open("ab")

    def finish_checked(self, trial_id: int, name: str, size: int, sha256: str) -> tuple[int, str]:
        """The part is whole: its size and hash checked against the uploader's, then moved to its object path
        (a part that does not match is dropped: upload it again). Returns (size, sha256)."""
        part = self._part(trial_id, name)
        have = part.stat().st_size if part.exists() else 0
        if not part.exists():
            raise NotFound(f"no upload of {name!r} in progress", field="name")
        if have != size:
            raise Conflict(f"{name!r}: {have} bytes arrived, not {size}: resume from {have}", field="size")
        digest = hashlib.sha256()
        with part.open("rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        sha = digest.hexdigest()
        if sha != sha256.lower():
            part.unlink()
            raise Invalid(
                f"{name!r}: the sha256 of what arrived is {sha}, not {sha256}: upload it again", field="sha256"
            )
        target = self.path(sha)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            part.unlink()  # the same bytes are stored already
        else:
            os.replace(part, target)
        return size, sha

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def discard(self, trial_id: int, name: str) -> None:
        self._part(trial_id, name).unlink(missing_ok=True)


def store_for(data_dir: Path) -> LocalStore:
    return LocalStore(data_dir / "artifacts")


@dataclass(frozen=True)
class Caps:
    file_bytes: int
    trial_bytes: int
    retention_bytes: int


def trial_bytes(session: Session, trial_id: int) -> int:
    total = session.exec(
        select(func.coalesce(func.sum(Artifact.size), 0)).where(
            Artifact.trial_id == trial_id, col(Artifact.removed_at).is_(None)
        )
    ).one()
    return int(total or 0)


def upload_limit(session: Session, trial: Trial, name: str, caps: Caps, store: ArtifactStore) -> int:
    """How large this file may grow: the file cap, or what the trial's cap leaves (its other parts counted)."""
    existing = session.exec(select(Artifact.size).where(Artifact.trial_id == trial.id, Artifact.name == name)).first()
    left = caps.trial_bytes - trial_bytes(session, trial.id or 0) + (existing or 0)
    return max(0, min(caps.file_bytes, left))


def record(
    session: Session,
    trial: Trial,
    name: str,
    size: int,
    sha256: str,
    *,
    store: ArtifactStore,
    caps: Caps,
    actor: str,
) -> tuple[Artifact, list[Artifact]]:
    """A stored upload becomes the trial's artifact `name` (replacing one of the same name). Returns it and
    what the campaign's retention limit removed to make room."""
    row = session.exec(select(Artifact).where(Artifact.trial_id == trial.id, Artifact.name == name)).first()
    old_sha = row.sha256 if row is not None and row.removed_at is None else None
    if row is None:
        row = Artifact(
            trial_id=trial.id or 0, campaign_id=trial.campaign_id, name=name, size=0, sha256="", content_type=""
        )
    if row.sha256 != sha256:
        row.trace = None  # other content: read again (`needs_trace`)
    row.size, row.sha256, row.content_type = size, sha256, content_type(name)
    row.uploaded_by, row.created_at, row.removed_at, row.removed_reason = actor[:120], utcnow(), None, ""
    session.add(row)
    session.flush()
    if old_sha and old_sha != sha256 and not _referenced(session, old_sha):
        store.delete(old_sha)
    return row, enforce_retention(session, trial.campaign_id, caps.retention_bytes, store, keep=row.id)


def trace_of(session: Session, trial_id: int) -> Artifact | None:
    """The trial's profiler trace: its first artifact (by name) that is one and is still stored."""
    return first_trace(list_artifacts(session, trial_id))


def first_trace(rows: list[Artifact]) -> Artifact | None:
    return next((a for a in rows if a.removed_at is None and is_trace_name(a.name)), None)


def needs_trace(row: Artifact) -> bool:
    """A stored trace whose figures are not read yet (just uploaded, or stored before the board kept them)."""
    return row.removed_at is None and row.trace is None and is_trace_name(row.name)


def unread_traces(session: Session) -> list[int]:
    """Ids of stored artifacts named as traces whose figures are not read yet (`needs_trace`)."""
    found = session.exec(
        select(Artifact.id, Artifact.name).where(col(Artifact.trace).is_(None), col(Artifact.removed_at).is_(None))
    )
    return [artifact_id or 0 for artifact_id, name in found if is_trace_name(name)]


def artifact_by_id(session: Session, artifact_id: int) -> Artifact | None:
    return session.get(Artifact, artifact_id)


def set_trace(session: Session, artifact_id: int, sha256: str, figures: dict[str, Any]) -> Artifact | None:
    """Keep what the trace gives on its row, unless the row holds other content by now (a re-upload)."""
    row = session.get(Artifact, artifact_id)
    if row is None or row.sha256 != sha256:
        return None
    row.trace = figures
    session.add(row)
    return row


def campaign_traces(session: Session, campaign_id: int) -> list[StoredTrace]:
    """The campaign's stored traces that were read, newest first (one query, by the campaign's index)."""
    found = session.execute(  # sqlalchemy's select: sqlmodel's is typed up to four columns
        sa_select(Artifact.id, Artifact.trial_id, Trial.approach_id, Artifact.name, Artifact.trace)  # type: ignore[call-overload]
        .join(Trial, col(Trial.id) == Artifact.trial_id)
        .where(
            Artifact.campaign_id == campaign_id,
            col(Artifact.trace).is_not(None),
            col(Artifact.removed_at).is_(None),
        )
        .order_by(col(Artifact.id).desc())
    )
    return [
        StoredTrace(artifact_id or 0, trial_id, approach_id, name, figures)
        for artifact_id, trial_id, approach_id, name, figures in found
        if isinstance(figures, dict) and "error" not in figures
    ]


def is_trace_name(name: str) -> bool:
    """A profiler trace by its name: *.trace.json, or a JSON file with "trace" in its name."""
    base = name.rsplit("/", 1)[-1].lower()
    return base.endswith(".json") and "trace" in base


def _referenced(session: Session, sha256: str) -> bool:
    return (
        session.exec(select(Artifact.id).where(Artifact.sha256 == sha256, col(Artifact.removed_at).is_(None))).first()
        is not None
    )


def enforce_retention(
    session: Session, campaign_id: int, limit: int, store: ArtifactStore, keep: int | None = None
) -> list[Artifact]:
    """Remove the campaign's oldest artifacts until it holds at most `limit` bytes (never `keep`)."""
    rows = list(
        session.exec(
            select(Artifact)
            .where(Artifact.campaign_id == campaign_id, col(Artifact.removed_at).is_(None))
            .order_by(col(Artifact.created_at), col(Artifact.id))
        )
    )
    total = sum(r.size for r in rows)
    removed: list[Artifact] = []
    for row in rows:
        if total <= limit:
            break
        if row.id == keep:
            continue
        row.removed_at = utcnow()
        row.removed_reason = f"removed by the campaign's retention limit ({limit:,} bytes), oldest first"
        session.add(row)
        session.flush()
        total -= row.size
        removed.append(row)
        if not _referenced(session, row.sha256):
            store.delete(row.sha256)
    return removed


def list_artifacts(session: Session, trial_id: int) -> list[Artifact]:
    return list(session.exec(select(Artifact).where(Artifact.trial_id == trial_id).order_by(col(Artifact.name))))


def get_artifact(session: Session, trial_id: int, name: str) -> Artifact:
    row = session.exec(select(Artifact).where(Artifact.trial_id == trial_id, Artifact.name == name)).first()
    if row is None:
        raise NotFound(f"trial #{trial_id} has no artifact {name[:80]!r}", field="name")
    if row.removed_at is not None:
        raise NotFound(f"{name!r} was {row.removed_reason}", field="name")
    return row
