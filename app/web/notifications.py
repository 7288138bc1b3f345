"""The Notifications page (admin): destinations with their redacted URL, events and delivery log, a form to
add one, "Send a test message" and Disable. Each write answers htmx with the page's panel block, a plain
form with a 303 back to the page."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from app.deps import AdminDep, RowId, SessionDep
from app.domain import campaigns, notifications
from app.web.render import render

router = APIRouter(include_in_schema=False)


def _context(session: Any, shown: int | None = None) -> dict[str, Any]:
    targets = notifications.list_targets(session)
    shown_target = next((t for t, _ in targets if t.id == shown), None)
    return {
        "targets": targets,
        "counts": notifications.delivery_counts(session),
        "events": notifications.EVENTS,
        "campaigns": campaigns.list_campaigns(session),
        "shown": shown_target,
        "log": notifications.deliveries(session, shown_target, limit=50) if shown_target else [],
    }


def _answer(request: Request, session: Any, shown: int | None = None) -> Response:
    if request.headers.get("hx-request"):
        return render(request, "notifications.html", _context(session, shown), block="panel")
    return RedirectResponse("/notifications" + (f"?shown={shown}" if shown else ""), status_code=303)


@router.get("/notifications")
def page(request: Request, session: SessionDep, operator: AdminDep, shown: int | None = None) -> Response:
    return render(request, "notifications.html", _context(session, shown))


@router.post("/notifications")
def add(
    request: Request,
    session: SessionDep,
    admin: AdminDep,
    url: Annotated[str, Form(max_length=notifications.MAX_URL)],
    events: Annotated[list[str], Form()],
    campaign: Annotated[str, Form(max_length=80)] = "",
    waiting_hours: Annotated[float, Form(gt=0, le=720)] = 4.0,
) -> Response:
    chosen = campaigns.get_campaign(session, campaign) if campaign else None
    target = notifications.create_target(
        session, url, events, campaign=chosen, actor=admin.name, waiting_hours=waiting_hours
    )
    return _answer(request, session, target.id)


@router.post("/notifications/{target_id}/test")
def test(request: Request, session: SessionDep, admin: AdminDep, target_id: RowId) -> Response:
    notifications.test_message(session, notifications.get_target(session, target_id), admin.name)
    return _answer(request, session, target_id)


@router.post("/notifications/{target_id}/disable")
def disable(request: Request, session: SessionDep, admin: AdminDep, target_id: RowId) -> Response:
    notifications.disable_target(session, notifications.get_target(session, target_id))
    return _answer(request, session, target_id)
