"""A campaign's history over time: approach status changes and trials (for the timeline chart)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlmodel import Session, select

from app.models import Approach, Campaign, StatusChange, Trial


@dataclass(frozen=True)
class StatusEvent:
    at: datetime
    approach_title: str
    from_status: str
    to_status: str
    reason: str


@dataclass(frozen=True)
class TrialSpan:
    trial_id: int
    approach_title: str
    state: str
    start: datetime
    end: datetime | None  # None while it runs


@dataclass(frozen=True)
class Timeline:
    status_events: tuple[StatusEvent, ...]
    trials: tuple[TrialSpan, ...]


def _aware(ts: datetime) -> datetime:
    # SQLite hands back naive datetimes; they were written as UTC.
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts


def campaign_timeline(session: Session, campaign: Campaign) -> Timeline:
    titles = {a.id: a.title for a in session.exec(select(Approach).where(Approach.campaign_id == campaign.id))}
    changes = session.exec(select(StatusChange).where(StatusChange.approach_id.in_(list(titles)))  # type: ignore[union-attr]
                           .order_by(StatusChange.at, StatusChange.id))
    trials = session.exec(select(Trial).where(Trial.campaign_id == campaign.id).order_by(Trial.created_at, Trial.id))
    return Timeline(
        status_events=tuple(StatusEvent(_aware(c.at), titles.get(c.approach_id, "?"), c.from_status, c.to_status,
                                        c.reason) for c in changes),
        trials=tuple(TrialSpan(t.id, titles.get(t.approach_id, "?"), t.state,  # type: ignore[arg-type]
                               _aware(t.started_at or t.dispatched_at or t.created_at),
                               _aware(t.finished_at) if t.finished_at else None) for t in trials),
    )
