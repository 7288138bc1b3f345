"""Notification destinations, JSON (admin): add one, list them (URLs redacted), read a destination's delivery
log, send a test message, disable one. The rules and the outbox are app/domain/notifications.py; the page is
app/web/notifications.py."""

from __future__ import annotations

from enum import Enum

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from app.api.users import Utc
from app.deps import AdminDep, RowId, SessionDep, require_admin
from app.domain import campaigns, notifications
from app.models import Campaign, NotificationOutbox, NotificationTarget
from app.schemas import RowPublic

# The events a destination may follow, as the schema's enum (the test message is the board's own).
EventName = Enum("EventName", {e.replace(".", "_"): e for e in notifications.EVENTS}, type=str)  # type: ignore[misc]

router = APIRouter(prefix="/api", tags=["notifications"], dependencies=[Depends(require_admin)])


class NotificationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    url: str = Field(
        min_length=1,
        max_length=notifications.MAX_URL,
        pattern=r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$",
        description="An Apprise URL: slack://..., msteams://..., discord://..., ntfy://..., json://host/path, mailto://...",
    )
    events: list[EventName] = Field(min_length=1, max_length=len(notifications.EVENTS))
    campaign: str | None = Field(None, max_length=80, description="A campaign's slug; null: every campaign.")
    waiting_hours: float = Field(4.0, gt=0, le=720, description="verdict.waiting: after this many hours.")


class NotificationPublic(RowPublic):
    id: int
    url: str = Field(description="Redacted: secrets masked, query string left out.")
    events: list[str]
    campaign: str | None
    waiting_hours: float
    created_by: str
    created_at: Utc
    disabled_at: Utc | None
    deliveries: dict[str, int] = Field(default_factory=dict, description="Outbox rows per state.")

    @classmethod
    def of(
        cls, target: NotificationTarget, slug: str | None, counts: dict[str, int] | None = None
    ) -> NotificationPublic:
        events = list(target.events or [])
        return cls.of_row(target, url=target.redacted, events=events, campaign=slug, deliveries=counts or {})


class DeliveryPublic(RowPublic):
    id: int
    event: str
    title: str
    state: str = Field(description="pending | sending | retrying | sent | failed")
    attempts: int
    last_error: str
    batch_size: int = Field(description="Events in the message that carried it (a digest when > 1).")
    created_at: Utc
    next_attempt_at: Utc
    sent_at: Utc | None

    @classmethod
    def of(cls, row: NotificationOutbox) -> DeliveryPublic:
        return cls.of_row(row)


def _slug(session: SessionDep, target: NotificationTarget) -> str | None:
    if target.campaign_id is None:
        return None
    campaign = session.get(Campaign, target.campaign_id)
    return campaign.slug if campaign else None


@router.post("/notifications", response_model=NotificationPublic, status_code=201)
def create(data: NotificationCreate, session: SessionDep, admin: AdminDep) -> NotificationPublic:
    campaign = campaigns.get_campaign(session, data.campaign) if data.campaign else None
    target = notifications.create_target(
        session,
        data.url,
        [e.value for e in data.events],
        campaign=campaign,
        actor=admin.name,
        waiting_hours=data.waiting_hours,
    )
    return NotificationPublic.of(target, campaign.slug if campaign else None)


@router.get("/notifications", response_model=list[NotificationPublic])
def list_all(session: SessionDep) -> list[NotificationPublic]:
    counts = notifications.delivery_counts(session)
    return [NotificationPublic.of(t, slug, counts.get(t.id or 0)) for t, slug in notifications.list_targets(session)]


@router.get("/notifications/{target_id}/deliveries", response_model=list[DeliveryPublic])
def deliveries(target_id: RowId, session: SessionDep) -> list[DeliveryPublic]:
    """The delivery log, newest first (the last 200)."""
    target = notifications.get_target(session, target_id)
    return [DeliveryPublic.of(row) for row in notifications.deliveries(session, target)]


@router.post("/notifications/{target_id}/test", response_model=DeliveryPublic, status_code=202)
def send_test(target_id: RowId, session: SessionDep, admin: AdminDep) -> DeliveryPublic:
    """Queue a test message; its row in the delivery log says when it was sent, or why not."""
    target = notifications.get_target(session, target_id)
    return DeliveryPublic.of(notifications.test_message(session, target, admin.name))


@router.post("/notifications/{target_id}/disable", response_model=NotificationPublic)
def disable(target_id: RowId, session: SessionDep) -> NotificationPublic:
    target = notifications.disable_target(session, notifications.get_target(session, target_id))
    return NotificationPublic.of(target, _slug(session, target))
