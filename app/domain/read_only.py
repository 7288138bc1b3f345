"""An archived campaign is read-only: the one place that says so. Every flush of any session is checked
(a SQLAlchemy `before_flush` hook), so adding an approach, running, repeating, a verdict, an import, an edit,
a share link ... of an archived campaign is refused with one reason, whichever route, service or command
tries it. Two writes pass: the step that archives or restores the campaign (it changes `archived_at`), and
what a runner reports about a trial it was already running when the campaign was archived (its end, log and
metrics: the record of what happened, not a new change; `recording_runs` marks those transactions)."""

from __future__ import annotations

from itertools import chain
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import Session

from app.domain.errors import Conflict
from app.models import (
    Approach,
    Campaign,
    CampaignEvent,
    CampaignSlug,
    NotificationTarget,
    Replay,
    Settle,
    ShareLink,
    StatusChange,
    Trial,
)

# The rows a person's change to a campaign writes. Derived rows (change points, the notification outbox) and
# a trial's own record (logs, metrics, attempts, artifacts) come only from the board's passes and the runners.
GUARDED = (
    Campaign,
    CampaignSlug,
    CampaignEvent,
    Approach,
    StatusChange,
    Trial,
    Settle,
    Replay,
    ShareLink,
    NotificationTarget,
)
RECORDING_RUNS = "campaign_board.recording_runs"


def recording_runs(session: Session) -> None:
    """This transaction records what runners report (or what the board concludes about their trials: lost)."""
    session.info[RECORDING_RUNS] = True


def refusal(campaign: Campaign) -> Conflict:
    return Conflict(
        f"Campaign {campaign.name!r} is archived, so it is read-only: restore it first (an operator can, from its "
        "page, `POST /api/campaigns/{slug}/restore` or `campaign restore`).".replace("{slug}", campaign.slug),
        field="archived",
    )


def _campaign_id(session: Session, row: Any) -> int | None:
    if isinstance(row, Campaign):
        return row.id
    if isinstance(row, StatusChange):
        approach = session.get(Approach, row.approach_id)
        return approach.campaign_id if approach is not None else None
    return getattr(row, "campaign_id", None)


def check_writable(session: Session, campaign: Campaign) -> None:
    """Refuse when the campaign is archived (as stored: the step that archives or restores it passes)."""
    if campaign.archived_at is not None and not inspect(campaign).attrs.archived_at.history.has_changes():
        raise refusal(campaign)


@event.listens_for(Session, "before_flush")
def _refuse_writes_to_archived(session: Session, _context: Any, _instances: Any) -> None:
    if session.info.get(RECORDING_RUNS):
        return
    rows = [
        row
        for row in chain(session.new, session.dirty, session.deleted)
        if isinstance(row, GUARDED) and (row not in session.dirty or session.is_modified(row))
    ]
    if not rows:
        return
    seen: set[int] = set()
    with session.no_autoflush:
        for row in rows:
            campaign_id = _campaign_id(session, row)
            if campaign_id is None or campaign_id in seen:
                continue
            seen.add(campaign_id)
            campaign = row if isinstance(row, Campaign) else session.get(Campaign, campaign_id)
            if campaign is not None:
                check_writable(session, campaign)
