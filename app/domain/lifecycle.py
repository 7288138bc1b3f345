"""A campaign's lifecycle: rename (its old slug redirects), archive (read-only, off the front page; the rule
itself is app/domain/read_only.py), restore, and delete from the archive. Each step but the delete is kept in
the campaign's own history (`CampaignEvent`); the delete removes the campaign's rows and only those."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import delete as sql_delete
from sqlalchemy import func
from sqlmodel import Session, col, select

from app.domain import queue, repeats, replay, trials
from app.domain.campaigns import slug_taken
from app.domain.errors import Conflict, Invalid
from app.models import (
    ACTIVE_TRIAL_STATES,
    Approach,
    Artifact,
    Campaign,
    CampaignEvent,
    CampaignEventKind,
    CampaignSlug,
    Metric,
    Replay,
    ReplayState,
    Settle,
    SettleState,
    ShareLink,
    Trial,
    utcnow,
)
from app.protocol.messages import Cancel
from app.schemas import CampaignRename

log = logging.getLogger(__name__)


def _record(session: Session, campaign: Campaign, kind: CampaignEventKind, detail: str, actor: str) -> CampaignEvent:
    assert campaign.id is not None  # a stored campaign
    row = CampaignEvent(campaign_id=campaign.id, kind=kind.value, detail=detail, actor=actor)
    session.add(row)
    return row


def history(session: Session, campaign: Campaign, limit: int = 50) -> list[CampaignEvent]:
    """The campaign's lifecycle steps, newest first."""
    query = select(CampaignEvent).where(CampaignEvent.campaign_id == campaign.id)
    return list(session.exec(query.order_by(col(CampaignEvent.at).desc(), col(CampaignEvent.id).desc()).limit(limit)))


def old_slugs(session: Session, campaign: Campaign) -> list[str]:
    """The slugs that redirect to the campaign."""
    query = select(CampaignSlug.slug).where(CampaignSlug.campaign_id == campaign.id).order_by(col(CampaignSlug.id))
    return list(session.exec(query))


def rename(session: Session, campaign: Campaign, data: CampaignRename, actor: str) -> CampaignEvent:
    """Give the campaign a new slug. Its old one redirects to it from now on (and no other campaign may take it
    meanwhile); taking back one of its own old slugs ends that slug's redirect."""
    old, new = campaign.slug, data.slug
    if new == old:
        raise Invalid(f"The campaign is {old!r} already.", field="slug")
    own = session.exec(
        select(CampaignSlug).where(CampaignSlug.slug == new, CampaignSlug.campaign_id == campaign.id)
    ).first()
    if own is not None:
        session.delete(own)
    else:
        taken = slug_taken(session, new)
        if taken:
            raise Conflict(taken, field="slug")
    assert campaign.id is not None
    session.add(CampaignSlug(slug=old, campaign_id=campaign.id))
    campaign.slug = new
    campaign.updated_at = utcnow()
    session.add(campaign)
    event = _record(session, campaign, CampaignEventKind.renamed, f"{old} → {new}", actor)
    session.flush()
    return event


def active_trials(session: Session, campaign: Campaign) -> list[Trial]:
    query = select(Trial).where(Trial.campaign_id == campaign.id, col(Trial.state).in_(ACTIVE_TRIAL_STATES))
    return list(session.exec(query.order_by(col(Trial.id))))


@dataclass
class Archived:
    """What archiving did: the trials it cancelled, and the Cancel messages for the runners that run some."""

    event: CampaignEvent
    cancelled: list[Trial] = field(default_factory=list)
    messages: list[tuple[int, Cancel]] = field(default_factory=list)  # (runner id, its Cancel)


