"""Runners: their tokens (only hashes are stored), what they report about themselves, and whether
they are online, busy or offline.

A runner is *online* while its websocket is open (Runner.connected), *busy* while it holds an
active trial (queued/dispatched/running), *offline* otherwise; a revoked runner is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from app.domain.credentials import hash_token, new_secret
from app.domain.errors import Conflict, Invalid, or_not_found
from app.models import ACTIVE_TRIAL_STATES, Runner, RunnerFields, Trial, utcnow

EMBEDDED_RUNNER_NAME = "local (embedded)"
TOKEN_PREFIX = "cbr"


def _new_token(runner: Runner) -> str:
    token = new_secret(TOKEN_PREFIX)
    runner.token_hash = hash_token(token)
    return token


def create_runner(session: Session, name: str, *, embedded: bool = False) -> tuple[Runner, str]:
    """A new runner and its token; the token is shown once and only its hash is kept."""
    name = name.strip()
    if not name:
        raise Invalid("A runner needs a name, e.g. the node's hostname.", field="name")
    if len(name) > 120:
        raise Invalid("A runner's name is at most 120 characters.", field="name")
    if session.exec(select(Runner).where(Runner.name == name)).first():
        raise Conflict(f"A runner named {name!r} exists already.", field="name")
    runner = Runner(name=name, token_hash="", embedded=embedded)
    token = _new_token(runner)
    session.add(runner)
    session.flush()
    return runner, token


def ensure_embedded_runner(session: Session) -> tuple[Runner, str]:
    """The embedded runner's row with a fresh token (rotated on every server start)."""
    runner = session.exec(select(Runner).where(Runner.name == EMBEDDED_RUNNER_NAME)).first()
    if runner is None:
        return create_runner(session, EMBEDDED_RUNNER_NAME, embedded=True)
    token = _new_token(runner)
    runner.embedded = True
    runner.revoked_at = None
    session.add(runner)
    session.flush()
    return runner, token


def authenticate(session: Session, token: str | None) -> Runner | None:
    """The live (not revoked) runner holding this token, or None."""
    if not token:
        return None
    runner = session.exec(select(Runner).where(Runner.token_hash == hash_token(token))).first()
    if runner is None or runner.revoked_at is not None:
        return None
    return runner


def get_runner(session: Session, runner_id: int) -> Runner:
    return or_not_found(session.get(Runner, runner_id), f"No runner #{runner_id}.")


def revoke_runner(session: Session, runner: Runner) -> None:
    """Refuse the runner's token from now on (the caller disconnects a live socket)."""
    if runner.revoked_at is not None:
        raise Conflict(f"Runner {runner.name!r} is already revoked.")
    runner.revoked_at = utcnow()
    runner.connected = False
    session.add(runner)
    session.flush()


def mark_connected(session: Session, runner: Runner, fingerprint: dict[str, Any], labels: list[str]) -> None:
    runner.fingerprint = fingerprint
    runner.labels = list(labels)
    runner.connected = True
    runner.last_seen_at = utcnow()
    session.add(runner)
    session.flush()


