"""The `results` section of a campaign file: trials that travel with their measurements.

`campaign export SLUG --with-results` (API: `GET /api/campaigns/{slug}/export?with_results=true`)
appends, after `approaches:`, every ended trial of the campaign, oldest first:

    results:
    - approach: verify-step-tp1-graph      # the key of an approach in this file
      state: succeeded                      # an ended state only (a queued or running trial does not travel)
      recipe: {kind: verify_step, params: {...}}
      fingerprint: {gpus: [...], torch: 2.11.0+cu130, ...}   # the stack it was measured on
      exit_code: 0
      created_at: '2026-12-01T19:03:10.123456+00:00'
      started_at: ...
      finished_at: ...
      metrics:
      - {name: verify_compute_ms, value: 16.06, unit: ms, seq: 3, index: 0, at: '...',
         tags: {batch: 1, draft_tokens: 1, ...}, samples: [16.05, ...]}

An import creates each trial (runner none, phase "imported", its own dates and fingerprint) and its
metric rows, so the profitability report reads them exactly as it reads trials measured here, and a
results campaign answers on another board as it did where it was measured. A trial already on the
board (same approach, created, started and finished dates) is not imported again: importing a file
twice adds its trials once. Logs do not travel. A bad entry is refused whole, naming its line and field
(`campaign_files.parse_campaign_file`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy import insert
from sqlmodel import Session, col, select

from app.domain import statistics
from app.domain.errors import Invalid
from app.models import TERMINAL_TRIAL_STATES, Approach, Campaign, Metric, Trial, aware
from app.protocol.metrics import MAX_SAMPLES


class Dumps(Protocol):
    """What writes a list item of the file as it stands there (campaign_files._Pieces)."""

    def dump(self, data: Any) -> str: ...


EXPORT_TRIALS = 200  # trials per read (their metrics: one more query)
IMPORTED_PHASE = "imported"
EndedState = Literal["succeeded", "failed", "cancelled", "timed_out", "lost"]
assert set(EndedState.__args__) == {s.value for s in TERMINAL_TRIAL_STATES}  # type: ignore[attr-defined]


def iso_utc(value: datetime | None) -> str | None:
    """A stored date (UTC; SQLite gives it back naive) as an ISO string with its offset."""
    at = aware(value)
    return at.isoformat() if at is not None else None


class ResultMetric(BaseModel):
    """One metric row of a trial: what its metric line said, and where it stood in the trial's log."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=120)
    value: float
    unit: str = Field("", max_length=40)
    tags: dict[str, Any] = Field(default_factory=dict)
    samples: list[float] | None = Field(None, max_length=MAX_SAMPLES)
    seq: int = Field(0, ge=0)
    index: int = Field(0, ge=0)
    at: datetime | None = None

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("samples")
    @classmethod
    def _finite_samples(cls, samples: list[float] | None) -> list[float] | None:
        if samples is not None and not all(math.isfinite(s) for s in samples):
            raise ValueError("samples must be finite numbers")
        return samples

    @field_validator("at")
    @classmethod
    def _at_utc(cls, value: datetime | None) -> datetime | None:
        return aware(value)


class ResultTrial(BaseModel):
    """One ended trial of an approach of the file, with its metrics and the stack it ran on."""

    model_config = ConfigDict(extra="forbid")
    approach: str = Field(min_length=1, max_length=120)
    state: EndedState
    recipe: dict[str, Any] = Field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    error: str = Field("", max_length=100000)
    requested_by: str = Field("", max_length=120)
    gpu_released: bool | None = None
    gpu_note: str = Field("", max_length=500)
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    metrics: list[ResultMetric] = Field(default_factory=list)

    @field_validator("created_at", "started_at", "finished_at")
    @classmethod
    def _dates_utc(cls, value: datetime | None) -> datetime | None:
        return aware(value)

    @model_validator(mode="after")
    def _one_row_per_place(self) -> ResultTrial:
        seen: set[tuple[int, int]] = set()
        for i, m in enumerate(self.metrics):
            if (m.seq, m.index) in seen:
                raise ValueError(f"metrics[{i}]: a second metric at seq {m.seq}, index {m.index}")
            seen.add((m.seq, m.index))
        if self.started_at and self.finished_at and self.finished_at < self.started_at:
            raise ValueError("finished_at is before started_at")
        return self


def check_approaches(
    results: list[ResultTrial], keys: set[str], line_of: Callable[[tuple[Any, ...]], int | None]
) -> None:
    """Every result names an approach of the file: Invalid names the line and field of the first that does not."""
    for i, result in enumerate(results):
        if result.approach not in keys:
            line = line_of(("results", i, "approach"))
            raise Invalid(
                f"{f'line {line}: ' if line else ''}results[{i}].approach: no approach {result.approach!r} in this file",
                field=f"results[{i}].approach",
            )


# ---- export -------------------------------------------------------------------------------


def _metric_mapping(m: Metric) -> dict[str, Any]:
    item: dict[str, Any] = {"name": m.name, "value": m.value, "unit": m.unit, "seq": m.seq, "index": m.index}
    if m.created_at is not None:
        item["at"] = iso_utc(m.created_at)
    item["tags"] = m.tags or {}
    if m.samples is not None:
        item["samples"] = m.samples
    return item


