"""Change points on the board (app/domain/changes.py): the approach page's "Changes" section (its series
with change points marked, the re-open proposal) and the campaign page's "Changes" panel, both htmx
fragments that re-fetch on the page feed (the pass publishes the approach and campaign topics)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.charts import series_with_changes
from app.deps import SessionDep
from app.domain import campaigns, changes
from app.web.render import render

router = APIRouter(include_in_schema=False)


@router.get("/campaigns/{slug}/approaches/{key}/changes")
def approach_changes(request: Request, session: SessionDep, slug: str, key: str) -> Response:
    campaign, approach = campaigns.campaign_approach(session, slug, key)
    view = changes.approach_changes(session, approach)
    figures = [series_with_changes(series, runner, marked) for series, runner, marked in view.charted]
    ctx = {"campaign": campaign, "approach": approach, "view": view, "figures": figures, "describe": changes.describe}
    return render(request, "_partials/changes_approach.html", ctx)


@router.get("/campaigns/{slug}/changes")
def campaign_changes(request: Request, session: SessionDep, slug: str) -> Response:
    campaign = campaigns.get_campaign(session, slug)
    rows = changes.of_campaign(session, campaign)
    ctx = {"campaign": campaign, "rows": rows, "describe": changes.describe}
    return render(request, "_partials/changes_campaign.html", ctx)