def archive(session: Session, campaign: Campaign, actor: str, *, cancel_active: bool = False) -> Archived:
    """Read-only from now on, off the front page (under Archived), restorable. Refused while trials are queued
    or running, unless `cancel_active`: then they are cancelled in this same step (a running one is asked to
    stop; its runner's report of its end is still recorded), open repeats and replays are stopped."""
    if campaign.archived_at is not None:
        raise Conflict(f"Campaign {campaign.name!r} is archived already.")
    active = active_trials(session, campaign)
    if active and not cancel_active:
        ids = ", ".join(f"#{t.id}" for t in active[:5]) + (" ..." if len(active) > 5 else "")
        raise Conflict(
            f"Campaign {campaign.name!r} has {len(active)} trial(s) queued or running ({ids}): cancel them, or "
            "archive with “cancel them” checked to cancel them in the same step.",
            field="cancel_active",
        )
    done = Archived(event=CampaignEvent(campaign_id=campaign.id or 0, kind=""))
    for row in session.exec(
        select(Replay).where(Replay.campaign_id == campaign.id, Replay.state == ReplayState.running)
    ):
        done.cancelled.extend(replay.cancel(session, campaign, row.id or 0, actor))
    for settle in session.exec(
        select(Settle).where(Settle.campaign_id == campaign.id, Settle.state == SettleState.open)
    ):
        repeats.stop(session, settle, f"stopped: the campaign was archived by {actor}")
    for trial in active:
        locked = queue.lock_trial(session, trial.id or 0)
        if locked.state not in ACTIVE_TRIAL_STATES or locked.cancel_requested:
            continue
        message = trials.request_cancel(session, locked, actor)
        done.cancelled.append(locked)
        if message is not None and locked.runner_id is not None:
            done.messages.append((locked.runner_id, message))
    campaign.archived_at = utcnow()
    campaign.updated_at = campaign.archived_at
    session.add(campaign)
    cancelled = f"; cancelled {', '.join(f'#{t.id}' for t in done.cancelled)}" if done.cancelled else ""
    done.event = _record(session, campaign, CampaignEventKind.archived, f"archived{cancelled}", actor)
    session.flush()
    return done


def restore(session: Session, campaign: Campaign, actor: str) -> CampaignEvent:
    if campaign.archived_at is None:
        raise Conflict(f"Campaign {campaign.name!r} is not archived.")
    campaign.archived_at = None
    campaign.updated_at = utcnow()
    session.add(campaign)
    event = _record(session, campaign, CampaignEventKind.restored, "restored", actor)
    session.flush()
    return event


@dataclass(frozen=True)
class Deleted:
    slug: str
    removed: dict[str, int]  # rows per kind
    blobs: list[str]  # artifact files (sha256) no other row refers to: the caller removes them after the commit


def _count(session: Session, table: type, campaign_id: int) -> int:
    return int(session.exec(select(func.count()).select_from(table).where(table.campaign_id == campaign_id)).one())  # type: ignore[attr-defined]


def delete(session: Session, campaign: Campaign, confirm: str, actor: str) -> Deleted:
    """Delete an archived campaign for good, with every row of its own (approaches, trials, logs, metrics,
    artifacts, share links, slugs, history, ...: the database's ON DELETE CASCADE from `campaign`), nothing
    else. Only from the archive, with its name typed in `confirm`, and not while a trial of it still runs."""
    if campaign.archived_at is None:
        raise Conflict(
            f"Campaign {campaign.name!r} is not archived: archive it first (deleting is done from the archive).",
            field="archived",
        )
    if confirm.strip() != campaign.name:
        raise Invalid(f"Type the campaign's name, {campaign.name!r}, to confirm the delete.", field="confirm")
    still = active_trials(session, campaign)
    if still:
        raise Conflict(
            f"Trial #{still[0].id} of {campaign.name!r} is still stopping: delete once its runner has ended it.",
            field="confirm",
        )
    cid = campaign.id
    assert cid is not None
    removed = {
        "approaches": _count(session, Approach, cid),
        "trials": _count(session, Trial, cid),
        "metrics": _count(session, Metric, cid),
        "artifacts": _count(session, Artifact, cid),
        "share_links": _count(session, ShareLink, cid),
    }
    mine = select(Artifact.sha256).where(Artifact.campaign_id == cid)
    shas = set(session.exec(mine))
    slug = campaign.slug
    session.expunge_all()  # the rows go in SQL (the cascade), not one by one through the session
    session.execute(sql_delete(Campaign).where(col(Campaign.id) == cid))
    kept = set(session.exec(select(Artifact.sha256).where(col(Artifact.sha256).in_(shas)))) if shas else set()
    log.info("campaign %r deleted by %s: %s", slug, actor, removed)
    return Deleted(slug=slug, removed=removed, blobs=sorted(shas - kept))
