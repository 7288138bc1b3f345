"""In-app notifications (issue 45): each person watches campaigns or approaches, and the events of what they
watch reach their inbox, unread until they read it.

An event is recorded once (`EventRecord`, by `notifications.record`, whoever follows it); `deliver` puts it in
the inbox of every person who watches its campaign or its approach, when its kind is one a person is told
in-app (`INBOX_EVENTS`, a choice among `NotificationEvent`'s kinds, never a list of its own). The users it
reached are left on the session (`session.info[INBOX_USERS]`) for the service layer to publish `inbox:<id>`
after commit (app/services/events.py), so a person's unread count moves live. Functions flush, never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, update
from sqlmodel import Session, col, select

from app.domain.errors import Invalid, NotFound
from app.models import Approach, Campaign, EventRecord, InboxItem, NotificationEvent, User, Watch, utcnow

# What reaches a watcher's inbox: trials ending, verdicts waiting for a person, re-test flags.
INBOX_EVENTS = frozenset(
    {NotificationEvent.trial_ended, NotificationEvent.verdict_waiting, NotificationEvent.retest_flagged}
)
INBOX_USERS = "inbox_users"  # session.info key: the users whose inbox changed in this transaction
PAGE = 50


def _changed(session: Session, user_ids: set[int]) -> None:
    if user_ids:
        session.info.setdefault(INBOX_USERS, set()).update(user_ids)


def anyone_watches(session: Session) -> bool:
    return session.exec(select(Watch.id).limit(1)).first() is not None


def deliver(session: Session, record: EventRecord) -> int:
    """Put `record` in the inbox of every enabled person who watches its campaign (whole) or its approach, once
    each; returns how many items were written."""
    if record.event not in INBOX_EVENTS or record.campaign_id is None or record.id is None:
        return 0
    whole_or_this: Any = col(Watch.approach_id).is_(None)
    if record.approach_id is not None:
        whole_or_this = whole_or_this | (col(Watch.approach_id) == record.approach_id)
    watching = (col(Watch.campaign_id) == record.campaign_id) & whole_or_this
    users = set(
        session.exec(
            select(Watch.user_id)
            .join(User, col(User.id) == col(Watch.user_id))
            .where(watching, col(User.disabled_at).is_(None))
        ).all()
    )
    if not users:
        return 0
    have = set(
        session.exec(
            select(InboxItem.user_id).where(InboxItem.event_id == record.id, col(InboxItem.user_id).in_(users))
        ).all()
    )
    now = utcnow()
    new = sorted(users - have)
    if new:
        session.execute(insert(InboxItem), [{"user_id": u, "event_id": record.id, "created_at": now} for u in new])
        _changed(session, set(new))
    return len(new)


# --- watching ---------------------------------------------------------------------------------------------


def _watch_row(session: Session, user_id: int, campaign: Campaign, approach: Approach | None) -> Watch | None:
    return session.exec(
        select(Watch).where(
            Watch.user_id == user_id,
            Watch.campaign_id == campaign.id,
            col(Watch.approach_id).is_(None) if approach is None else col(Watch.approach_id) == approach.id,
        )
    ).first()


def _person(user_id: int | None) -> int:
    if user_id is None:
        raise Invalid("watching needs a person: log in as one (or use a person's API token)", field="user")
    return user_id


def watching(session: Session, user_id: int | None, campaign: Campaign, approach: Approach | None = None) -> bool:
    return user_id is not None and _watch_row(session, user_id, campaign, approach) is not None


def watch(session: Session, user_id: int | None, campaign: Campaign, approach: Approach | None = None) -> Watch:
    """Follow the campaign (approach None) or one of its approaches; following it again changes nothing."""
    uid = _person(user_id)
    if approach is not None and approach.campaign_id != campaign.id:
        raise NotFound(f"No approach {approach.key!r} in campaign {campaign.slug!r}.", field="approach")
    found = _watch_row(session, uid, campaign, approach)
    if found is not None:
        return found
    row = Watch(user_id=uid, campaign_id=campaign.id, approach_id=approach.id if approach else None)  # type: ignore[arg-type]
    session.add(row)
    session.flush()
    return row


def unwatch(session: Session, user_id: int | None, campaign: Campaign, approach: Approach | None = None) -> bool:
    """Stop following it; False when it was not followed."""
    found = _watch_row(session, _person(user_id), campaign, approach)
    if found is None:
        return False
    session.delete(found)
    session.flush()
    return True


@dataclass(frozen=True)
class Watched:
    campaign: Campaign
    approach: Approach | None


def watches(session: Session, user_id: int | None) -> list[Watched]:
    if user_id is None:
        return []
    rows = session.exec(
        select(Watch, Campaign, Approach)
        .join(Campaign, col(Campaign.id) == col(Watch.campaign_id))
        .join(Approach, col(Approach.id) == col(Watch.approach_id), isouter=True)
        .where(Watch.user_id == user_id)
        .order_by(col(Campaign.slug), col(Approach.key))
    ).all()
    return [Watched(c, a) for _w, c, a in rows]


# --- the inbox --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    id: int
    event: EventRecord
    read_at: datetime | None
    created_at: datetime


def unread_count(session: Session, user_id: int | None) -> int:
    if user_id is None:
        return 0
    return int(
        session.exec(
            select(func.count())
            .select_from(InboxItem)
            .where(InboxItem.user_id == user_id, col(InboxItem.read_at).is_(None))
        ).one()
    )


def items(
    session: Session, user_id: int | None, *, unread_only: bool = False, before: int | None = None, limit: int = PAGE
) -> list[Item]:
    """The person's inbox, newest first; a page of `limit` items older than item `before`."""
    if user_id is None:
        return []
    query = (
        select(InboxItem, EventRecord)
        .join(EventRecord, col(EventRecord.id) == col(InboxItem.event_id))
        .where(InboxItem.user_id == user_id)
    )
    if unread_only:
        query = query.where(col(InboxItem.read_at).is_(None))
    if before is not None:
        query = query.where(col(InboxItem.id) < before)
    rows = session.exec(query.order_by(col(InboxItem.id).desc()).limit(limit)).all()
    return [Item(i.id, e, i.read_at, i.created_at) for i, e in rows]  # type: ignore[arg-type]


def mark_read(session: Session, user_id: int | None, item_id: int | None = None) -> int:
    """Mark one of the person's items read (item_id), or all of them; NotFound for an item not theirs."""
    uid = _person(user_id)
    query = update(InboxItem).where(col(InboxItem.user_id) == uid, col(InboxItem.read_at).is_(None))
    if item_id is not None:
        mine = session.get(InboxItem, item_id)
        if mine is None or mine.user_id != uid:
            raise NotFound(f"No inbox item #{item_id} of yours.", field="item")
        query = query.where(col(InboxItem.id) == item_id)
    result = session.execute(query.values(read_at=utcnow()))
    changed = int(getattr(result, "rowcount", 0) or 0)
    if changed:
        _changed(session, {uid})
    return changed