def _trial_mapping(trial: Trial, key: str, metrics: list[Metric]) -> dict[str, Any]:
    item: dict[str, Any] = {"approach": key, "state": trial.state, "recipe": trial.recipe or {}}
    if trial.fingerprint is not None:
        item["fingerprint"] = trial.fingerprint
    for name in ("exit_code", "exit_signal", "gpu_released"):
        if getattr(trial, name) is not None:
            item[name] = getattr(trial, name)
    for name in ("error", "requested_by", "gpu_note"):
        if getattr(trial, name):
            item[name] = getattr(trial, name)
    item["created_at"] = iso_utc(trial.created_at)
    for name in ("started_at", "finished_at"):
        if getattr(trial, name) is not None:
            item[name] = iso_utc(getattr(trial, name))
    item["metrics"] = [_metric_mapping(m) for m in metrics]
    return item


def export_pieces(session: Session, campaign: Campaign, pieces: Dumps) -> Iterator[str]:
    """`results:` and the campaign's ended trials (oldest first) with their metrics, EXPORT_TRIALS trials
    per piece (two queries each)."""
    keys = dict(session.exec(select(Approach.id, Approach.key).where(Approach.campaign_id == campaign.id)).all())
    ended = [s.value for s in TERMINAL_TRIAL_STATES]
    after = 0
    header = False
    while True:
        trials = list(
            session.exec(
                select(Trial)
                .where(Trial.campaign_id == campaign.id, col(Trial.state).in_(ended), col(Trial.id) > after)
                .order_by(col(Trial.id))
                .limit(EXPORT_TRIALS)
            )
        )
        if not trials:
            return
        by_trial: dict[int, list[Metric]] = {t.id: [] for t in trials if t.id is not None}
        for m in session.exec(
            select(Metric)
            .where(col(Metric.trial_id).in_(list(by_trial)))
            .order_by(col(Metric.trial_id), col(Metric.seq), col(Metric.index))
        ):
            by_trial[m.trial_id].append(m)
        text = "" if header else "results:\n"
        header = True
        yield text + "".join(
            pieces.dump([_trial_mapping(t, keys[t.approach_id], by_trial[t.id])]) for t in trials if t.id is not None
        )
        after = trials[-1].id or after


# ---- import -------------------------------------------------------------------------------


def naive_utc(value: datetime | None) -> datetime | None:
    """The comparable form of a date on either database (UTC, no offset)."""
    at = aware(value)
    return at.replace(tzinfo=None) if at is not None else None


def import_results(session: Session, campaign: Campaign, results: list[ResultTrial]) -> tuple[int, int, int]:
    """Create the file's trials and metric rows in `campaign` (its approaches exist by now). Returns
    (trials added, metrics added, trials already on the board)."""
    assert campaign.id is not None
    approaches = {a.key: a for a in session.exec(select(Approach).where(Approach.campaign_id == campaign.id))}
    present = {
        (approach_id, naive_utc(created), naive_utc(started), naive_utc(finished))
        for approach_id, created, started, finished in session.exec(
            select(Trial.approach_id, Trial.created_at, Trial.started_at, Trial.finished_at).where(
                Trial.campaign_id == campaign.id
            )
        )
    }
    added: list[tuple[Trial, ResultTrial]] = []
    kept = 0
    for result in results:
        approach = approaches[result.approach]
        assert approach.id is not None
        place = (approach.id, naive_utc(result.created_at), naive_utc(result.started_at), naive_utc(result.finished_at))
        if place in present:
            kept += 1
            continue
        present.add(place)
        trial = Trial(
            campaign_id=campaign.id,
            approach_id=approach.id,
            recipe=result.recipe,
            state=result.state,
            phase=IMPORTED_PHASE,
            requested_by=result.requested_by,
            exit_code=result.exit_code,
            exit_signal=result.exit_signal,
            error=result.error,
            fingerprint=result.fingerprint,
            gpu_released=result.gpu_released,
            gpu_note=result.gpu_note,
            created_at=result.created_at,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )
        session.add(trial)
        added.append((trial, result))
    session.flush()  # the trials' ids, in file order (so "newest trial" keeps its meaning)
    rows = [
        {
            "trial_id": trial.id,
            "approach_id": trial.approach_id,
            "campaign_id": campaign.id,
            "seq": m.seq,
            "index": m.index,
            "name": m.name,
            "value": m.value,
            "unit": m.unit,
            "tags": m.tags,
            "samples": m.samples,
            **statistics.summary_columns(m.samples),
            **({"created_at": m.at} if m.at is not None else {}),
        }
        for trial, result in added
        for m in result.metrics
    ]
    for start in range(0, len(rows), 1000):
        chunk = rows[start : start + 1000]
        with_dates = [r for r in chunk if "created_at" in r]
        without = [r for r in chunk if "created_at" not in r]
        for part in (with_dates, without):  # one statement per column set
            if part:
                session.execute(insert(Metric), part)
    return len(added), len(rows), kept
