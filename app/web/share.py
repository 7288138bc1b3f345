"""Share links: operators create and revoke them; anyone holding one reads the status page.

Everything under /s/ is read-only: GET only (other methods get 405), no forms, no login, and
headers that keep the token out of referrers, caches and search engines.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from sqlmodel import Session

from app.config import resource_dir
from app.deps import OperatorDep, RowId, SessionDep, public_base_url
from app.domain import campaigns
from app.domain.answer import AnswerQuery, read_answer, throughput_rows
from app.domain.sharing import (
    create_share_link,
    get_share_link,
    list_share_links,
    public_replays,
    resolve_share_token,
    revoke_share_link,
    share_url,
    status_report,
)
from app.models import Campaign
from app.state import app_state
from app.templating import PLOTLY_JS
from app.web.answer_view import answer_figures, speculation_context, throughput_figure
from app.web.render import render

router = APIRouter(include_in_schema=False)
CHARTS_JS = resource_dir("static") / "charts.js"

# The status page needs its own inline styles and plotly.js from this server, and nothing else.
PUBLIC_HEADERS = {
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex, nofollow",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; "
        "img-src 'self' data: blob:; font-src data:; connect-src 'none'; "
        "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
}
# The one-file export opens offline, so plotly.js and the chart code are inlined into it.
EXPORT_HEADERS = {
    **PUBLIC_HEADERS,
    "Content-Security-Policy": PUBLIC_HEADERS["Content-Security-Policy"].replace(
        "script-src 'self'", "script-src 'unsafe-inline'"
    ),
}


def _secret(request: Request) -> str:
    return app_state(request).settings.resolved_secret_key()


def _links(request: Request, session: Session, campaign: Campaign, created_id: int | None = None) -> Response:
    base = public_base_url(request)
    rows = [
        {"link": link, "url": share_url(link, _secret(request), base)} for link in list_share_links(session, campaign)
    ]
    return render(
        request, "_partials/share_links.html", {"campaign": campaign, "share_links": rows, "created_id": created_id}
    )


@router.get("/campaigns/{slug}/share-links")
def share_links(request: Request, session: SessionDep, operator: OperatorDep, slug: str) -> Response:
    return _links(request, session, campaigns.get_campaign(session, slug))


@router.post("/campaigns/{slug}/share-links")
def create_link(
    request: Request, session: SessionDep, operator: OperatorDep, slug: str, name: Annotated[str, Form()] = ""
) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    link = create_share_link(session, campaign, name, operator.name)
    return _links(request, session, campaign, created_id=link.id)


@router.post("/campaigns/{slug}/share-links/{link_id}/revoke")
def revoke_link(request: Request, session: SessionDep, operator: OperatorDep, slug: str, link_id: RowId) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    revoke_share_link(session, get_share_link(session, campaign, link_id))
    return _links(request, session, campaign)


def _status_context(session: Session, campaign: Campaign, conditions: str | None = None) -> dict[str, Any]:
    answer = read_answer(session, campaign, AnswerQuery(conditions))
    report = answer.report
    rows = throughput_rows(answer.metrics, answer.approaches)
    figures = answer_figures(answer)
    return {
        "status": status_report(session, campaign, report, rows, answer.approaches),
        "chart_break_even": figures["chart_break_even"],
        "chart_comparison": figures["chart_comparison"],
        "chart_throughput": throughput_figure(answer, campaign),
        "generated_at": datetime.now(UTC),
        "replays": public_replays(session, campaign),
        "engine_check": answer.engine_check,
        **speculation_context(session, campaign, answer, read_only=True),
    }


@router.get("/s/{token}")
def status_page(request: Request, session: SessionDep, token: str, conditions: str | None = None) -> Response:
    _link, campaign = resolve_share_token(session, token, _secret(request))
    ctx = {**_status_context(session, campaign, conditions), "export": False, "export_url": f"/s/{token}/export.html"}
    return render(request, "status.html", ctx, headers=PUBLIC_HEADERS)


@router.get("/s/{token}/export.html")
def status_export(request: Request, session: SessionDep, token: str) -> Response:
    """The status page as one file: inline CSS, plotly.js and figure JSON, so it opens offline."""
    _link, campaign = resolve_share_token(session, token, _secret(request))
    ctx = _status_context(session, campaign)
    html = (
        app_state(request)
        .templates.get_template("status.html")
        .render(
            **ctx,
            export=True,
            export_url=None,
            plotly_js=PLOTLY_JS.read_text(encoding="utf-8"),
            charts_js=CHARTS_JS.read_text(encoding="utf-8"),
        )
    )
    filename = f"{campaign.slug}-status-{ctx['generated_at']:%Y%m%d}.html"
    return HTMLResponse(html, headers={**EXPORT_HEADERS, "Content-Disposition": f'attachment; filename="{filename}"'})


@router.api_route("/s/{rest:path}", methods=["POST", "PUT", "PATCH", "DELETE"])
def read_only(rest: str) -> Response:
    raise HTTPException(405, "A status page is read-only.", headers={"Allow": "GET"})