def lock_runner(session: Session, runner_id: int) -> Runner | None:
    """The runner with its row locked (PostgreSQL: FOR NO KEY UPDATE; SQLite: the write transaction's
    BEGIN IMMEDIATE) and re-read, or None."""
    return session.exec(
        select(Runner)
        .where(Runner.id == runner_id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    ).first()


def mark_disconnected(
    session: Session,
    runner_id: int,
    last_seen_at: datetime | None = None,
    *,
    reconnected: Callable[[], bool] = lambda: False,
) -> None:
    """The socket closed: the lost-after clock starts now (see trials.sweep_lost). `reconnected()` says
    whether a newer socket of the runner has registered meanwhile; it is asked with the runner's row
    locked, so a fast reconnect's hello (which sets `connected` on the same row, after registering)
    cannot be overwritten by the old socket's late "offline"."""
    runner = lock_runner(session, runner_id)
    if runner is None or reconnected():
        return
    runner.connected = False
    runner.last_seen_at = last_seen_at or utcnow()
    session.add(runner)
    session.flush()


def active_trials_by_runner(session: Session) -> dict[int, Trial]:
    rows = session.exec(
        select(Trial).where(
            col(Trial.state).in_(ACTIVE_TRIAL_STATES),
            col(Trial.runner_id).is_not(None),
        )
    )
    return {t.runner_id: t for t in rows if t.runner_id is not None}


@dataclass
class RunnerView:
    """A runner as the runners page and GET /api/runners show it."""

    runner: Runner
    status: str  # online, busy, offline, revoked
    trial: Trial | None

    def as_dict(self) -> dict[str, Any]:
        """The fields of schemas.RunnerPublic (GET /api/runners)."""
        r, t = self.runner, self.trial
        return {
            **{name: getattr(r, name) for name in RunnerFields.model_fields},
            "id": r.id,
            "status": self.status,
            "summary": summary(r.fingerprint) if r.fingerprint else "",
            "trial": {"id": t.id, "state": t.state, "phase": t.phase} if t is not None else None,
        }


def runner_status(runner: Runner, trial: Trial | None) -> str:
    if runner.revoked_at is not None:
        return "revoked"
    if not runner.connected:
        return "offline"
    return "busy" if trial is not None else "online"


def runner_view(session: Session, runner_id: int) -> RunnerView:
    """One runner with the trial it runs now (two queries)."""
    runner = get_runner(session, runner_id)
    trial = session.exec(
        select(Trial).where(Trial.runner_id == runner.id, Trial.state.in_(ACTIVE_TRIAL_STATES))  # type: ignore[attr-defined]
    ).first()
    return RunnerView(runner, runner_status(runner, trial), trial)


def list_runners(session: Session) -> list[RunnerView]:
    busy = active_trials_by_runner(session)
    runners = session.exec(select(Runner).order_by(Runner.revoked_at.is_not(None), Runner.name))  # type: ignore[union-attr]
    return [RunnerView(r, runner_status(r, busy.get(r.id)), busy.get(r.id)) for r in runners]  # type: ignore[arg-type]


# ---- what a runner's fingerprint says (shape owned by runners/fingerprint.py) ----------------


def gpu_count(fingerprint: dict[str, Any] | None) -> int:
    fp = fingerprint or {}
    if isinstance(fp.get("gpu_count"), int):
        return fp["gpu_count"]
    gpus = fp.get("gpus")
    return len(gpus) if isinstance(gpus, list) else 0


def _sm_tuple(value: Any) -> tuple[int, int] | None:
    """'9.0' / 'sm_90' / '120' / '9.0,12.0' (several GPU kinds: the lowest) -> (major, minor)."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if "," in text:
        found = [t for t in (_sm_tuple(part) for part in text.split(",")) if t is not None]
        return min(found) if found else None
    text = text.removeprefix("sm").removeprefix("_")
    if "." in text:
        major, _, minor = text.partition(".")
    elif text.isdigit() and len(text) >= 2:
        major, minor = text[:-1], text[-1]  # "90" -> 9.0, "120" -> 12.0
    else:
        major, minor = text, "0"
    try:
        return int(major), int(minor)
    except ValueError:
        return None


def sm(fingerprint: dict[str, Any] | None) -> tuple[int, int] | None:
    """The lowest SM capability of the node's GPUs (what every rank of a trial can rely on)."""
    fp = fingerprint or {}
    found = _sm_tuple(fp.get("sm"))
    if found is not None:
        return found
    gpus = fp.get("gpus")
    values: list[tuple[int, int]] = []
    for g in gpus if isinstance(gpus, list) else []:
        if isinstance(g, dict) and (v := _sm_tuple(g.get("sm") or g.get("compute_capability"))) is not None:
            values.append(v)
    return min(values) if values else None


# Fingerprint keys that describe the machine rather than installed software (runners/fingerprint.py).
_NOT_SOFTWARE = {"hostname", "cpu_count", "gpu_count", "gpus", "sm", "driver", "components"}


def components(fingerprint: dict[str, Any] | None) -> dict[str, str]:
    """Installed software by name (lowercase) -> version: the fingerprint's version keys (torch,
    cuda, nccl, sglang, ...; None = absent) and any `components` mapping or list."""
    fp = fingerprint or {}
    out = {
        str(k).lower(): str(v)
        for k, v in fp.items()
        if k not in _NOT_SOFTWARE and isinstance(v, (str, int, float)) and v not in ("", False)
    }
    raw = fp.get("components")
    if isinstance(raw, dict):
        out.update({str(k).lower(): "" if v is True else str(v) for k, v in raw.items() if v not in (None, False, "")})
    elif isinstance(raw, list):
        out.update({str(k).lower(): "" for k in raw})
    return out


# ---- requirement matching: what an approach needs against what a runner's fingerprint has --------


# Software a runner lacks, said with the one command that makes it there (the page shows it as is).
SOFTWARE_HINTS = {
    "vllm": "vllm (run 'make engine' in the runner's checkout: vLLM and the tiny models into .cache/vllm)"
}


def unmet_requirements(requirements: dict[str, Any] | None, fingerprint: dict[str, Any] | None) -> list[str]:
    """What a runner with this fingerprint lacks for these requirements, in words ([] = it can run)."""
    req = requirements or {}
    missing: list[str] = []
    gpus = int(req.get("gpus") or 0)
    if gpus and gpu_count(fingerprint) < gpus:
        missing.append(f"{gpus} GPU{'s' if gpus != 1 else ''}")
    missing += _unmet_allocation(req, fingerprint)
    min_sm = _sm_tuple(req.get("min_sm"))
    if min_sm:
        have = sm(fingerprint)
        if have is None or have < min_sm:
            missing.append(f"SM {min_sm[0]}.{min_sm[1]} or newer")
    installed = components(fingerprint)
    for name in req.get("software") or []:
        if str(name).lower() not in installed:
            missing.append(SOFTWARE_HINTS.get(str(name).lower(), str(name)))
    return missing


def _unmet_allocation(req: dict[str, Any], fingerprint: dict[str, Any] | None) -> list[str]:
    """N nodes x G GPUs: only a runner that hands trials to a scheduler (its fingerprint's `slurm`
    partition) can give more than one node; G GPUs per node must fit the partition's nodes."""
    nodes = int(req.get("nodes") or 1)
    per_node = int(req.get("gpus_per_node") or 0)
    missing: list[str] = []
    if per_node and gpu_count(fingerprint) < per_node:
        missing.append(f"{per_node} GPU{'s' if per_node != 1 else ''} per node")
    if nodes > 1:
        partition = (fingerprint or {}).get("slurm")
        have = partition.get("nodes", 0) if isinstance(partition, dict) else 0
        if have < nodes:
            missing.append(f"{nodes} nodes (a SLURM partition with {nodes} or more)")
    return missing


def summary(fingerprint: dict[str, Any] | None) -> str:
    """One line for the runners page: '8 GPUs, SM 12.0, torch 2.10.0, nccl 2.27.3'."""
    parts = []
    n = gpu_count(fingerprint)
    parts.append(f"{n} GPU{'s' if n != 1 else ''}")
    cap = sm(fingerprint)
    if cap:
        parts.append(f"SM {cap[0]}.{cap[1]}")
    for name, version in sorted(components(fingerprint).items()):
        if name not in ("python", "cpu_count"):
            parts.append(f"{name} {version}".strip())
    return ", ".join(parts)
