"""Trial pages: a trial with its live log, a campaign's and an approach's recent trials and queue, and the
campaign page's "Run next candidate" button (an htmx partial that sends `HX-Trigger: campaign-changed`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlmodel import Session

from app.deps import OperatorDep, PageAfter, RowId, take_feed_mark
from app.domain import queue as queue_domain
from app.domain import trial_reads, trials
from app.domain.campaigns import get_campaign
from app.models import Approach, Campaign, Runner
from app.services.trials import cancel, start_next
from app.state import app_state
from app.web.render import CHANGED, render

router = APIRouter(include_in_schema=False)

RECENT_TRIALS = 8
TRIAL_PAGE = 50


def _trial_page(session: Session, trial_id: int) -> dict[str, Any]:
    trial = trials.get_trial(session, trial_id)
    return {
        "trial": trial,
        "view": trial_reads.trial_view(trial),
        "approach": session.get(Approach, trial.approach_id),
        "campaign": session.get(Campaign, trial.campaign_id),
        "runner": session.get(Runner, trial.runner_id) if trial.runner_id else None,
    }


def _recent(session: Session, slug: str, approach_key: str | None = None, before: int | None = None) -> dict[str, Any]:
    """The campaign's latest trials, or one approach's a page at a time (newest first, older than `before`)."""
    campaign = get_campaign(session, slug)
    limit = RECENT_TRIALS if approach_key is None else TRIAL_PAGE
    page = trial_reads.list_trials(session, campaign=slug, approach=approach_key, before=before, limit=limit)
    more_url = None
    if approach_key is not None and page.next_before is not None:
        more_url = f"/campaigns/{campaign.slug}/approaches/{approach_key}/trials?before={page.next_before}"
    rows = [(r.trial, r.approach, r.runner_name) for r in page.rows]
    return {"campaign": campaign, "rows": rows, "more_url": more_url}


def _queue(session: Session, slug: str) -> dict[str, Any]:
    campaign = get_campaign(session, slug)
    return {"campaign": campaign, "queue": queue_domain.campaign_queue(session, campaign)}


@router.get("/trials/{trial_id}")
async def trial_page(request: Request, trial_id: RowId, operator: OperatorDep) -> HTMLResponse:
    take_feed_mark(request)  # before the read
    ctx = await app_state(request).db.read_in_tx(_trial_page, trial_id)
    return render(request, "trial.html", ctx)


@router.post("/trials/{trial_id}/cancel")
async def trial_cancel(request: Request, trial_id: RowId, operator: OperatorDep) -> Response:
    await cancel(request.app, trial_id, operator.name)
    return Response(status_code=204, headers=CHANGED)


@router.post("/campaigns/{slug}/run-next")
async def run_next(request: Request, slug: str, operator: OperatorDep) -> HTMLResponse:
    result = await start_next(request.app, slug, operator.name)
    campaign = await app_state(request).db.read_in_tx(get_campaign, slug)
    return render(request, "_partials/run_next.html", {"campaign": campaign, "result": result}, headers=CHANGED)


@router.post("/campaigns/{slug}/approaches/{key}/run")
async def run_this(request: Request, slug: str, key: str, operator: OperatorDep) -> HTMLResponse:
    result = await start_next(request.app, slug, operator.name, approach_key=key)
    campaign = await app_state(request).db.read_in_tx(get_campaign, slug)
    return render(
        request,
        "_partials/run_this.html",
        {"campaign": campaign, "approach": result.approach, "result": result},
        headers=CHANGED,
    )


@router.get("/campaigns/{slug}/queue")
async def campaign_queue(request: Request, slug: str, operator: OperatorDep) -> HTMLResponse:
    """The campaign's queue (an htmx fragment, empty when nothing waits)."""
    ctx = await app_state(request).db.read_in_tx(_queue, slug)
    return render(request, "_partials/queue.html", ctx)


@router.get("/campaigns/{slug}/trials")
async def campaign_trials(request: Request, slug: str, operator: OperatorDep) -> HTMLResponse:
    ctx = await app_state(request).db.read_in_tx(_recent, slug)
    return render(request, "_partials/trial_rows.html", ctx)


@router.get("/campaigns/{slug}/approaches/{key}/trials")
async def approach_trials(
    request: Request, slug: str, key: str, operator: OperatorDep, before: PageAfter = None
) -> HTMLResponse:
    """The approach's trials, newest first; `before` (htmx, from the "more" row): the next page's rows only."""
    ctx = await app_state(request).db.read_in_tx(_recent, slug, key, before)
    return render(request, "_partials/trial_rows.html", ctx, block="rows" if before is not None else None)
