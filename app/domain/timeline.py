"""A campaign's history over time (the timeline chart): approach status changes and trials.

Bounded whatever the campaign's size: the most recently active approaches only (`max_approaches`),
each with its trials aggregated into one span per trial state and its latest status changes
(`changes_per_approach`). Three queries, none per approach or per trial: each approach's last activity
(its newest status change, and its newest trial's last timestamp: index seeks per approach, not a scan
of the campaign's history), then the changes and trial spans of the approaches shown only. Status
changes carry the dates of the history itself (a campaign file can carry them), not the import time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, union_all
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from app.models import Approach, Campaign, HistoryKind, StatusChange, Trial, aware

MAX_APPROACHES = 40
CHANGES_PER_APPROACH = 8


@dataclass(frozen=True)
class StatusEvent:
    at: datetime
    approach_title: str
    from_status: str
    to_status: str
    reason: str


@dataclass(frozen=True)
class TrialSpan:
    """An approach's trials in one state, aggregated: from the first start to the last end."""

    approach_title: str
    state: str
    count: int
    start: datetime
    end: datetime | None  # None while one runs


@dataclass(frozen=True)
class Timeline:
    status_events: tuple[StatusEvent, ...]
    trials: tuple[TrialSpan, ...]
    approaches_shown: int
    approaches_total: int


def campaign_timeline(
    session: Session,
    campaign: Campaign,
    *,
    max_approaches: int = MAX_APPROACHES,
    changes_per_approach: int = CHANGES_PER_APPROACH,
) -> Timeline:
    titles, shown = _recently_active(session, campaign, max_approaches)
    changes = _newest_changes(session, shown, changes_per_approach) if shown else []
    spans = _trial_spans(session, shown) if shown else []
    return Timeline(
        status_events=tuple(
            sorted(
                (
                    StatusEvent(aware(c.at), titles.get(c.approach_id, "?"), c.from_status, c.to_status, c.reason)
                    for c in reversed(changes)  # each approach's newest first: at equal times, the older row first
                    if c.approach_id in shown
                ),
                key=lambda e: e.at,
            )
        ),
        trials=tuple(
            TrialSpan(
                titles.get(approach_id, "?"),
                state,
                n,
                aware(first),
                aware(end) if ended == n else None,
            )
            for approach_id, state, n, first, end, ended in spans
            if approach_id in shown and first is not None
        ),
        approaches_shown=len(shown),
        approaches_total=len(titles),
    )


def _recently_active(session: Session, campaign: Campaign, max_approaches: int) -> tuple[dict[int, str], set[int]]:
    """Every approach's title, and the ids of the `max_approaches` most recently active (newest status change
    or newest trial's last timestamp); an approach with neither is not shown."""
    last_change = (
        select(func.max(StatusChange.at)).where(StatusChange.approach_id == Approach.id).scalar_subquery()
    )  # the (approach, at, id) index: one seek per approach
    last_trial = (
        select(func.coalesce(Trial.finished_at, Trial.started_at, Trial.dispatched_at, Trial.created_at))
        .where(Trial.approach_id == Approach.id)
        .order_by(Trial.id.desc())  # type: ignore[union-attr]
        .limit(1)
        .scalar_subquery()
    )  # the newest trial (the (approach, id) index), its latest timestamp
    activity = session.execute(
        select(Approach.id, Approach.title, last_change, last_trial).where(Approach.campaign_id == campaign.id)
    ).all()
    titles = {approach_id: title for approach_id, title, _, _ in activity}
    last: dict[int, datetime] = {}
    for approach_id, _title, changed, tried in activity:
        times = [t for t in (aware(changed), aware(tried)) if t is not None]
        if times:
            last[approach_id] = max(times)
    return titles, set(sorted(last, key=lambda a: last[a], reverse=True)[:max_approaches])


def _newest_changes(session: Session, shown: set[int], changes_per_approach: int) -> list[Any]:
    """Each shown approach's newest status changes: a seek into the (approach, at, id) index read backwards, at
    most `changes_per_approach` rows each, all in one statement (a window over every change of the shown
    approaches read some thousands of rows to keep 8 of each). The statement is built once per number of
    approaches (`_newest_changes_statement`), the ids bound as parameters."""
    statement = _newest_changes_statement(len(shown), changes_per_approach)
    ids = {f"approach_{i}": approach_id for i, approach_id in enumerate(sorted(shown))}
    return list(session.execute(statement, ids).all())


@functools.lru_cache(maxsize=2 * MAX_APPROACHES)
def _newest_changes_statement(approaches: int, changes_per_approach: int) -> Any:
    """`_newest_changes`'s statement for this many approaches, their ids the parameters approach_0, approach_1, ...:
    building 40 subqueries was most of the timeline's time (issue 46 item 1); a built statement is immutable."""
    newest: list[Any] = [
        sa_select(
            sa_select(  # five columns (sqlmodel's select stops at four)
                col(StatusChange.approach_id),
                col(StatusChange.at),
                col(StatusChange.from_status),
                col(StatusChange.to_status),
                col(StatusChange.reason),
            )
            .where(
                col(StatusChange.approach_id) == bindparam(f"approach_{i}"),
                col(StatusChange.kind) == HistoryKind.status,
            )
            .order_by(col(StatusChange.at).desc(), col(StatusChange.id).desc())
            .limit(changes_per_approach)
            .subquery()
        )
        for i in range(approaches)
    ]
    return union_all(*newest)


def _trial_spans(session: Session, shown: set[int]) -> list[Any]:
    """Per shown approach and trial state: how many, the first start, the last end and how many have ended."""
    start = func.coalesce(Trial.started_at, Trial.dispatched_at, Trial.created_at)
    return list(
        session.execute(
            sa_select(
                col(Trial.approach_id),
                col(Trial.state),
                func.count(),
                func.min(start),
                func.max(Trial.finished_at),
                func.count(col(Trial.finished_at)),
            )
            .where(col(Trial.approach_id).in_(sorted(shown)))
            .group_by(col(Trial.approach_id), col(Trial.state))
        ).all()
    )
