"""A person's inbox and watches as JSON (app/domain/inbox.py): any role, each their own."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from app.deps import PageAfter, RowId, SessionDep, UserDep, require_user
from app.domain import campaigns, inbox

router = APIRouter(prefix="/api", tags=["inbox"], dependencies=[Depends(require_user)])


class InboxItemPublic(BaseModel):
    id: int
    event: str = Field(description="Its kind: trial.ended, verdict.waiting or retest.flagged.")
    title: str
    body: str
    link: str = Field(description="A path on the board.")
    campaign_id: int | None
    approach_id: int | None
    created_at: datetime
    read_at: datetime | None


class InboxPublic(BaseModel):
    unread: int
    items: list[InboxItemPublic]


class WatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    campaign: str = Field(max_length=80, description="The campaign's slug.")
    approach: str | None = Field(default=None, max_length=80, description="One approach's key (none: the campaign).")


class WatchPublic(BaseModel):
    campaign: str
    approach: str | None


ITEM_OWN = {"id", "created_at", "read_at"}  # the inbox item's own; the rest is its event's


def _item(i: inbox.Item) -> InboxItemPublic:
    of_event = i.event.model_dump(include=set(InboxItemPublic.model_fields) - ITEM_OWN)
    return InboxItemPublic(**of_event, id=i.id, created_at=i.created_at, read_at=i.read_at)


@router.get("/inbox", response_model=InboxPublic)
def get_inbox(
    session: SessionDep,
    operator: UserDep,
    unread: bool = False,
    before: PageAfter = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> InboxPublic:
    """Your inbox, newest first (`unread=true`: only the unread); pass the last id as `before` for more."""
    found = inbox.items(session, operator.user_id, unread_only=unread, before=before, limit=limit)
    return InboxPublic(unread=inbox.unread_count(session, operator.user_id), items=[_item(i) for i in found])


@router.post("/inbox/read", response_model=InboxPublic)
def read_all(session: SessionDep, operator: UserDep) -> InboxPublic:
    inbox.mark_read(session, operator.user_id)
    return InboxPublic(unread=0, items=[])


@router.post("/inbox/{item_id}/read", response_model=InboxPublic)
def read_one(item_id: RowId, session: SessionDep, operator: UserDep) -> InboxPublic:
    inbox.mark_read(session, operator.user_id, item_id)
    return InboxPublic(unread=inbox.unread_count(session, operator.user_id), items=[])


@router.get("/watches", response_model=list[WatchPublic])
def list_watches(session: SessionDep, operator: UserDep) -> list[WatchPublic]:
    return [
        WatchPublic(campaign=w.campaign.slug, approach=w.approach.key if w.approach else None)
        for w in inbox.watches(session, operator.user_id)
    ]


def _target(session: SessionDep, data: WatchRequest):
    campaign = campaigns.get_campaign(session, data.campaign)
    return campaign, campaigns.get_approach(session, campaign, data.approach) if data.approach else None


@router.post("/watches", response_model=WatchPublic, status_code=201)
def add_watch(data: WatchRequest, session: SessionDep, operator: UserDep) -> WatchPublic:
    """Watch a campaign (or one approach): its trials ending, verdicts waiting and re-test flags reach your inbox."""
    campaign, approach = _target(session, data)
    inbox.watch(session, operator.user_id, campaign, approach)
    return WatchPublic(campaign=campaign.slug, approach=approach.key if approach else None)


@router.post("/watches/remove", response_model=WatchPublic)
def remove_watch(data: WatchRequest, session: SessionDep, operator: UserDep) -> WatchPublic:
    campaign, approach = _target(session, data)
    inbox.unwatch(session, operator.user_id, campaign, approach)
    return WatchPublic(campaign=campaign.slug, approach=approach.key if approach else None)
