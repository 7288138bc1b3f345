"""Two or more trials of a campaign side by side: their metrics aligned row by row, their stacks diffed.

A metric name's rows are told apart within a trial by the tags whose values vary there (the message
size of an allreduce sweep, `tokens` or `bytes`); those tags make a row's point, so trial A's 8-token
latency sits beside trial B's. Tags that are the same within each trial (backend, mode, torch) describe
the trial, not the point, and are left out of the alignment. Two queries, whatever the trials hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session, select

from app.domain.errors import Invalid, NotFound
from app.domain.fingerprint import STACK_COMPONENTS, component_value
from app.domain.runners import gpu_count
from app.domain.trial_reads import trial_metrics
from app.models import Approach, Campaign, Runner, Trial, aware

MIN_TRIALS = 2
MAX_TRIALS = 8


@dataclass(frozen=True)
class ComparedTrial:
    id: int
    approach_key: str
    approach_title: str
    state: str
    runner_name: str | None
    fingerprint: dict[str, Any] | None
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def label(self) -> str:
        return f"#{self.id} {self.approach_title}"


@dataclass(frozen=True)
class MetricRow:
    """One point of a metric (its varying tags), with each compared trial's value (None: not measured)."""

    point: tuple[tuple[str, Any], ...]
    values: list[float | None]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.point)

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


@dataclass(frozen=True)
class MetricGroup:
    """Every row of one metric name. `x_tag`: the numeric tag the rows run along (a chart's x), if any."""

    name: str
    unit: str
    x_tag: str | None
    rows: list[MetricRow]


@dataclass(frozen=True)
class StackRow:
    component: str
    label: str
    values: list[str | None]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


@dataclass(frozen=True)
class Comparison:
    campaign: Campaign
    trials: list[ComparedTrial]
    metrics: list[MetricGroup]
    stack: list[StackRow]


def parse_trial_ids(ids: list[int]) -> list[int]:
    """Distinct ids in the order given, between MIN_TRIALS and MAX_TRIALS of them."""
    distinct = list(dict.fromkeys(ids))
    if not MIN_TRIALS <= len(distinct) <= MAX_TRIALS:
        raise Invalid(
            f"Pick between {MIN_TRIALS} and {MAX_TRIALS} different trials to compare ({len(distinct)} given).",
            field="trial",
        )
    return distinct


def compare_trials(session: Session, campaign: Campaign, trial_ids: list[int]) -> Comparison:
    ids = parse_trial_ids(trial_ids)
    found = session.exec(
        select(Trial, Approach.key, Approach.title, Runner.name)
        .join(Approach, Approach.id == Trial.approach_id)  # type: ignore[arg-type]
        .outerjoin(Runner, Runner.id == Trial.runner_id)  # type: ignore[arg-type]
        .where(Trial.id.in_(ids), Trial.campaign_id == campaign.id)  # type: ignore[union-attr]
    ).all()
    by_id = {t.id: (t, key, title, runner) for t, key, title, runner in found}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise NotFound(f"No trial {', '.join(f'#{i}' for i in missing)} in campaign {campaign.slug!r}.", field="trial")
    trials = [
        ComparedTrial(
            id=i,
            approach_key=key,
            approach_title=title,
            state=t.state,
            runner_name=runner,
            fingerprint=t.fingerprint,
            started_at=aware(t.started_at),
            finished_at=aware(t.finished_at),
        )
        for i in ids
        for t, key, title, runner in [by_id[i]]
    ]
    return Comparison(campaign, trials, metric_groups(ids, trial_metrics(session, ids)), stack_rows(trials))


def _hashable(value: Any) -> Any:
    # Tag values are JSON: a list or an object becomes its canonical text, so it can key a point.
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _sort_key(value: Any) -> tuple[int, float, str]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def metric_groups(ids: list[int], metrics: list[Any]) -> list[MetricGroup]:
    """Metric rows (in logged order) aligned by name and point; a later row for the same point wins."""
    by_name: dict[str, list[Any]] = {}
    for m in metrics:
        by_name.setdefault(m.name, []).append(m)
    column = {trial_id: i for i, trial_id in enumerate(ids)}
    groups = []
    for name in sorted(by_name):
        rows = by_name[name]
        varying: list[str] = []
        for trial_id in ids:
            seen: dict[str, set[str]] = {}
            for m in rows:
                if m.trial_id == trial_id:
                    for k, v in (m.tags or {}).items():
                        seen.setdefault(k, set()).add(repr(v))
            varying += [k for k, values in seen.items() if len(values) > 1 and k not in varying]
        varying.sort()
        points: dict[tuple, list[float | None]] = {}
        for m in rows:
            tags = m.tags or {}
            point = tuple((k, _hashable(tags.get(k))) for k in varying)
            points.setdefault(point, [None] * len(ids))[column[m.trial_id]] = m.value
        numeric = [k for k in varying if all(_sort_key(dict(p)[k])[0] == 0 for p in points)]
        ordered = sorted(points, key=lambda p: [_sort_key(v) for _, v in p])
        unit = next((m.unit for m in rows if m.unit), "")
        groups.append(
            MetricGroup(name, unit, numeric[0] if numeric else None, [MetricRow(p, points[p]) for p in ordered])
        )
    return groups


def stack_rows(trials: list[ComparedTrial]) -> list[StackRow]:
    """The stack components any of the trials reported (GPU count first), each trial's value."""
    rows = [StackRow("gpu_count", "GPUs", [str(gpu_count(t.fingerprint)) if t.fingerprint else None for t in trials])]
    for component, label in STACK_COMPONENTS.items():
        rows.append(StackRow(component, label, [component_value(t.fingerprint, component) for t in trials]))
    return [r for r in rows if any(v is not None for v in r.values)]
