"""Render a page, or one block of it for an htmx request, with the context every page needs."""

from __future__ import annotations

from typing import Any, cast

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.deps import current_operator, request_state
from app.domain import inbox
from app.services.page_events import PAGE_EVENTS
from app.state import app_state

# A write's answer to htmx: the campaign's fragments listen for this event (hx-trigger="campaign-changed from:body").
CHANGED = {"HX-Trigger": PAGE_EVENTS["campaign_changed"].name}


def render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    block: str | None = None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """`block` renders only that block (an htmx partial); otherwise the full page."""
    operator = current_operator(request)
    ctx = {
        "operator": operator,
        "inbox_unread": _unread(request, operator.user_id) if operator is not None and _whole(template, block) else 0,
        "csrf_token": operator.csrf_token if operator else None,
        # The page feed's mark, taken before the page read the database (app/deps.get_session).
        "feed_mark": request_state(request).feed_mark,
        **context,
    }
    # jinja2_fragments types it Response; it is Starlette's _TemplateResponse, an HTMLResponse.
    return cast(
        HTMLResponse,
        app_state(request).templates.TemplateResponse(
            request, template, ctx, block_name=block, status_code=status_code, headers=headers
        ),
    )


def _whole(template: str, block: str | None) -> bool:
    """A whole page (it has the navigation), not a block or a partial."""
    return block is None and not template.startswith("_partials/")


def _unread(request: Request, user_id: int | None) -> int:
    """The navigation's unread count (a full page only: a fragment has no navigation)."""
    if user_id is None:
        return 0
    with app_state(request).db.scope(write=False) as session:
        return inbox.unread_count(session, user_id)


def navigate(request: Request, url: str) -> Response:
    """After a form that changes page: htmx gets HX-Redirect (a full navigation, never a page
    swapped inside the page: an XHR would follow a 303 and hand htmx the whole next page);
    a plain form post gets a 303."""
    if request.headers.get("hx-request"):
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)
