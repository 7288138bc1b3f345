"""A person's inbox (app/domain/inbox.py): the page, the navigation's unread count, read marks, and the
Watch buttons of the campaign and approach pages. Any role: watching and reading change only the person's
own inbox (tests/support/routes.VIEWER_MAY)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.deps import PageAfter, RowId, SessionDep, UserDep, require_user
from app.domain import campaigns, inbox
from app.web.render import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_user)])


def _page(request: Request, session: SessionDep, operator: UserDep, before: int | None = None) -> dict:
    found = inbox.items(session, operator.user_id, before=before, limit=inbox.PAGE + 1)
    return {
        "items": found[: inbox.PAGE],
        "more": found[inbox.PAGE - 1].id if len(found) > inbox.PAGE else None,
        "unread": inbox.unread_count(session, operator.user_id),
        "watches": inbox.watches(session, operator.user_id),
        "has_person": operator.user_id is not None,
    }


@router.get("/inbox")
def inbox_page(request: Request, session: SessionDep, operator: UserDep, before: PageAfter = None) -> Response:
    block = "items" if before is not None else None
    return render(request, "inbox.html", _page(request, session, operator, before), block=block)


@router.get("/inbox/badge")
def inbox_badge(request: Request, session: SessionDep, operator: UserDep) -> Response:
    """The navigation's Inbox link with the unread count: re-fetched on the person's inbox notices."""
    return render(request, "_partials/inbox_link.html", {"inbox_unread": inbox.unread_count(session, operator.user_id)})


@router.post("/inbox/read")
def read_all(request: Request, session: SessionDep, operator: UserDep) -> Response:
    inbox.mark_read(session, operator.user_id)
    return render(request, "inbox.html", _page(request, session, operator), block="inbox")


@router.post("/inbox/{item_id}/read")
def read_one(request: Request, session: SessionDep, operator: UserDep, item_id: RowId) -> Response:
    inbox.mark_read(session, operator.user_id, item_id)
    return render(request, "inbox.html", _page(request, session, operator), block="inbox")


def _watch_button(request: Request, session: SessionDep, operator: UserDep, slug: str, key: str | None) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    approach = campaigns.get_approach(session, campaign, key) if key is not None else None
    ctx = {
        "campaign": campaign,
        "watch_approach": approach,
        "watching": inbox.watching(session, operator.user_id, campaign, approach),
    }
    return render(request, "_partials/watch.html", ctx)


@router.post("/campaigns/{slug}/watch")
def watch_campaign(request: Request, session: SessionDep, operator: UserDep, slug: str) -> Response:
    inbox.watch(session, operator.user_id, campaigns.get_campaign(session, slug))
    return _watch_button(request, session, operator, slug, None)


@router.post("/campaigns/{slug}/unwatch")
def unwatch_campaign(request: Request, session: SessionDep, operator: UserDep, slug: str) -> Response:
    inbox.unwatch(session, operator.user_id, campaigns.get_campaign(session, slug))
    return _watch_button(request, session, operator, slug, None)


@router.post("/campaigns/{slug}/approaches/{key}/watch")
def watch_approach(request: Request, session: SessionDep, operator: UserDep, slug: str, key: str) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    inbox.watch(session, operator.user_id, campaign, campaigns.get_approach(session, campaign, key))
    return _watch_button(request, session, operator, slug, key)


@router.post("/campaigns/{slug}/approaches/{key}/unwatch")
def unwatch_approach(request: Request, session: SessionDep, operator: UserDep, slug: str, key: str) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    inbox.unwatch(session, operator.user_id, campaign, campaigns.get_approach(session, campaign, key))
    return _watch_button(request, session, operator, slug, key)
